"""Serving profiles and the memory plan each one implies (DESIGN §1c, FIELD §4).

A profile names one way of serving one model on one card: the checkpoint, its quantisation,
the KV-cache dtype, speculative decoding, the context window and output cap, and its restart
ladder. From it and the model's architecture (its config.json, or the shape the profile carries
when no checkpoint is at hand) `plan()` derives what everything else uses: the KV pool in
tokens, the slots (games holding a context at once), the context budget per game, vLLM's
`--max-num-seqs`, and the host RAM plan with the tmpfs quota per kernel. The rule: no second
hand-set number exists anywhere. The one figure a profile carries that no config gives is its
runtime overhead, fitted so that the plan gives the KV pool the field measured; where `duck
doctor` reads another pool off a real server, that figure is the one to change. How each
quantity is derived, with its figures: docs/serving.md, "The memory plan".

Pure arithmetic over numbers and one optional file read (the checkpoint's config.json): it
sits beside the config (duck.config resolves its unset fields from the plan) and imports
nothing of the project.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GiB = 1024 ** 3
MiB = 1024 ** 2
RTX_PRO_6000_MIB = 97887  # nvidia-smi on Kaggle's card (FIELD §4)
KAGGLE_HOST_GB = 176  # g4-standard-48
KAGGLE_GAMES = 110  # the hidden set: every game is admitted and may keep its kernel
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "float32": 4}


class ProfileError(ValueError):
    """A profile that is unknown, or does not fit the card, said in one line."""


@dataclass(frozen=True)
class Arch:
    """What the memory plan needs of a model's architecture, in config.json's own names
    (`text_config` of Qwen3.5/3.6/3.8 and of Flash-Next's `qwen4_exp_text`), read the way
    vLLM 0.33's model code reads them (vllm/models/qwen4_exp/nvidia/model.py and
    vllm/model_executor/layers/mamba/mamba_utils.py):

    * KV only on the attention layers: "full_attention", or "indexed_attention" (Qwen4Exp's
      QSA layers: transformers renames full_attention to it), `num_key_value_heads` x `head_dim`;
    * per request, for every linear-attention layer, one page of the Gated DeltaNet state:
      the causal conv window (conv_dim x (kernel - 1 + speculative tokens)) and the temporal
      state (value heads x value dim x key dim). Qwen4Exp's PLE layers keep a short-conv
      state of their own (hidden x hc_count wide, (ple kernel - 1) x ngram_size + 1 long);
      vLLM pads every Mamba page to the largest of the two specs, so a layer costs the max.
    """

    num_hidden_layers: int
    attention_layers: int  # layers of type "full_attention"/"indexed_attention": the only ones that hold KV
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    # Qwen4Exp (Flash-Next) only; 0 where the model has none.
    hidden_size: int = 0
    hc_count: int = 0  # hyper-connection streams: the PLE conv state is hidden_size x hc_count wide
    ple_layers: int = 0  # layers with a Per-Layer Embedding (the n-gram table's lookups)
    ple_conv_kernel_size: int = 4
    ngram_size: int = 3

    ATTENTION_TYPES = ("full_attention", "indexed_attention")

    @classmethod
    def from_config(cls, doc: dict[str, Any]) -> "Arch":
        """From a checkpoint's config.json (the text config of a multimodal one)."""
        t = doc.get("text_config") or doc
        layers = int(t["num_hidden_layers"])
        types = t.get("layer_types")
        if types:
            attention = sum(1 for x in types if x in cls.ATTENTION_TYPES)
        else:  # Qwen3-Next/Qwen4Exp style: every `full_attention_interval`-th layer attends (default 4)
            attention = layers // int(t.get("full_attention_interval") or 4)
        return cls(layers, attention, int(t["num_key_value_heads"]), int(t["head_dim"]),
                   int(t.get("linear_num_key_heads", 0)), int(t.get("linear_num_value_heads", 0)),
                   int(t.get("linear_key_head_dim", 0)), int(t.get("linear_value_head_dim", 0)),
                   int(t.get("linear_conv_kernel_dim", 0)),
                   hidden_size=int(t.get("hidden_size", 0)) if t.get("ple_layer_ids") else 0,
                   hc_count=int(t.get("hc_count", 0) or 0), ple_layers=len(set(t.get("ple_layer_ids") or ())),
                   ple_conv_kernel_size=int(t.get("ple_conv_kernel_size", 4)), ngram_size=int(t.get("ngram_size", 3)))

    def kv_bytes_per_token(self, dtype: str) -> int:
        """K and V of every attention layer, for one token."""
        return 2 * self.attention_layers * self.num_key_value_heads * self.head_dim * DTYPE_BYTES[dtype]

    def gdn_page_bytes(self, dtype: str, num_spec: int = 0) -> int:
        """One linear-attention layer's state for one request (vLLM's gated_delta_net_state_shape)."""
        ssm = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv_dim = 2 * self.linear_num_key_heads * self.linear_key_head_dim + \
            self.linear_num_value_heads * self.linear_value_head_dim
        conv = conv_dim * max(0, self.linear_conv_kernel_dim - 1 + num_spec)
        return (ssm + conv) * DTYPE_BYTES[dtype]

    def ple_page_bytes(self, dtype: str, num_spec: int = 0) -> int:
        """The PLE layers' short-conv state (vLLM's get_ple_mamba_state_shape_from_config)."""
        if not self.ple_layers:
            return 0
        window = (self.ple_conv_kernel_size - 1) * self.ngram_size + num_spec
        return self.hidden_size * self.hc_count * window * DTYPE_BYTES[dtype]

    def state_bytes_per_slot(self, dtype: str, num_spec: int = 0) -> int:
        """The recurrent state of every linear-attention layer for one request, each layer
        one page of the larger of the two Mamba specs; `num_spec` speculative (MTP) tokens
        widen the conv windows."""
        linear = self.num_hidden_layers - self.attention_layers
        return linear * max(self.gdn_page_bytes(dtype, num_spec), self.ple_page_bytes(dtype, num_spec))


# The architectures, as their config.json states them (Qwen3.6-27B and Qwen3.8-27B are one
# shape). Flash-Next's text config: 48 layers, every 4th attends (12), 2 KV heads x 256 (12
# KiB a token in FP8, FIELD §4), 16 key / 48 value heads x 128 in the DeltaNet layers (~56 MB
# of state a slot, FIELD §4). Its hidden size, hc_count (Qwen4ExpTextConfig's default 4) and
# PLE layers only size the PLE conv page, which stays below the DeltaNet page for any
# hidden size under ~16K, so the plan does not depend on them; a checkpoint's config.json
# (Arch.from_config) replaces all of this when it is at hand.
QWEN_27B = Arch(64, 16, 4, 256, 16, 48, 128, 128, 4)
FLASH_NEXT = Arch(48, 12, 2, 256, 16, 48, 128, 128, 4, hidden_size=2048, hc_count=4, ple_layers=4)


@dataclass(frozen=True)
class Rung:
    """One step of a profile's restart ladder (DESIGN §1c): the ServeConfig fields it sets,
    each a server less likely to crash than the one before (duck.config.at_rung; `duck serve
    --dry-run --rung N` prints a rung's plan and command line)."""

    name: str
    serve: tuple[tuple[str, Any], ...] = ()  # (ServeConfig field, value)


# MTP with prefix caching crashed earlier builds on Flash-Next (FIELD §5, vllm issue 54173):
# MTP goes first; then 0.33's full decode graphs for the field's piecewise ones; last, none.
LADDER = (Rung("as planned"),
          Rung("MTP off", (("mtp_tokens", 0),)),
          Rung("MTP off, piecewise CUDA graphs", (("mtp_tokens", 0), ("cudagraph_mode", "PIECEWISE"))),
          Rung("MTP off, eager", (("mtp_tokens", 0), ("enforce_eager", True))))


@dataclass(frozen=True)
class Profile:
    """One way of serving one model (see the module docstring for what is derived)."""

    name: str
    served_name: str  # `--served-model-name` and what the client asks for
    checkpoint: str  # the Hugging Face id; on Kaggle a folder under /kaggle/input holds it
    kaggle_model: str  # the Kaggle Models source to attach (owner/model/framework/variation)
    arch: Arch
    weights_gib: float  # the checkpoint's weights on the GPU (what stays in host RAM excluded)
    overhead_gib: float  # fitted: activations, CUDA graphs, workspaces (module docstring)
    kv_cache_dtype: str  # "fp8" or "auto" (the checkpoint's dtype, BF16)
    state_dtype: str  # the recurrent state's dtype in vLLM's cache
    gpu_memory_utilization: float
    window: int  # --max-model-len: prompt + output of one request
    output_tokens: int  # max_tokens per request
    max_slots: int  # at most this many games at once, however many would fit
    quantization: str  # what the checkpoint is, for the plan's print-out (vLLM reads it from the config)
    mtp_tokens: int = 0  # speculative tokens drafted by the native MTP head (0: off)
    table_host_gb: float = 0.0  # the n-gram table kept in host RAM (--engram-config cpu_offload)
    notes: tuple[str, ...] = ()
    # What `duck serve` passes for it (duck.llm.serve.command):
    architecture: str = ""  # config.json's `architectures[0]`, as vLLM 0.33 registers it
    chat_template: str = "qwen3.8"  # the team's template copy served when the model folder's lacks preserve_thinking
    engram_offload: bool = False  # --engram-config '{"cpu_offload": true}': the n-gram table in pinned host RAM
    linear_backend: str = ""  # --linear-backend ("": vLLM's choice)
    # The reasoning efforts its template accepts (chat_template_kwargs.reasoning_effort; any
    # other raises in the template, FIELD §4); () where the template has no such switch.
    reasoning_efforts: tuple[str, ...] = ()
    # A hosted OpenAI-compatible provider (DESIGN §1c): nothing served here, so no memory plan;
    # `max_slots` is the provider's concurrency and `window` the context budget per game.
    hosted: bool = False
    api_key_env: str = ""  # the variable holding the key (model.api_key_env's default)
    ladder: tuple[Rung, ...] = LADDER  # the restart ladder (a hosted profile: nothing to restart)


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile(
        name="flash-next", served_name="Qwen3.8-Flash-Next",
        checkpoint="Intel/Qwen3.8-Flash-Next-W4A16-AutoRound",
        kaggle_model="intel/qwen3.8-flash-next/transformers/w4a16-autoround",
        arch=FLASH_NEXT, weights_gib=65.2, overhead_gib=14.0, kv_cache_dtype="fp8", state_dtype="bfloat16",
        gpu_memory_utilization=0.96, window=131072, output_tokens=12288, max_slots=16,
        quantization="W4A16 AutoRound (4-bit experts)", mtp_tokens=3, table_host_gb=102.0,
        notes=("the n-gram table (51B parameters) is planned at BF16 in host RAM; an FP8 build halves it",
               "the field's figures: 10 x 128K (Franzen) or 16 x 70K (Siriki) in a ~1.0M-token pool",
               "no public run served it on a stock vLLM release: duck doctor on the first GPU is the proof"),
        architecture="Qwen4ExpForConditionalGeneration", engram_offload=True,
        reasoning_efforts=("xhigh", "medium", "low")),
    Profile(
        name="qwen3.8-27b", served_name="Qwen3.8-27B-FP8", checkpoint="Qwen/Qwen3.8-27B-FP8",
        kaggle_model="qwen-lm/qwen3.8/transformers/27b-fp8",
        arch=QWEN_27B, weights_gib=30.5, overhead_gib=4.2, kv_cache_dtype="fp8", state_dtype="bfloat16",
        gpu_memory_utilization=0.92, window=131072, output_tokens=12288, max_slots=16,
        quantization="FP8 (block-wise)", mtp_tokens=3,
        notes=("measured: 851K tokens of KV in BF16, 1.67M in FP8 (FIELD §4); FP8 KV is safe on 3.8",),
        architecture="Qwen3_5ForConditionalGeneration", linear_backend="cutlass",
        reasoning_efforts=("xhigh", "medium", "low")),
    Profile(
        name="qwen3.6-27b", served_name="Qwen3.6-27B-FP8", checkpoint="Qwen/Qwen3.6-27B-FP8",
        kaggle_model="qwen-lm/qwen3.6/transformers/27b-fp8",
        arch=QWEN_27B, weights_gib=30.5, overhead_gib=4.2, kv_cache_dtype="auto", state_dtype="bfloat16",
        gpu_memory_utilization=0.92, window=65536, output_tokens=8192, max_slots=16,
        quantization="FP8 (block-wise)", mtp_tokens=0,
        notes=("BF16 KV: FP8 KV corrupts Qwen3.6's output (vllm#26646)",
               "the Duck's Milestone-1 model, served at the Duck's 64K window"),
        architecture="Qwen3_5ForConditionalGeneration", chat_template="qwen3.6", linear_backend="cutlass"),
    Profile(
        name="hosted", served_name="qwen/qwen3.8-flash", checkpoint="", kaggle_model="", arch=FLASH_NEXT,
        weights_gib=0.0, overhead_gib=0.0, kv_cache_dtype="auto", state_dtype="bfloat16", gpu_memory_utilization=0.9,
        window=131072, output_tokens=12288, max_slots=4, quantization="the provider's",
        notes=("a hosted OpenAI-compatible provider: standard fields only, no /tokenize, the key from "
               "model.api_key_env; development without a GPU (FIELD §5: qwen3.8-flash, 66.9 on 5 games for $1.86)",
               "slots: the provider's concurrency (scheduler.slots); context: agent.context_tokens"),
        reasoning_efforts=("minimal", "low", "medium", "high", "xhigh"), hosted=True, api_key_env="OPENAI_API_KEY",
        ladder=()),
)}
DEFAULT_PROFILE = "flash-next"


@dataclass
class Plan:
    """What a profile means on one card and host; every count the stack uses comes from here."""

    profile: str
    served_name: str
    checkpoint: str
    arch_from: str  # "profile" or the config.json read
    gpu_gib: float
    utilization: float  # --gpu-memory-utilization
    usable_gib: float
    weights_gib: float
    overhead_gib: float
    kv_cache_dtype: str
    kv_bytes_per_token: int
    state_mib_per_slot: float
    kv_pool_gib: float
    kv_tokens: int
    window: int
    context_tokens: int  # the agent's budget: prompt + output of one request
    output_tokens: int
    low_water: float
    mean_tokens_per_slot: int
    slots: int
    slots_fit: int  # how many would fit the pool, before max_slots
    max_num_seqs: int
    mtp_tokens: int
    host: dict[str, float] = field(default_factory=dict)
    kernel_disk_mb: int = 256
    problems: list[str] = field(default_factory=list)
    # (Added with the vLLM 0.33 stack; the fields above keep their names.)
    architecture: str = ""
    prefix_checkpoints: int = 1  # DeltaNet state pages a game's cached prefix holds beside its running one
    state_gib: float = 0.0  # every slot's recurrent state (running + prefix checkpoints)
    engram_offload: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check(self) -> None:
        """Raise ProfileError when the plan does not fit (before anything starts)."""
        if self.problems:
            raise ProfileError(f"profile {self.profile} does not fit: " + "; ".join(self.problems))


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(f"unknown serving profile {name!r} (known: {', '.join(PROFILES)})") from None


def arch_of(profile: Profile, model_path: str | None) -> tuple[Arch, str]:
    """The checkpoint's own architecture when its config.json is at hand, else the profile's."""
    if model_path:
        cfg = Path(model_path) / "config.json"
        try:
            if cfg.is_file():
                return Arch.from_config(json.loads(cfg.read_text())), str(cfg)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ProfileError(f"{cfg}: not a config.json the memory plan can read ({e})") from None
    return profile.arch, "profile"


def plan(name: str = DEFAULT_PROFILE, *, model_path: str | None = None, gpu_mib: int = RTX_PRO_6000_MIB,
         host_gb: float = KAGGLE_HOST_GB, utilization: float | None = None, kv_cache_dtype: str | None = None,
         window: int | None = None, context_tokens: int | None = None, output_tokens: int | None = None,
         slots: int | None = None, max_num_seqs: int | None = None, low_water: float = 0.45,
         kernels: int = KAGGLE_GAMES, kernel_disk_mb: int | None = None, mtp_tokens: int | None = None,
         prefix_checkpoints: int = 1) -> Plan:
    """The memory plan of profile `name`; every keyword set overrides what the profile says
    (None: derived). `problems` lists what does not fit; nothing here raises for that.

    `prefix_checkpoints`: with prefix caching on a hybrid model vLLM 0.33 keeps the DeltaNet
    state at a cached prefix's end ("align" mode: vllm/config/cache.py), so that the game's
    next request resumes there; each game between requests holds that page beside the one
    its running request writes. 1 is this plan's assumption; `duck doctor` reads the real pool."""
    p = get(name)
    context = context_tokens or window or p.window
    # The output cap: the profile's, but never more than a quarter of a smaller budget (an
    # A/B at 32K, a test at 8K), so that a prompt always has room.
    output = output_tokens or min(p.output_tokens, context // 4)
    problems = [f"the output cap ({output}) leaves no room for a prompt in {context} tokens"] if output >= context else []
    if p.hosted:
        return _hosted_plan(p, window or context, context, output, problems, slots, low_water, kernel_disk_mb)
    mtp = p.mtp_tokens if mtp_tokens is None else mtp_tokens
    arch, arch_from = arch_of(p, model_path)
    util = utilization or p.gpu_memory_utilization
    dtype = kv_cache_dtype or p.kv_cache_dtype
    if dtype not in DTYPE_BYTES:
        raise ProfileError(f"kv_cache_dtype {dtype!r} is not one the plan knows ({', '.join(DTYPE_BYTES)})")
    window = window or context
    if context > window:
        problems.insert(0, f"the context budget ({context}) is larger than the server's window ({window})")
    gpu_gib = gpu_mib * MiB / GiB
    usable = util * gpu_gib
    one = arch.state_bytes_per_slot(p.state_dtype, mtp)  # a running request's state
    state = one * (1 + prefix_checkpoints)  # what a game holds: its running state and its prefix's
    per_token = arch.kv_bytes_per_token(dtype)
    mean = int(context * (1 + low_water) / 2)
    # The pool is what remains with the slots' states paid; solved for the slots that fit.
    free = usable - p.weights_gib - p.overhead_gib
    fit = max(0, math.floor(free * GiB / (mean * per_token + state)))
    n = slots or max(1, min(p.max_slots, fit))
    pool_gib = max(0.0, free - n * state / GiB)
    kv_tokens = int(pool_gib * GiB / per_token)
    if free <= 0:
        problems.append(f"weights {p.weights_gib:g} GiB + overhead {p.overhead_gib:g} GiB exceed "
                        f"{util:g} of {gpu_gib:.1f} GiB")
    elif kv_tokens < context:
        problems.append(f"the KV pool ({kv_tokens} tokens) cannot hold one context of {context}")
    elif n * mean > kv_tokens:
        problems.append(f"{n} slots x {mean} tokens on average need {n * mean} tokens of KV; the pool holds "
                        f"{kv_tokens} (at most {fit} slots fit)")
    # Host RAM: the table, vLLM's own process (the loader, pinned buffers), the harness's
    # game processes and kernels (RSS, ~0.1 GB each), 10% kept free; the rest may go to the
    # kernels' tmpfs quotas (page cache the data quota counts, in host RAM).
    vllm_host, per_game = 12.0, 0.1
    spare = host_gb * 0.9 - p.table_host_gb - vllm_host - kernels * per_game
    disk = kernel_disk_mb or max(16, min(256, int(spare * 1024 / max(1, kernels))))
    host = {"total_gb": host_gb, "ngram_table_gb": p.table_host_gb, "vllm_gb": vllm_host,
            "games_gb": round(kernels * per_game, 1), "kernels": kernels,
            "tmpfs_gb": round(kernels * disk / 1024, 1), "spare_gb": round(spare - kernels * disk / 1024, 1)}
    if spare - kernels * disk / 1024 < 0:
        problems.append(f"host RAM: {kernels} kernels x {disk} MB of tmpfs do not fit beside the "
                        f"{p.table_host_gb:g} GB n-gram table in {host_gb:g} GB")
    return Plan(profile=p.name, served_name=p.served_name, checkpoint=p.checkpoint, arch_from=arch_from,
                gpu_gib=round(gpu_gib, 2), utilization=util, usable_gib=round(usable, 2), weights_gib=p.weights_gib,
                overhead_gib=p.overhead_gib, kv_cache_dtype=dtype, kv_bytes_per_token=per_token,
                state_mib_per_slot=round(one / MiB, 1), kv_pool_gib=round(pool_gib, 2), kv_tokens=kv_tokens,
                window=window, context_tokens=context, output_tokens=output, low_water=low_water,
                mean_tokens_per_slot=mean, slots=n, slots_fit=fit, max_num_seqs=max_num_seqs or n + 1,
                mtp_tokens=mtp, host=host, kernel_disk_mb=disk, problems=problems, architecture=p.architecture,
                prefix_checkpoints=prefix_checkpoints, state_gib=round(n * state / GiB, 2),
                engram_offload=p.engram_offload)


def _hosted_plan(p: Profile, window: int, context: int, output: int, problems: list[str], slots: int | None,
                 low_water: float, kernel_disk_mb: int | None) -> Plan:
    """A hosted profile's plan: no card, no KV pool; the provider's concurrency as the slots
    and the profile's window as the context budget (both overridable like any plan's)."""
    n = slots or p.max_slots
    return Plan(profile=p.name, served_name=p.served_name, checkpoint="", arch_from="hosted", gpu_gib=0.0,
                utilization=p.gpu_memory_utilization, usable_gib=0.0, weights_gib=0.0, overhead_gib=0.0,
                kv_cache_dtype=p.kv_cache_dtype, kv_bytes_per_token=0, state_mib_per_slot=0.0, kv_pool_gib=0.0,
                kv_tokens=0, window=window, context_tokens=context, output_tokens=output,
                low_water=low_water, mean_tokens_per_slot=int(context * (1 + low_water) / 2), slots=n, slots_fit=n,
                max_num_seqs=n + 1, mtp_tokens=0, host={}, kernel_disk_mb=kernel_disk_mb or 256, problems=problems)
