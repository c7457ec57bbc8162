"""Resolve `vllm serve` command lines into vLLM's own VllmConfig, as on the Kaggle card, without one.

Run by the vLLM venv's python (0.33.0):

    echo '{"models": {"DIR": "flash-next"}, "argvs": [["vllm", "serve", "DIR", "--flag", ...], ...]}' \
        | python tests/conformance/vllm_engine_config.py

(`models`: model folders to write first, each of a tests/conformance/qwen_tiny.py shape.)

For each argv: `vllm serve`'s own parser (`make_arg_parser`), `AsyncEngineArgs.from_cli_args`
and `create_engine_config()`, where vLLM resolves the speculative config (the MTP drafter
from the checkpoint's config), the hybrid model's Mamba cache mode under prefix caching,
the Engram config, the compilation and CUDA-graph config and the scheduler's limits. The
platform is vLLM's own CUDA platform (NonNvmlCudaPlatform) answering as the Kaggle card
would (SM 12.0, the RTX PRO 6000's 97,887 MiB, one device): only those device queries are
stand-ins. vLLM's CUDA extensions link libcuda.so.1, which a machine without a driver lacks:
a stub exporting the `cu*` symbols they import (each returns CUDA_ERROR_NO_DEVICE; none is
called while resolving a config) is compiled with the system's C compiler into
~/.cache/duck-arc3/libcuda-stub/ and loaded first.

Prints one JSON line: a list with, per argv, what it resolved to (or `{"error": ...}`).
Exit 3 when no C compiler is here to make the stub.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUB_DIR = Path.home() / ".cache" / "duck-arc3" / "libcuda-stub"
CARD = {"capability": (12, 0), "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "mib": 97887}


def _imported_cu_symbols(site: Path) -> list[str]:
    """The driver API symbols the venv's extensions import (what a stub must define)."""
    names: set[str] = set()
    for so in site.rglob("*.so*"):
        if not so.is_file():
            continue
        try:
            dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True, timeout=30).stdout
            if "libcuda.so.1" not in dyn:
                continue
            und = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True,
                                 timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        names |= {w.split("@")[0] for line in und.splitlines() for w in line.split()[-1:]
                  if w.startswith("cu") and w[2:3].isupper()}
    return sorted(names)


def load_libcuda() -> str:
    """The real libcuda.so.1 where there is one; else the stub (made once)."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
        return "the driver's libcuda.so.1"
    except OSError:
        pass
    stub, src = STUB_DIR / "libcuda.so.1", STUB_DIR / "stub.c"
    code = "".join(f"int {s}(void) {{ return 100; }}\n"
                   for s in _imported_cu_symbols(Path(sysconfig.get_paths()["purelib"])))
    if not stub.exists() or not src.exists() or src.read_text() != code:  # (made again when the venv changes)
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            print("no C compiler to make the libcuda.so.1 stub", file=sys.stderr)
            sys.exit(3)
        STUB_DIR.mkdir(parents=True, exist_ok=True)
        src.write_text(code)
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(stub), str(src), "-Wl,-soname,libcuda.so.1"], check=True)
    ctypes.CDLL(str(stub), mode=ctypes.RTLD_GLOBAL)  # (a NEEDED libcuda.so.1 is then this one)
    return str(stub)


def install_card() -> None:
    import vllm.platforms
    from vllm.platforms.cuda import NonNvmlCudaPlatform
    from vllm.platforms.interface import DeviceCapability

    class KaggleCard(NonNvmlCudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(*CARD["capability"])

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return CARD["name"]

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return CARD["mib"] * 1024 ** 2

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            return 1

    vllm.platforms._current_platform = KaggleCard()


def _name(x: object) -> object:
    return getattr(x, "name", x) if x is not None else None


def resolve(argv: list[str]) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert argv[1] == "serve", argv
    args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(["--model", argv[2], *argv[3:]])
    validate_parsed_serve_args(args)
    was = os.environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH")
    try:
        c = AsyncEngineArgs.from_cli_args(args).create_engine_config()
        breakable = os.environ.get("VLLM_USE_BREAKABLE_CUDAGRAPH")
    finally:  # (vLLM sets it for some architectures: one argv's choice must not leak into the next)
        if was is None:
            os.environ.pop("VLLM_USE_BREAKABLE_CUDAGRAPH", None)
    sp, cc, sc, cache, mc = (c.speculative_config, c.compilation_config, c.scheduler_config, c.cache_config,
                             c.model_config)
    mm = getattr(mc, "multimodal_config", None)
    engram = getattr(c, "engram_config", None)
    return {
        "architecture": mc.architecture,
        "max_model_len": mc.max_model_len,
        "enforce_eager": mc.enforce_eager,
        "speculative": None if sp is None else {
            "method": sp.method, "num_speculative_tokens": sp.num_speculative_tokens,
            "draft_architecture": getattr(getattr(sp, "draft_model_config", None), "architecture", None)},
        "cache": {"enable_prefix_caching": cache.enable_prefix_caching, "mamba_cache_mode": cache.mamba_cache_mode,
                  "cache_dtype": cache.cache_dtype, "block_size": cache.block_size,
                  "mamba_block_size": getattr(cache, "mamba_block_size", None)},
        "compilation": {"mode": _name(cc.mode), "cudagraph_mode": _name(cc.cudagraph_mode),
                        "breakable_cudagraph": breakable == "1"},
        "max_num_seqs": sc.max_num_seqs, "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_scheduled_tokens": getattr(sc, "max_num_scheduled_tokens", None),
        "limit_mm_per_prompt": {k: getattr(v, "count", v) for k, v in
                                (getattr(mm, "limit_per_prompt", None) or {}).items()} if mm else None,
        "engram": None if engram is None else {"cpu_offload": getattr(engram, "cpu_offload", None)},
    }


def main() -> int:
    job = json.load(sys.stdin)
    sys.path.insert(0, str(HERE))
    from qwen_tiny import write_model_dir
    for path, shape in (job.get("models") or {}).items():
        write_model_dir(Path(path), shape=shape)
    argvs = job["argvs"]
    libcuda = load_libcuda()
    install_card()
    out = []
    for argv in argvs:
        try:
            out.append(resolve(argv))
        except Exception as e:  # one argv's failure is its finding, not the others'
            out.append({"error": f"{type(e).__name__}: {e}"[:3000]})
    print(json.dumps({"libcuda": libcuda, "card": CARD, "configs": out}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
