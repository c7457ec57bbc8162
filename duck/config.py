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
from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class PlayConfig(Section):
    policy: str = "explorer"  # the non-LLM default: runs anywhere, no GPU
    seed: int = 0
    max_actions: int = 1000  # per game; ~7x the Duck's mean of 137 actions per game
    workers: int = 1  # parallel game processes (the engine is pure Python under the GIL)


class ModelConfig(Section):
    urls: list[str] = []  # OpenAI-compatible base URLs, one per vLLM server (GPU)
    name: str = "Qwen3.6-27B-FP8"
    temperature: float = 0.6  # Qwen's recommended thinking-mode sampling
    top_p: float = 0.95
    top_k: int = 20
    thinking: bool = True
    max_output_tokens: int = 4096  # the Duck had no cap; its calls averaged ~800 tokens
    timeout_s: float = 180.0
    retries: int = 3


class KernelConfig(Section):
    call_timeout_s: float = 30.0  # the Duck's limit; our calls are fast, so it rarely binds
    output_chars: int = 4096  # head+tail kept of each call's output (the Duck's cap)
    memory_mb: int = 2048


class AgentConfig(Section):
    context_tokens: int = 32768  # prompt budget per game (see DESIGN §1c: KV cache share)
    keep_notes_on_game_over: bool = True
    carry_notes_across_levels: bool = True
    animation_summaries: bool = True
    action_counts_in_prompt: bool = True
    seeded_sampling: bool = True


class SchedulerConfig(Section):
    policy: str = "adaptive"
    budget_s: float = 9 * 3600 - 30 * 60  # Kaggle's 9 h less setup and a safety margin
    slots: int = 28


class Config(Section):
    play: PlayConfig = PlayConfig()
    model: ModelConfig = ModelConfig()
    kernel: KernelConfig = KernelConfig()
    agent: AgentConfig = AgentConfig()
    scheduler: SchedulerConfig = SchedulerConfig()


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
