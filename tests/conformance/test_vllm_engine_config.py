"""What vLLM 0.33.0 makes of `duck serve`'s flags: its own `create_engine_config()` for every
serving profile and every rung of the restart ladder (opt-in: pytest -m vllm).

`vllm serve` parses the flags and then builds one VllmConfig (vllm/engine/arg_utils.py
`EngineArgs.create_engine_config`): there the speculative config is resolved (the MTP
drafter from the checkpoint's config), the hybrid model's Mamba cache mode under prefix
caching ("align": the state checkpointed at block ends, what the align pre-copy kernel of
vllm issue 54173 serves), the Engram config, the compilation and CUDA-graph modes (vLLM's
own default for each architecture, breakable CUDA graphs for Flash-Next) and the
scheduler's limits. Argument parsing alone (test_vllm_conformance.py) sees none of that.
Here each profile's exact argv on each rung (duck.config.at_rung, duck.llm.serve.command)
goes through it on the Kaggle card's platform (tests/conformance/vllm_engine_config.py: SM
12.0, 97,887 MiB) with a model folder of the profile's shape (qwen_tiny.py: Flash-Next's
`Qwen4ExpForConditionalGeneration`, the 27B profiles' `Qwen3_5ForConditionalGeneration`), and
each case asserts what it resolved to. ~5 minutes on two busy cores (one process for all).
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from duck.config import at_rung, load_config
from duck.llm.serve import command
from duck.config.profiles import get as profile

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PIN = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
           ["serve"] if r.startswith("vllm")).split("==")[1]
VENV = Path(os.environ.get("DUCK_VLLM_VENV") or Path.home() / ".cache" / "duck-arc3" / f"vllm-{PIN}")
PY = VENV / "bin" / "python"
PROFILES = {"flash-next": "flash-next", "qwen3.8-27b": "27b", "qwen3.6-27b": "27b"}  # profile: folder shape
CASES = [(p, r) for p in PROFILES for r in range(len(profile(p).ladder))]
DRAFTER = {"flash-next": "Qwen4ExpMTP", "qwen3.8-27b": "Qwen3_5MTP"}
# What 0.33 chooses by itself for each architecture (read in vllm/config/vllm.py): Flash-Next is
# one of DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES (VLLM_USE_BREAKABLE_CUDAGRAPH=1, torch.compile
# off: compilation mode NONE); the 27B models are compiled (VLLM_COMPILE). Both default to
# FULL_AND_PIECEWISE graphs.
COMPILED = {"flash-next": "NONE", "qwen3.8-27b": "VLLM_COMPILE", "qwen3.6-27b": "VLLM_COMPILE"}

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not PY.exists(), reason=f"no vLLM venv at {VENV} (bash scripts/vllm-venv.sh)")]


def _cfg(name: str, rung: int, folder: Path):
    return at_rung(load_config(overrides=[f"model.profile={name}", f"model.serve.model_path={folder}"]), rung)


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """Every case's VllmConfig, resolved by 0.33 in one process (its imports take a minute)."""
    base = tmp_path_factory.mktemp("engine-config")
    folders = {shape: base / shape for shape in set(PROFILES.values())}
    template = base / "t.jinja"
    template.write_text("{{ messages }}")  # (vLLM checks that the file exists)
    argvs = []
    for name, rung in CASES:
        cfg = _cfg(name, rung, folders[PROFILES[name]])
        argvs.append(command(cfg.model.serve, cfg.model.name, chat_template=str(template))[0])
    job = {"models": {str(p): shape for shape, p in folders.items()}, "argvs": argvs}
    r = subprocess.run([str(PY), str(HERE / "vllm_engine_config.py")], input=json.dumps(job), capture_output=True,
                       text=True, timeout=1800, cwd=base)
    if r.returncode == 3:
        pytest.skip("no C compiler for the libcuda.so.1 stub: " + r.stderr[-300:])
    assert r.returncode == 0, (r.stderr + r.stdout)[-4000:]
    doc = json.loads(r.stdout.strip().splitlines()[-1])  # (vLLM logs to stdout before it)
    print("libcuda:", doc["libcuda"], "card:", doc["card"])
    return {case: (got, folders[PROFILES[case[0]]]) for case, got in zip(CASES, doc["configs"])}


@pytest.mark.parametrize("name,rung", CASES, ids=[f"{p}-rung{r}" for p, r in CASES])
def test_each_profile_and_rung_resolves_as_planned(resolved, name, rung):
    got, folder = resolved[(name, rung)]
    print(name, f"rung {rung} ({profile(name).ladder[rung].name}) on vLLM {PIN}:", json.dumps(got))
    assert "error" not in got, got.get("error")
    cfg = _cfg(name, rung, folder)
    s, plan = cfg.model.serve, cfg.plan  # (each rung re-planned: MTP off shrinks the state a slot holds)
    assert got["architecture"] == profile(name).architecture and got["max_model_len"] == s.max_model_len
    # MTP: on rung 0 where the profile drafts, the checkpoint's own head (method "mtp"); off on every rung above.
    if rung == 0 and profile(name).mtp_tokens:
        assert got["speculative"] == {"method": "mtp", "num_speculative_tokens": s.mtp_tokens,
                                      "draft_architecture": DRAFTER[name]}
    else:
        assert got["speculative"] is None and s.mtp_tokens == 0
    # Prefix caching on every rung, and with it the hybrid's "align" Mamba cache: MTP + align is
    # rung 0's combination (the one vllm issue 54173 saw crash); rung 1 keeps align without MTP.
    assert got["cache"]["enable_prefix_caching"] is True and got["cache"]["mamba_cache_mode"] == "align"
    assert got["cache"]["cache_dtype"] == profile(name).kv_cache_dtype
    # The graphs: vLLM's own default on rungs 0-1, PIECEWISE on rung 2, none (eager) on rung 3.
    graphs = {0: "FULL_AND_PIECEWISE", 1: "FULL_AND_PIECEWISE", 2: "PIECEWISE", 3: "NONE"}[rung]
    assert got["compilation"]["cudagraph_mode"] == graphs and got["enforce_eager"] is (rung == 3)
    assert got["compilation"]["mode"] == ("NONE" if rung == 3 else COMPILED[name])
    assert got["compilation"]["breakable_cudagraph"] is (name == "flash-next")
    # The plan's limits reach the scheduler unchanged; with MTP too (0.33 sets the scheduled
    # tokens only with speculative decoding, and shrinks them for the drafts only below its own
    # default of 2,048 batched tokens).
    assert got["max_num_seqs"] == plan.max_num_seqs == s.max_num_seqs
    assert got["max_num_batched_tokens"] == s.max_num_batched_tokens
    assert got["max_num_scheduled_tokens"] == (s.max_num_batched_tokens if s.mtp_tokens else None)
    assert got["limit_mm_per_prompt"] == {"image": s.images_per_prompt, "video": 0}
    assert got["engram"] == ({"cpu_offload": True} if profile(name).engram_offload else None)


def test_the_ladder_is_what_the_cases_cover():
    """Four rungs on every served profile (as planned, MTP off, piecewise, eager): a rung added
    to duck.config.profiles.LADDER without a case here fails this."""
    assert [len(profile(p).ladder) for p in PROFILES] == [4, 4, 4]
    assert [r.name for r in profile("flash-next").ladder] == ["as planned", "MTP off", "MTP off, piecewise CUDA graphs",
                                                              "MTP off, eager"]
