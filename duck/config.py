"""The one config surface: a validated pydantic model, read from TOML/JSON files and
`a.b=value` overrides (command line or `DUCK_` environment variables).

Each subsystem owns one section; a field's comment says why it has its default.
Experiments (experiments/*.toml) are config files that differ from the baseline in one
field each, so an A/B compares exactly one change.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict


PolicyName = Literal["random", "explorer", "llm"]  # what duck.policies.make_policy knows


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class PlayConfig(Section):
    games_dir: str = "environment_files"  # the public games, fetched (see the README)
    policy: PolicyName = "explorer"  # the non-LLM default: runs anywhere, no GPU
    seed: int = 0
    max_actions: int = 1000  # per game; ~7x the Duck's mean of 137 actions per game
    workers: int = 1  # parallel game processes (the engine is pure Python under the GIL)


class ServeConfig(Section):
    """`duck serve`: the vLLM command (DESIGN §1c; flags checked against vLLM's docs)."""

    model_path: str = "Qwen/Qwen3.6-27B-FP8"  # a local folder on Kaggle (no internet)
    executable: str = "vllm"  # a stand-in script in tests
    host: str = "127.0.0.1"
    port: int = 8000
    max_model_len: int = 40960  # a 32K prompt budget plus the output cap
    gpu_memory_utilization: float = 0.90
    max_num_seqs: int = 32  # concurrent games; KV share per game = cache / this
    max_num_batched_tokens: int = 8192  # what the field found stable on the RTX Pro 6000
    kv_cache_dtype: str = "auto"  # "fp8" doubles the cache (an A/B question)
    cudagraph_mode: str = "PIECEWISE"  # piecewise CUDA graphs: stable where full graphs wedged
    # `--linear-backend` (CUTLASS FP8 GEMM) exists from vLLM 0.2x on; the pinned 0.19 refuses
    # the flag and exits, so it stays empty ("" = not passed) until the pin moves.
    linear_backend: str = ""
    # `--chat-template`: "" = the model folder's own, unless it lacks the `preserve_thinking`
    # branch the agent's prefix cache relies on; then `fallback_chat_template` is served.
    chat_template: str = ""
    # The Qwen3.6 template copy: "" = ../shared/qwen3.6/chat_template.jinja beside the
    # checkout; the notebook sets the copy shipped in the wheel dataset (qwen3.6/).
    fallback_chat_template: str = ""
    flashinfer_sampler: bool = False  # the FlashInfer top-k kernel livelocked (vLLM #43885)
    images_per_prompt: int = 64  # one frame per turn stays in the history
    extra_args: list[str] = []
    ready_timeout_s: float = 900.0  # the Duck's vLLM took ~6.5 min to become ready
    log_path: str = "runs/vllm.log"


class ExplorerConfig(Section):
    # Options of duck.explorer.policy.Explorer by name; an unknown name is an error when the
    # explorer is made (the defaults in its signature are the benchmarked ones).
    options: dict[str, Any] = {}


class ModelConfig(Section):
    urls: list[str] = []  # OpenAI-compatible base URLs, one per vLLM server (GPU)
    name: str = "Qwen3.6-27B-FP8"
    temperature: float = 0.6  # Qwen's recommended thinking-mode sampling
    top_p: float = 0.95
    top_k: int = 20
    thinking: bool = True
    # Keep past turns' reasoning in the rendered prompt (Qwen3.6 template kwarg; 3.8 keeps
    # it by default): the prompt then only ever grows at its end, so the prefix cache hits,
    # at the price of a faster-filling context. None: the template's own default.
    preserve_thinking: bool | None = True
    max_output_tokens: int = 4096  # the Duck had no cap; its calls averaged ~800 tokens
    timeout_s: float = 180.0  # per request; what arrived by then is kept
    stall_s: float = 60.0  # no byte for this long ends the request
    retries: int = 3
    backoff_s: float = 1.0  # first retry pause; doubles each time, jittered
    serve: ServeConfig = ServeConfig()


class KernelConfig(Section):
    call_timeout_s: float = 30.0  # the Duck's limit; our calls are fast, so it rarely binds
    output_chars: int = 4096  # head+tail kept of each call's output (the Duck's cap)
    memory_mb: int = 2048  # address-space limit of the worker (numpy needs ~300 MB)
    file_mb: int = 16  # largest file model code may write in its temp dir
    open_files: int = 64
    grace_s: float = 1.0  # after the soft interrupt, time to unwind before the process is killed
    notes_dict_chars: int = 8000  # the kernel's `notes` dict, as JSON, is kept up to this size


class AgentConfig(Section):
    context_tokens: int = 32768  # prompt budget per game (see DESIGN §1c: KV cache share)
    evict_to: float = 0.5  # near the budget, drop old turns until the prompt is this share
    # The Duck's rules, for the A/B baseline (experiments/baseline.toml): both false.
    keep_notes_on_game_over: bool = True
    carry_notes_across_levels: bool = True
    animation_summaries: bool = True
    action_counts_in_prompt: bool = True
    seeded_sampling: bool = True
    image_scale: int = 4  # the frame as a 256x256 PNG (~64 image tokens on Qwen3.6)
    note_section_chars: int = 900  # per notes section; longer text keeps its head and tail
    nudge_after_calls: int = 6  # calls in a turn without an action before "act now"
    max_calls_per_turn: int = 16  # then the turn ends and a fresh one starts
    fallback: PolicyName | None = "explorer"  # policy that takes over when the model fails (duck.policies)
    failures_before_fallback: int = 3  # consecutive failed requests (each already retried)


class SchedulerConfig(Section):
    policy: str = "adaptive"
    budget_s: float = 9 * 3600 - 30 * 60  # Kaggle's 9 h less setup and a safety margin
    slots: int = 28


class KaggleConfig(Section):
    """The Kaggle notebook (duck/kaggle.py): where things are, how long the run may take."""

    input_dir: str = "/kaggle/input"  # attached competition data, datasets and models
    working_dir: str = "/kaggle/working"  # Kaggle keeps what is written here as the output
    competition_dir: str = ""  # "": the folder under input_dir with environment_files/
    dataset_dir: str = ""  # our wheels; "": the folder under input_dir holding duck-dataset.json
    model_dir: str = ""  # the weights; "": the folder under input_dir whose config.json fits
    vllm_env_dir: str = "/tmp/vllm-env"  # vLLM's own venv: its numpy pin conflicts with ours
    gateway_url: str = "http://gateway:8001/"  # the rerun's gateway (DESIGN §1)
    api_key: str = "test-key-123"
    gateway_wait_s: float = 600.0  # the official starter waits this long for /api/games
    budget_s: float = 9 * 3600.0  # Kaggle's limit for the whole notebook, from its first cell
    # The games end this long before budget_s: a stop lands between actions (one model
    # request, up to model.timeout_s, plus a kernel call), then records, the scorecard and
    # vLLM's teardown; about three times that worst case, for a day's submission.
    margin_s: float = 900.0
    stop_grace_s: float = 240.0  # after the stop, how long games get to return
    interactive_budget_s: float = 2700.0  # a Save & Run All: install, vLLM, ~20 min of public games
    interactive_games: int = 0  # 0: every public game; N: the first N (a quicker check)
    use_model: bool = True  # False: the explorer only (no GPU, or a safe submission)
    # Thresholds of the scheduler policy (scheduler.policy), e.g. {"margin_s": 300}; its
    # defaults are for the 9 h run, a short rehearsal scales them down.
    scheduler_overrides: dict[str, float] = {}
    health_interval_s: float = 30.0  # a 1-token chat this often tells a wedged server
    health_timeout_s: float = 120.0  # under 28 streams a 1-token request still lands in time
    health_failures: int = 2  # consecutive failed probes before the server counts as down
    model_restarts: int = 1  # restarts of a dead server (each ~6.5 min on Kaggle)
    restart_min_left_s: float = 3600.0  # no restart with less than this left to play


class Config(Section):
    play: PlayConfig = PlayConfig()
    explorer: ExplorerConfig = ExplorerConfig()
    model: ModelConfig = ModelConfig()
    kernel: KernelConfig = KernelConfig()
    agent: AgentConfig = AgentConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    kaggle: KaggleConfig = KaggleConfig()


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for key in path:
        doc = doc.setdefault(key, {})
    doc[last] = value


def _parse_value(text: str) -> Any:
    """`3` → 3, `true` → True, `[1,2]` → [1, 2]; anything else stays a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def load_config(files: list[str | Path] = (), overrides: list[str] = (),
                env: dict[str, str] | None = None) -> Config:
    """Files in order, then `DUCK_SECTION__FIELD` environment variables, then overrides."""
    doc: dict[str, Any] = {}
    for f in files:
        text = Path(f).read_text()
        part = tomllib.loads(text) if str(f).endswith(".toml") else json.loads(text)
        for section, values in part.items():
            if isinstance(values, dict):
                doc.setdefault(section, {}).update(values)
            else:
                doc[section] = values
    for key, value in (os.environ if env is None else env).items():
        if key.startswith("DUCK_") and "__" in key:
            _set(doc, key[5:].lower().replace("__", "."), _parse_value(value))
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form a.b=value")
        key, value = item.split("=", 1)
        _set(doc, key.strip(), _parse_value(value))
    return Config.model_validate(doc)


POLICIES: tuple[str, ...] = get_args(PolicyName)
