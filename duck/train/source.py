"""Reading played games for export: run folders, their conversations, records and run.json.

`find_runs(paths)` lists the conversations under each run folder (any depth: a `duck ab`
output holds one run folder per arm and pass); `load_game(...)` reads one conversation with
what the export needs beside it: the record's boards (images), the template variables the
request was rendered with (the start line's, or rebuilt from run.json for older files), the
source tags, and per turn its level and the levels it won. The rules: docs/training.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from duck.config import profiles
from duck.llm.serve import SERVER_TEMPLATE_KWARGS
from duck.play.conversation import Conversation, read_conversation, record_of
from duck.play.record import read_record
from duck.train import BadData

VLLM_KINDS = ("full",)
# What governs the use of a source's outputs for training (FIELD §4: Flash-Next's licence);
# a hosted model's outputs fall under its provider's and its maker's terms: check them.
TERMS = {"flash-next": "qwen-community-license", "qwen3.8-27b": "open-weights: the checkpoint's licence",
         "qwen3.6-27b": "open-weights: the checkpoint's licence"}


@dataclass
class Run:
    path: Path
    index: int
    conversations: list[Path]
    info: dict[str, Any] = field(default_factory=dict)  # run.json (the folder's or the nearest above)

    @property
    def commit(self) -> str | None:
        return (self.info.get("git") or {}).get("commit")

    @property
    def config(self) -> dict[str, Any] | None:
        return self.info.get("config")

    def digest(self) -> str | None:
        """A short sha256 of the run's config (two runs with one config share it)."""
        if self.config is None:
            return None
        return hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Game:
    run: Run
    path: Path
    conv: Conversation
    grids: dict[int, Any] | None
    variables: dict[str, Any]  # the template variables its requests were rendered with
    source: dict[str, Any]
    turn_level: dict[int, int]  # turn -> the level it played
    won: dict[int, int]  # turn -> levels completed at its end
    completed: set[int]  # levels completed in the game
    final_state: str
    template_differs: bool = False  # played with another template than the one in use (--template)

    @property
    def game_id(self) -> str:
        return self.conv.game_id

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.conv.start.get("tools") or None


def conversation_files(folder: Path) -> list[Path]:
    """Every conversation under `folder`: `<game>.jsonl.gz` (finished) or `<game>.jsonl` (live)."""
    out = []
    for d in sorted(p for p in folder.rglob("conversations") if p.is_dir()):
        finished = {p.name.removesuffix(".jsonl.gz") for p in d.glob("*.jsonl.gz")}
        out += sorted(d.glob("*.jsonl.gz")) + sorted(p for p in d.glob("*.jsonl") if p.stem not in finished)
    return out


def find_runs(paths: list[str]) -> list[Run]:
    """The run folders named, each with its conversations; BadData for a folder without any."""
    runs = []
    for k, p in enumerate(paths):
        folder = Path(p)
        if not folder.is_dir():
            raise BadData(f"{p}: " + ("not a folder" if folder.exists() else "no such folder"))
        convs = conversation_files(folder)
        if not convs:
            raise BadData(f"{p}: no conversations (conversations/<game>.jsonl[.gz]): play with --policy llm "
                          "and without --no-conversations")
        runs.append(Run(folder, k, convs, _run_json(folder)))
    return runs


def _run_json(folder: Path) -> dict[str, Any]:
    for d in [folder, *folder.resolve().parents][:4]:
        f = d / "run.json"
        if f.is_file():
            try:
                return json.loads(f.read_text())
            except (OSError, ValueError):
                return {}
    return {}


def _nearest_info(run: Run, conversation: Path) -> dict[str, Any]:
    """run.json of the run folder holding `conversation` (a `duck ab` pass), else the run's."""
    folder = conversation.parent.parent
    f = folder / "run.json"
    if folder != run.path and f.is_file():
        try:
            return json.loads(f.read_text())
        except (OSError, ValueError):
            pass
    return run.info


@dataclass
class Student:
    """Whose template variables a teacher's samples are rendered with (`--student-profile`)."""

    profile: str
    name: str
    variables: dict[str, Any]
    given: bool  # named on the command line (else the default profile, for hosted teachers)

    @classmethod
    def of(cls, profile: str | None) -> "Student":
        from duck.config import load_config
        from duck.llm import provider
        name = profile or profiles.DEFAULT_PROFILE
        if name not in profiles.PROFILES or profiles.get(name).hosted:
            served = ", ".join(p for p in profiles.PROFILES if not profiles.get(p).hosted)
            raise BadData(f"--student-profile {name}: not a served profile ({served})")
        cfg = load_config([], [f"model.profile={name}"], env={})
        kwargs = provider.fields(cfg.model, False)["extra_body"]["chat_template_kwargs"]
        return cls(name, cfg.model.name, SERVER_TEMPLATE_KWARGS | kwargs, profile is not None)


def load_game(run: Run, path: Path, template_sha: str, forced: bool, student: Student) -> Game:
    """One conversation, ready to export (see the module docstring); BadData where the rules say."""
    conv = read_conversation(path)
    start, info = conv.start, _nearest_info(run, path)
    recorded = start.get("template_sha256")
    differs = bool(recorded) and recorded != template_sha
    if differs and not forced:
        raise BadData(f"{path}: played with the chat template sha256 {recorded[:12]}..., not the one in use "
                      f"({template_sha[:12]}...): --template FILE renders with that file")
    config = info.get("config")
    profile = start.get("profile") or ((config or {}).get("model") or {}).get("profile")
    hosted = profile in profiles.PROFILES and profiles.get(profile).hosted or (
        "chat_template_kwargs" in start and start["chat_template_kwargs"] is None)
    model = start.get("model")
    teacher = hosted or (student.given and model != student.name)
    variables = student.variables if teacher else _recorded_variables(path, start, config)
    record = record_of(path)
    rec = read_record(record) if record.is_file() else None
    grids = dict(rec.grids()) if rec is not None else None
    state = (rec.end or (rec.actions[-1] if rec.actions else {}) or {}).get("state") if rec else None
    turn_level, won, completed = _levels(conv)
    url = (start.get("urls") or [""])[0]
    source = {"model": model, "profile": profile, "policy": start.get("policy"),
              "commit": (info.get("git") or {}).get("commit"),
              "provider": (urlparse(url).hostname or "hosted") if hosted else "vllm",
              "teacher": model if teacher else None, "reasoning_kind": _reasoning_kind(conv, hosted)}
    return Game(run, path, conv, grids, variables, source, turn_level, won, completed, state or "unknown",
                differs)


def _recorded_variables(path: Path, start: dict[str, Any], config: dict[str, Any] | None) -> dict[str, Any]:
    """The template variables a vLLM request was rendered with: the server's defaults under the
    request's own, as the start line records them; older files: rebuilt from the sampling and
    run.json (the reasoning effort changes the system prompt whenever thinking is on)."""
    if "chat_template_kwargs" in start:
        return dict(start.get("server_template_kwargs") or {}) | dict(start["chat_template_kwargs"] or {})
    sampling, model = start.get("sampling") or {}, (config or {}).get("model") or {}
    thinking = sampling.get("thinking", model.get("thinking", True))
    if thinking and config is None:
        raise BadData(f"{path}: no template variables recorded and its system prompt cannot be rebuilt "
                      "(thinking was on; no run.json says the reasoning effort)")
    kwargs: dict[str, Any] = {"enable_thinking": thinking}
    preserve = sampling.get("preserve_thinking", model.get("preserve_thinking"))
    if preserve is not None:
        kwargs["preserve_thinking"] = preserve
    if thinking and model.get("reasoning_effort") is not None:
        kwargs["reasoning_effort"] = model["reasoning_effort"]
    return SERVER_TEMPLATE_KWARGS | kwargs


def _levels(conv: Conversation) -> tuple[dict[int, int], dict[int, int], set[int]]:
    """Per turn the level it played and the levels it completed; the levels completed."""
    turn_level: dict[int, int] = {}
    won: dict[int, int] = {}
    completed: set[int] = set()
    last = None
    for line in conv.lines:
        kind = line.get("type")
        if kind == "message" and "turn" in line and "call" not in line and "level" in line:
            turn_level.setdefault(line["turn"], line["level"])
        elif kind == "event" and line.get("kind") == "turn_end":
            last = line.get("turn")
        elif kind == "event" and line.get("kind") == "level_memory" and last is not None:
            won[last] = won.get(last, 0) + 1
            completed.add(int(line.get("level") or 0))
    return turn_level, won, completed


def _reasoning_kind(conv: Conversation, hosted: bool) -> str:
    """`full` (the model's own thinking), `summary` (a provider's summary of it) or `none`
    (hidden or encrypted): what the replies carried."""
    if not hosted:
        return "full"
    kinds = set()
    for line in conv.messages.values():
        m = line.get("message") or {}
        if m.get("role") != "assistant":
            continue
        blocks = [b for b in m.get("reasoning_details") or [] if isinstance(b, dict)]
        text = m.get("reasoning") or m.get("reasoning_content")
        if any("summary" in str(b.get("type", "")) for b in blocks):
            kinds.add("summary")
        else:
            kinds.add("full" if isinstance(text, str) and text.strip() else "none")
    return "summary" if "summary" in kinds else "full" if "full" in kinds else "none"


def terms(source: dict[str, Any]) -> str:
    """The terms tag of a source (module constant TERMS; a provider's: its own terms)."""
    if source.get("provider") not in (None, "vllm"):
        return f"provider terms: {source['provider']} and the maker of {source.get('model')}"
    return TERMS.get(source.get("profile") or "", "unknown: check the checkpoint's licence")
