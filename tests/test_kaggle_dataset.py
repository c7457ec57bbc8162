"""kaggle-dataset/build.py: FlashInfer's precompiled kernels go into the dataset with vLLM (issue 35).

Without flashinfer-cubin and flashinfer-jit-cache, FlashInfer on the Kaggle card builds its
modules with nvcc at start-up or fetches cubins from NVIDIA (devkit.doctor.offline reads both in
vllm.log), and the rerun has no network: the dataset ships what `vllm download-kernels`
would install, resolved from FlashInfer's own index when the lock is made.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _build():
    spec = importlib.util.spec_from_file_location("kaggle_dataset_build", ROOT / "kaggle-dataset" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kernels_match_the_locks_flashinfer_and_cuda():
    """The committed vllm.lock's flashinfer-python (0.7.2.post1) and CUDA runtime (13.0) name
    the kernel wheels and FlashInfer's index for cu130, as flashinfer/__main__.py builds them."""
    build = _build()
    items = build.read_lock(ROOT / "kaggle-dataset" / "vllm.lock")
    reqs, indexes = build.kernel_requirements(items)
    assert reqs == ["flashinfer-cubin==0.7.2.post1", "flashinfer-jit-cache==0.7.2.post1+cu130"]
    assert indexes == ("--extra-index-url", "https://flashinfer.ai/whl",
                       "--extra-index-url", "https://flashinfer.ai/whl/cu130")
    assert build.kernel_requirements(build.read_lock(ROOT / "kaggle-dataset" / "duck.lock")) == ([], ())


def test_a_local_version_of_flashinfer_keeps_only_its_public_part():
    build = _build()
    items = [{"name": "flashinfer-python", "version": "0.7.2.post1+cu129"},
             {"name": "nvidia-cuda-runtime-cu12", "version": "12.9.79"}]
    assert build.kernel_requirements(items)[0] == ["flashinfer-cubin==0.7.2.post1",
                                                   "flashinfer-jit-cache==0.7.2.post1+cu129"]
