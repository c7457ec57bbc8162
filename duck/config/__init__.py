"""The one config surface: a validated pydantic model, read from TOML/JSON files and
`a.b=value` overrides (command line or `DUCK_` environment variables).

Each subsystem owns one section; a field's comment says why it has its default, and the
defaults here are the only ones (nothing else keeps a copy). Every section is strict: an
unknown key or a value out of range is an error (`ConfigError`, one line), never silently
ignored. Experiments (experiments/*.toml) are config files that differ from the baseline in
one field each, so an A/B compares exactly one change.

The sections of the model, its server, the kernel, the agent and the scheduler are here; those
of a run (`play`, `explorer`, `kaggle`, with the time knobs) in duck.config.run; reading files,
overrides and the environment, and the fields the serving profile's plan fills in, in
duck.config.load. Import all of them from here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, PrivateAttr, model_validator

import duck.config.profiles as profiles
from duck.config.load import (ConfigError, Section, gather, one_line, parse_value, plan_fields,  # noqa: F401
                              read_config_file, set_dotted, unset_dotted, validate)
from duck.config.run import ExplorerConfig, KaggleConfig, PlayConfig, PolicyName  # noqa: F401

ProfileName = Literal["flash-next", "qwen3.8-27b", "qwen3.6-27b", "hosted"]  # duck.config.profiles.PROFILES
SchedulerName = Literal["fixed", "field", "ucb", "adaptive"]  # what scheduler.policy.make_policy knows
# The default profile's plan: the defaults of the planned fields when a section is made on
# its own (a test's KernelConfig()); in a Config, Config._resolve plans them for its profile.
_PLAN = profiles.plan(profiles.DEFAULT_PROFILE)


class ServeConfig(Section):
    """`duck serve`: the vLLM command (DESIGN §1c; flags checked against vLLM's docs).

    The fields marked "the profile's" or "the plan's" come from the serving profile's memory
    plan (`model.profile`, duck.config.profiles) unless a file or override sets them: set one only
    to depart from the plan (an A/B, a smaller card)."""

    model_path: str = _PLAN.checkpoint  # the profile's checkpoint; a local folder on Kaggle (no internet)
    executable: str = "vllm"  # a stand-in script in tests
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    max_model_len: PositiveInt = _PLAN.window  # the profile's window: prompt + output of one request
    gpu_memory_utilization: float = Field(_PLAN.utilization, gt=0, le=1)
    max_num_seqs: PositiveInt = _PLAN.max_num_seqs  # the plan's slots + 1 (the health probe)
    gpu_memory_mib: PositiveInt = profiles.RTX_PRO_6000_MIB  # the card the plan is made for (Kaggle's)
    max_num_batched_tokens: PositiveInt = 8192  # what the field found stable on the RTX Pro 6000
    # Tokens per streamed chunk (the first is sent at once). 1: at 16, vLLM 0.19's streaming
    # qwen3_coder parser delivered most tool-call arguments as `{}` or broken JSON (83 of 400
    # real snippets intact, vllm#31501/#45256), and 0.33's is a new parser nothing has proven
    # at 16 yet: tests/conformance measures both on the Duck traces (experiments/LOG.md).
    # What 16 saved, the harness's CPU for per-token chunks, is ~0.3 ms a chunk at the
    # field's ~700 tokens/s in total (`duck bench load`).
    stream_interval: PositiveInt = 1
    kv_cache_dtype: Literal["auto", "fp8"] = _PLAN.kv_cache_dtype  # "auto": the checkpoint's dtype (BF16)
    # `--speculative-config '{"method": "mtp", ...}'`: the profile's native MTP head drafting
    # this many tokens (the profile's: 3, or 0 = off). Flash-Next accepted 2.6-2.9 of 4 drafted (FIELD §4).
    mtp_tokens: NonNegativeInt = _PLAN.mtp_tokens
    # `--engram-config '{"cpu_offload": true}'` (the profile's): Flash-Next's n-gram table (51B parameters)
    # in pinned host RAM, looked up over UVA, instead of on the card (where it does not fit).
    engram_offload: bool = _PLAN.engram_offload
    # `--compilation-config '{"cudagraph_mode": ...}'`: "" = vLLM 0.33's own default for the model
    # (full decode graphs for these hybrids). PIECEWISE, the field's choice on 0.19 (its full
    # graphs wedged), and eager (`--enforce-eager`, no graphs) are rungs of the restart ladder
    # (duck.config.profiles.LADDER) and dimensions of `duck doctor --sweep`.
    cudagraph_mode: str = ""
    enforce_eager: bool = False
    # `--linear-backend` (GEMM kernels; vLLM 0.33 falls back to its own choice for a layer
    # type the backend lacks): the profile's (CUTLASS for the FP8 27B checkpoints, what the
    # field found stable; "" = not passed).
    linear_backend: str = ""
    # `--attention-backend` ("" = vLLM's choice). TRITON_ATTN where FlashInfer would fetch
    # kernels at run time (no internet on Kaggle: vLLM 0.27 failed so); flashinfer-cubin has
    # no build for 0.33's FlashInfer 0.7.2, so the first GPU run (`duck doctor`) settles it.
    attention_backend: str = ""
    # `--prefix-match-unit`: the token grid prefix-cache hits (and, on a hybrid model, the
    # DeltaNet prefill checkpoints) land on. 0 = vLLM 0.33's default (the GCD of the KV cache
    # groups' block sizes, known only on the GPU); a finer unit puts the checkpoint closer to
    # each prompt's end. The first-GPU sweep measures the hit rate with and without.
    prefix_match_unit: NonNegativeInt = 0
    # `--chat-template`: "" = the model folder's own, unless it lacks the `preserve_thinking`
    # branch the agent's prefix cache relies on; then `fallback_chat_template` is served.
    chat_template: str = ""
    # The template copy: "" = ../shared/<chat_template_family>/chat_template.jinja beside the
    # checkout; the notebook sets the copy shipped in the wheel dataset.
    fallback_chat_template: str = ""
    chat_template_family: Literal["qwen3.8", "qwen3.6"] = "qwen3.8"  # the profile's template copy
    # Images one prompt may hold (vLLM answers 400 beyond): a 131K history of turns with a 402-token
    # board and a diff holds up to ~320; the agent leaves out a turn's optional images before the limit.
    images_per_prompt: NonNegativeInt = 400
    extra_args: list[str] = []
    ready_timeout_s: PositiveFloat = 900.0  # the Duck's vLLM took ~6.5 min to become ready
    log_path: str = "runs/vllm.log"


class ModelConfig(Section):
    urls: list[str] = []  # OpenAI-compatible base URLs, one per vLLM server (GPU)
    # The serving profile (duck.config.profiles): the model, its quantisation and KV dtype, the
    # window, and from its memory plan the slots and the context budget everything uses.
    profile: ProfileName = profiles.DEFAULT_PROFILE
    name: str = _PLAN.served_name  # the served model name
    temperature: NonNegativeFloat = 0.6  # Qwen's recommended thinking-mode sampling
    top_p: float = Field(0.95, gt=0, le=1)
    top_k: int = Field(20, ge=-1)  # -1: off (vLLM)
    thinking: bool = True
    # Keep past turns' reasoning in the rendered prompt (Qwen3.6 template kwarg; 3.8 keeps
    # it by default): the prompt then only ever grows at its end, so the prefix cache hits,
    # at the price of a faster-filling context. None: the template's own default.
    preserve_thinking: bool | None = True
    # `chat_template_kwargs.reasoning_effort` (Qwen3.8's template: xhigh, medium or low; any
    # other value raises in it). None: not sent, the template's default (xhigh), which the
    # field left on; an effort the profile's template does not know is a config error.
    reasoning_effort: Literal["xhigh", "high", "medium", "low", "minimal"] | None = None
    max_output_tokens: PositiveInt = _PLAN.output_tokens  # Flash-Next: 12,288 (FIELD §3)
    # A reply cut at the output cap or the time limit keeps the last this many characters of
    # its thinking in the history (~1K tokens), marked as cut: two cut replies kept whole took a
    # scripted prompt from 2K to 24.7K tokens. 0 keeps all of it (the old behaviour, for the A/B:
    # experiments/thinking-cut-kept.toml). Replies that end normally keep all their thinking.
    cut_thinking_chars: NonNegativeInt = 4000
    timeout_s: PositiveFloat = 180.0  # per request; what arrived by then is kept
    stall_s: PositiveFloat = 60.0  # no byte for this long ends the request
    retries: NonNegativeInt = 3
    backoff_s: NonNegativeFloat = 1.0  # first retry pause; doubles each time, jittered
    serve: ServeConfig = ServeConfig()
    # A server that wants a key (the `hosted` profile: a provider such as OpenRouter): the NAME
    # of the environment variable holding it ("": the profile's, OPENAI_API_KEY for hosted; none
    # for vLLM). The key is read when a client is made and is never written anywhere.
    api_key_env: str = ""
    # Extra HTTP headers on every request (OpenRouter's HTTP-Referer, X-Title). A value "$NAME"
    # is read from that environment variable; a literal value for a header that carries a
    # secret (Authorization, *key*, *token*) is a config error: name the variable instead.
    headers: dict[str, str] = {}
    # The spend guard (duck.llm.guard): model play stops like Ctrl-C, the reason in score.json,
    # once one `duck play` command's requests have used this many tokens (prompt + completion)
    # or cost this much (the provider's `usage.cost`, USD; a provider that reports none cannot
    # be capped so). 0: no cap. `duck play --resume` then finishes the run (a new command).
    max_total_tokens: NonNegativeInt = 0
    max_cost: NonNegativeFloat = 0.0
    # Past reasoning goes back to the server under: "auto", vLLM's `reasoning` and
    # `reasoning_content` (the template reads the latter) or, on a hosted profile, the field(s)
    # the provider sent it in (`reasoning`, `reasoning_content`, `reasoning_details`); one
    # name; or "none" (a provider that refuses it back).
    reasoning_field: Literal["auto", "reasoning", "reasoning_content", "reasoning_details", "none"] = "auto"


class KernelConfig(Section):
    call_timeout_s: PositiveFloat = 30.0  # the Duck's limit; our calls are fast, so it rarely binds
    memory_mb: PositiveInt = 2048  # address-space limit of the worker (numpy needs ~300 MB)
    # All of its temp dir (a tmpfs of this size where mounts work; else checked): the
    # host-RAM plan's share per kernel (duck.config.profiles), at most 256 MB.
    disk_mb: PositiveInt = _PLAN.kernel_disk_mb
    # Files and folders in its temp dir (the tmpfs's nr_inodes; else counted by the host): an
    # inode costs ~1 KB of kernel memory no data quota counts (900K empty folders once took
    # ~1 GB and 155 s to clean up, issue 30), and the host's count walks them all. Model code
    # writes a few files (none in the Duck's 18,779 snippets): 1024 (16384 before issue 48,
    # whose walk took 70-98 ms at 15,000 files).
    disk_inodes: PositiveInt = 1024
    # Sandbox layers not to apply even where the machine allows them (duck.sandbox.wall.isolation):
    # for testing the fallbacks, and a way out if a layer misbehaves on some machine
    # ("cgroup": the worker's memory cgroup, duck.sandbox.wall.cgroup).
    layers_off: list[Literal["uid", "namespaces", "landlock", "seccomp", "cgroup"]] = []
    grace_s: NonNegativeFloat = 1.0  # after the soft interrupt, time to unwind before the process is killed


class AgentConfig(Section):
    """The model-driven agent (duck.agent). What the model is shown and how its context is kept
    follow the field's evidence (FIELD §2-3, DESIGN §4) and are not switches; a switch stays only
    where that evidence leaves a question open (experiments/README.md ranks their A/Bs)."""

    context_tokens: PositiveInt = _PLAN.context_tokens  # prompt + output budget per game: the memory plan's
    # The trim's low-water mark: when prompt + output cap pass the budget, whole old turns are
    # dropped right after the system prompt until the prompt is at most this share of the
    # budget, in one block, so the next ~half budget of growth reuses one cached prefix (the
    # field: 131K window, trim at ~118K down to ~58K). The memory plan sizes the slots on the
    # mean occupancy (1 + evict_to) / 2 of it.
    evict_to: float = Field(0.45, gt=0, lt=1)
    # The field's host-side guards against wasted actions (duck.sandbox.batch_guards: a batch
    # stops after an action that changed nothing inside the HUD border; from level 2 no action
    # follows such an action in the same call). Franzen's harness had them; no A/B of them is
    # public (experiments/guards-off.toml).
    guards: bool = True
    fallback: PolicyName | None = "explorer"  # policy that takes over when the model fails (duck.policies)
    failures_before_fallback: PositiveInt = 3  # consecutive failed requests (each already retried)
    # With no monitor to restart the server (`duck play`): how long a model game whose server
    # stopped answering waits (parked, probing it) before the explorer takes it. The notebook's
    # monitor decides instead (duck.kaggle.serving: a restart while time allows). 0: the
    # explorer at once.
    outage_wait_s: NonNegativeFloat = 900.0


class FixedConfig(Section):
    """scheduler.policy `fixed`: the Duck's equal split."""

    # None: min(budget * slots / n, budget / waves). The even share alone overruns when the
    # number of games is not a multiple of the slots (110 games in 28 slots run in 4 waves,
    # and 4 * 9h*28/110 > 9h); per wave it is what the Duck did (132 min = 8.8 h / 4).
    allot_s: PositiveFloat | None = None


class FieldConfig(Section):
    """scheduler.policy `field`: Franzen's P = (A + B) * C as published (../shared/FIELD.md §3).
    Its constants are the published ones (scheduler/field.py), not thresholds to tune."""

    # N (the game's levels, clipped to 6-10) when the game does not say: the public games'
    # median (7 of 25 have 6, the median is 7).
    levels_when_unknown: int = Field(7, ge=6, le=10)


class UcbConfig(Section):
    """scheduler.policy `ucb`: weighted levels per generated token plus an exploration bonus
    (Siriki's scheduler, FIELD.md §3, rebuilt on tokens)."""

    # A game's slice: it yields its slot after this many generated tokens since it was given
    # one (and at trims and level changes). Siriki ran 2,400 s slices at 16 slots: ~62 tok/s
    # per stream (169 * 16^0.6 / 16) * 2,400 s ~ 150K tokens.
    slice_tokens: PositiveInt = 150_000
    # The unit of a "pull" in the UCB index: mean reward = weighted levels per unit, bonus =
    # exploration * sqrt(ln(all units) / the game's units). 10K tokens ~ a third of a level 1.
    unit_tokens: PositiveInt = 10_000
    # The bonus's weight, in the reward's units (the score share of levels, 0-1, per 10K
    # tokens: a level 1 of a 6-level game in 27K tokens is ~0.018). Of 0.005, 0.02 and 0.08
    # in the simulator (seeds 0-9, S=10, vs field): 0.005 +0.44 Duck / -0.31 synthetic,
    # 0.02 -0.07 / +1.32, 0.08 -0.27 / -4.09.
    exploration: NonNegativeFloat = 0.02


class AdaptiveConfig(Section):
    """scheduler.policy `adaptive`: ours, on generated tokens and actions per level. A game
    keeps its slot while its level is young or it just levelled; a stalled one (too many tokens
    or actions on its level) is preempted for a waiting game with better prospects, and waiting
    games are ranked by expected score per token (scheduler/adaptive.py)."""

    # Generated tokens per completed level, median, by level (L1, L2, ...; the last repeats):
    # the field's (FIELD.md §3: L1 27K, L2 51K, L3 49K, L4-L5 56K, L6 67K).
    level_tokens: tuple[PositiveInt, ...] = (27_000, 51_000, 49_000, 56_000, 56_000, 67_000)
    # A level is stalled past this multiple of its median tokens, or past `stall_actions`
    # actions on it. Franzen's fall-off halves the completion chance at 62K tokens (~1.2x the
    # median level) or 115 actions; at 2x little of the chance is left.
    stall_factor: float = Field(2.0, gt=0)
    stall_actions: PositiveInt = 230
    # A level's score falls as (par_actions / actions)^2 past this many actions on it (the
    # official (baseline / actions)^2 with the public games' median per-level baseline, 55):
    # on the Duck's curves, where a run's pace in actions per token persists, ranking without
    # it lost to `field` (-0.34 points, seeds 0-9, S=10), with it +0.24 (experiments/LOG.md).
    par_actions: PositiveInt = 55
    # Every game's fair chance: a game is never preempted before this many generated tokens
    # on its current level (the L1 median with room).
    min_level_tokens: PositiveInt = 40_000
    # A stalled level's chance, relative to a young one's: not 0, since on the Duck's curves
    # the hazard of the next level hardly falls with tokens (extend.fit_tokens: 1.0 -> 1.1
    # from the first piece to the tail) while the field's fall-off says it does. Of 0.03, 0.1
    # and 0.3 (seeds 0-9, S=10, vs field): 0.03 +0.51 Duck / +1.90 synthetic, 0.1 +0.56 /
    # +1.16, 0.3 +0.67 / -2.10.
    stalled_chance: float = Field(0.03, ge=0, le=1)
    # Preempt a stalled running game (at its next model request) when a waiting game ranks
    # `preempt_ratio` times above it; False: stalled games only lose their slot at their own
    # trims and levels.
    preempt: bool = True
    preempt_ratio: float = Field(2.0, ge=1)


class SchedulerConfig(Section):
    """When games hold the server's slots (scheduler/): the policy, its thresholds, the slots."""

    # The one that beats `field` on both curve sets of `duck simulate --scenario kaggle
    # --compare` at the profile's 10 slots (seeds 100-119, paired: Duck +0.55 [+0.32, +0.78],
    # synthetic +2.22 [+1.84, +2.60] points); also at 8 and 12, not at 16 on the synthetic set
    # (-1.13 [-1.58, -0.67], 85K contexts): experiments/LOG.md 2026-12-02.
    policy: SchedulerName = "adaptive"
    slots: PositiveInt = _PLAN.slots  # games holding a server slot at once: the memory plan's slots
    # Every game a first turn early (an unplayed game scores 0): while a game is unplayed, it
    # gets the next free slot, and a game past its first turn (an action, or
    # `first_turn_tokens`) yields at its next model request. About 110 short turns, ~10
    # minutes of the 8.5 hours.
    first_turns: bool = True
    first_turn_tokens: PositiveInt = 8192  # a first turn that has not acted by then counts as played
    fixed: FixedConfig = FixedConfig()
    field: FieldConfig = FieldConfig()
    ucb: UcbConfig = UcbConfig()
    adaptive: AdaptiveConfig = AdaptiveConfig()


class Config(Section):
    play: PlayConfig = PlayConfig()
    explorer: ExplorerConfig = ExplorerConfig()
    model: ModelConfig = ModelConfig()
    kernel: KernelConfig = KernelConfig()
    agent: AgentConfig = AgentConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    kaggle: KaggleConfig = KaggleConfig()
    # The fields _resolve filled in from the plan (dotted names): with_values() unsets them
    # again, so that a changed profile or budget is planned anew.
    _derived: tuple[str, ...] = PrivateAttr(default=())
    _plan: profiles.Plan | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _resolve(self) -> "Config":
        """Plan the fields no file or override set from the serving profile's memory plan
        (duck.config.load.PLANNED)."""
        m = self.model
        self._derived, self._plan = plan_fields(self)
        efforts = profiles.get(m.profile).reasoning_efforts
        if m.reasoning_effort is not None and m.reasoning_effort not in efforts:
            raise ValueError(f"model.reasoning_effort {m.reasoning_effort!r}: the {m.profile} template accepts "
                             f"{', '.join(efforts) or 'no reasoning effort'}")
        _check_provider_fields(m, profiles.get(m.profile).hosted)
        return self

    @property
    def plan(self) -> profiles.Plan:
        """The serving profile's memory plan this config was resolved with (duck.config.profiles)."""
        assert self._plan is not None
        return self._plan

    @property
    def derived(self) -> tuple[str, ...]:
        """The dotted fields that came from the plan rather than from a file or override."""
        return self._derived


VLLM_ONLY = ("top_k", "thinking", "preserve_thinking")  # sent in vLLM's own request fields
_SECRET_HEADER = re.compile(r"authorization|key|token|secret|cookie", re.I)
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_provider_fields(m: ModelConfig, hosted: bool) -> None:
    """No key in a config (a variable's name only; the value is never echoed), and on a
    hosted profile no vLLM-only field set (it sends standard OpenAI fields only)."""
    if m.api_key_env and not _VARIABLE.fullmatch(m.api_key_env):
        raise ValueError("model.api_key_env is the NAME of the environment variable holding the key "
                         "(letters, digits, _), not the key itself")
    for name, value in m.headers.items():
        ref = value[1:] if value.startswith("$") else None
        if ref is not None and not _VARIABLE.fullmatch(ref.strip("{}")):
            raise ValueError(f"model.headers.{name}: ${{NAME}} must name an environment variable")
        if ref is None and _SECRET_HEADER.search(name):
            raise ValueError(f"model.headers.{name} looks like a secret: write \"$VARIABLE\" (read from the "
                             "environment), never the value, in a config")
    set_here = [k for k in VLLM_ONLY if getattr(m, k) != type(m).model_fields[k].default]  # (a dump sets all)
    if hosted and set_here:
        raise ValueError(f"model.{set_here[0]} is vLLM-only: the hosted profile sends standard OpenAI fields only "
                         "(model.reasoning_effort, where the provider takes one)")


def at_rung(cfg: Config, rung: int) -> Config:
    """`cfg` on rung `rung` of its profile's restart ladder (duck.config.profiles.Rung): the rung's
    serve fields set over the config's own, and the memory plan made anew (MTP off frees its
    drafter's state). Rung 0 is `cfg` itself. ConfigError for a rung the ladder lacks."""
    ladder = profiles.get(cfg.model.profile).ladder
    if not 0 <= rung < max(1, len(ladder)):
        raise ConfigError(f"rung {rung}: the {cfg.model.profile} profile's restart ladder has "
                          + (f"rungs 0-{len(ladder) - 1}" if ladder else "none (nothing is served here)"))
    if rung == 0:
        return cfg
    return with_values(cfg, {f"model.serve.{key}": value for key, value in ladder[rung].serve})


def load_config(files: list[str | Path] = (), overrides: list[str] = (),
                env: dict[str, str] | None = None) -> Config:
    """Files in order, then `DUCK_SECTION__FIELD` environment variables (`__` between nested
    names: `DUCK_SCHEDULER__ADAPTIVE__STALL_FACTOR`), then `a.b=value` overrides. Raises
    ConfigError (one line) on an unknown key or a bad value."""
    return validate(Config, gather(files, overrides, env))


def with_values(cfg: Config, values: dict[str, Any]) -> Config:
    """A copy of `cfg` with dotted fields replaced (`{"play.seed": 3}`), validated as
    load_config validates (ConfigError); the planned fields are planned anew from what is set."""
    doc = unset_dotted(cfg.model_dump(), cfg.derived)
    for key, value in values.items():
        set_dotted(doc, key, value)
    return validate(Config, doc)


POLICIES: tuple[str, ...] = get_args(PolicyName)
SCHEDULERS: tuple[str, ...] = get_args(SchedulerName)
