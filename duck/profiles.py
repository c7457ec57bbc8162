"""Serving profiles and the memory plan each one implies (DESIGN §1c, FIELD §4).

A profile names one way of serving one model on one card: the checkpoint, its quantisation,
the KV-cache dtype, speculative decoding, the context window and output cap. From it and the
model's architecture (its config.json, or the shape the profile carries when no checkpoint
is at hand) `plan()` derives what everything else uses, so that no second hand-set number
exists anywhere:

* the KV pool: what the card holds at `gpu_memory_utilization` after the weights, the
  runtime's own overhead and the per-slot recurrent state, in tokens of KV. Only the
  attention layers hold KV (Flash-Next: 12 of 48, 2 KV heads x 256: 12 KiB a token in FP8;
  the 27B models: 16 of 64, 4 x 256: 64 KiB a token in BF16). The Gated DeltaNet layers hold
  a fixed recurrent state per request instead (heads x key dim x value dim, plus the conv
  window), whatever the context;
* the slots: how many games can hold a context at once. A game's context is a sawtooth: it
  grows to the budget, then the trim (duck.agent.context) drops it to `low_water` of the
  budget in one block, so on average a slot holds (1 + low_water) / 2 of the window. Slots =
  the pool over that mean, capped at the profile's `max_slots` (decode per stream falls as
  ~running^-0.4; the field ran 10-16). Flash-Next at 128K: 1.0M tokens / 95K = 10 slots,
  Franzen's figure;
* the context budget per game (`agent.context_tokens`, prompt plus output) = the window,
  and vLLM's `--max-num-seqs` = the slots plus one for the health probe;
* the host RAM plan: Kaggle's 176 GB less the n-gram table Flash-Next keeps in host RAM
  (51 GB FP8 / 102 GB BF16), vLLM's own host memory and the harness's processes, and from
  what is left the tmpfs quota per kernel (`kernel.disk_mb`, at most 256 MB).

The runtime overhead (activations, CUDA graphs, MoE workspaces, the vision encoder) is not
computable from a config: each profile carries one figure, fitted so that the plan gives the
KV pool the field measured (FIELD §4: Flash-Next ~1.0M tokens at 0.96; Qwen3.8-27B-FP8 851K
in BF16). `duck doctor` reads the real pool off vLLM's `/metrics` on the first GPU; where it
disagrees, that figure is the one to change.

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
    (`text_config` of Qwen3.5/3.6/3.8 and of Flash-Next's `qwen4_exp_text`)."""

    num_hidden_layers: int
    attention_layers: int  # layers of type "full_attention": the only ones that hold KV
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int

    @classmethod
    def from_config(cls, doc: dict[str, Any]) -> "Arch":
        """From a checkpoint's config.json (the text config of a multimodal one)."""
        t = doc.get("text_config") or doc
        layers = int(t["num_hidden_layers"])
        types = t.get("layer_types")
        if types:
            attention = sum(1 for x in types if x == "full_attention")
        else:  # Qwen3-Next style: every `full_attention_interval`-th layer attends
            attention = layers // int(t.get("full_attention_interval") or 1)
        return cls(layers, attention, int(t["num_key_value_heads"]), int(t["head_dim"]),
                   int(t.get("linear_num_key_heads", 0)), int(t.get("linear_num_value_heads", 0)),
                   int(t.get("linear_key_head_dim", 0)), int(t.get("linear_value_head_dim", 0)),
                   int(t.get("linear_conv_kernel_dim", 0)))

    def kv_bytes_per_token(self, dtype: str) -> int:
        """K and V of every attention layer, for one token."""
        return 2 * self.attention_layers * self.num_key_value_heads * self.head_dim * DTYPE_BYTES[dtype]

    def state_bytes_per_slot(self, dtype: str) -> int:
        """The recurrent state of every linear-attention layer for one request: the
        DeltaNet matrix per value head, and the causal conv's window over q, k and v."""
        linear = self.num_hidden_layers - self.attention_layers
        ssm = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv_dim = 2 * self.linear_num_key_heads * self.linear_key_head_dim + \
            self.linear_num_value_heads * self.linear_value_head_dim
        conv = conv_dim * max(0, self.linear_conv_kernel_dim - 1)
        return linear * (ssm + conv) * DTYPE_BYTES[dtype]


# The architectures, as their config.json states them (Qwen3.6-27B and Qwen3.8-27B are one
# shape; Flash-Next's text config as public copies of its config.json give it).
QWEN_27B = Arch(64, 16, 4, 256, 16, 48, 128, 128, 4)
FLASH_NEXT = Arch(48, 12, 2, 256, 16, 48, 128, 128, 4)


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


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile(
        name="flash-next", served_name="Qwen3.8-Flash-Next",
        checkpoint="Intel/Qwen3.8-Flash-Next-W4A16-AutoRound",
        kaggle_model="intel/qwen3.8-flash-next/transformers/w4a16-autoround",
        arch=FLASH_NEXT, weights_gib=65.2, overhead_gib=14.3, kv_cache_dtype="fp8", state_dtype="bfloat16",
        gpu_memory_utilization=0.96, window=131072, output_tokens=12288, max_slots=16,
        quantization="W4A16 AutoRound (4-bit experts)", mtp_tokens=3, table_host_gb=102.0,
        notes=("the n-gram table (51B parameters) is planned at BF16 in host RAM; an FP8 build halves it",
               "the field's figures: 10 x 128K (Franzen) or 16 x 70K (Siriki) in a ~1.0M-token pool")),
    Profile(
        name="qwen3.8-27b", served_name="Qwen3.8-27B-FP8", checkpoint="Qwen/Qwen3.8-27B-FP8",
        kaggle_model="qwen-lm/qwen3.8/transformers/27b-fp8",
        arch=QWEN_27B, weights_gib=30.5, overhead_gib=5.5, kv_cache_dtype="fp8", state_dtype="bfloat16",
        gpu_memory_utilization=0.92, window=131072, output_tokens=12288, max_slots=16,
        quantization="FP8 (block-wise)", mtp_tokens=3,
        notes=("measured: 851K tokens of KV in BF16, 1.67M in FP8 (FIELD §4); FP8 KV is safe on 3.8",)),
    Profile(
        name="qwen3.6-27b", served_name="Qwen3.6-27B-FP8", checkpoint="Qwen/Qwen3.6-27B-FP8",
        kaggle_model="qwen-lm/qwen3.6/transformers/27b-fp8",
        arch=QWEN_27B, weights_gib=30.5, overhead_gib=5.5, kv_cache_dtype="auto", state_dtype="bfloat16",
        gpu_memory_utilization=0.92, window=65536, output_tokens=8192, max_slots=16,
        quantization="FP8 (block-wise)", mtp_tokens=0,
        notes=("BF16 KV: FP8 KV corrupts Qwen3.6's output (vllm#26646)",
               "the Duck's Milestone-1 model, served at the Duck's 64K window")),
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
         kernels: int = KAGGLE_GAMES, kernel_disk_mb: int | None = None) -> Plan:
    """The memory plan of profile `name`; every keyword set overrides what the profile says
    (None: derived). `problems` lists what does not fit; nothing here raises for that."""
    p = get(name)
    arch, arch_from = arch_of(p, model_path)
    util = utilization or p.gpu_memory_utilization
    dtype = kv_cache_dtype or p.kv_cache_dtype
    if dtype not in DTYPE_BYTES:
        raise ProfileError(f"kv_cache_dtype {dtype!r} is not one the plan knows ({', '.join(DTYPE_BYTES)})")
    context = context_tokens or window or p.window
    window = window or context
    # The output cap: the profile's, but never more than a quarter of a smaller budget (an
    # A/B at 32K, a test at 8K), so that a prompt always has room.
    output = output_tokens or min(p.output_tokens, context // 4)
    problems = []
    if context > window:
        problems.append(f"the context budget ({context}) is larger than the server's window ({window})")
    if output >= context:
        problems.append(f"the output cap ({output}) leaves no room for a prompt in {context} tokens")
    gpu_gib = gpu_mib * MiB / GiB
    usable = util * gpu_gib
    state = arch.state_bytes_per_slot(p.state_dtype)
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
                state_mib_per_slot=round(state / MiB, 1), kv_pool_gib=round(pool_gib, 2), kv_tokens=kv_tokens,
                window=window, context_tokens=context, output_tokens=output, low_water=low_water,
                mean_tokens_per_slot=mean, slots=n, slots_fit=fit, max_num_seqs=max_num_seqs or n + 1,
                mtp_tokens=p.mtp_tokens, host=host, kernel_disk_mb=disk, problems=problems)
