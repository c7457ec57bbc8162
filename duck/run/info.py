"""`run.json`: what produced a run folder, written when `duck play` starts and updated when it ends.

Fields: `command` (argv), `out`, `games_dir`, `games` (the ids the run means to play: what
`duck score` and `--resume` measure a folder against), `status` (running, complete,
interrupted, disk_full, failed), `started` / `ended` (UTC, ISO 8601), `config` (the resolved
config, `Config.model_dump()`), `derived` (the fields the serving profile's plan filled in),
`plan` (that plan, duck.config.profiles.Plan.as_dict()), `profile` (the serving profile's name),
`git` (`commit`, `dirty`: the checkout duck ran from; null outside a git checkout),
`versions` (Python and the pinned packages), `machine` (host name, OS, CPUs, memory, GPU
when nvidia-smi answers) and `resumes` (one entry per `duck play --resume`: command,
started, ended, status, the games it played). Written whole to a temporary file and renamed,
so a reader never sees half of it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from duck.config import Config, one_line, unset_dotted
from duck.files import write_whole
from duck.play.record import versions

RUN_JSON = "run.json"
ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages) duck runs from


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def git_state(root: Path = ROOT) -> dict[str, Any] | None:
    """The commit of the checkout and whether tracked files differ from it; None outside git."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None,
            "branch": git("rev-parse", "--abbrev-ref", "HEAD")}


def machine() -> dict[str, Any]:
    out: dict[str, Any] = {"host": platform.node(), "os": platform.platform(), "cpus": os.cpu_count(),
                           "python": sys.version.split()[0]}
    try:
        out["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                out["gpus"] = [line.strip() for line in r.stdout.strip().splitlines()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return out


def new_info(cfg: Config, *, command: list[str] | None, out: Path, games_dir: Path, games: list[str]) -> dict:
    return {"command": list(command if command is not None else sys.argv), "out": str(out),
            "games_dir": str(games_dir), "games": list(games), "status": "running", "started": now(),
            "ended": None, "config": cfg.model_dump(mode="json"), "derived": list(cfg.derived),
            "plan": cfg.plan.as_dict(), "profile": cfg.model.profile, "git": git_state(),
            "versions": versions(), "machine": machine(), "resumes": []}


def write_info(out: Path, info: dict) -> None:
    """Write run.json whole (a temporary file renamed over it). Raises OSError."""
    write_whole(Path(out) / RUN_JSON, json.dumps(info, indent=1) + "\n")


def read_info(out: str | Path) -> dict | None:
    """The run folder's run.json, None when it has none; ValueError (one line) when it is
    not a run.json."""
    path = Path(out) / RUN_JSON
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict) or \
            not isinstance(info.get("games"), list):
        raise ValueError(f"{path}: not a run.json (no config or games)")
    return info


# Fields a run.json written before issue 40 holds that the config no longer has, with the
# value today's code plays as (a constant beside its reader, or the one path kept): a run that
# had that value resumes; one that set another cannot be finished by this version.
RETIRED = {
    "model.serve.host_memory_gb": 176, "model.serve.max_pixels": 409600,
    "model.serve.default_chat_template_kwargs": {"preserve_thinking": True}, "model.serve.flashinfer_sampler": False,
    "model.serve.smoke_timeout_s": 120.0, "kernel.output_chars": 4096, "kernel.file_mb": 16, "kernel.open_files": 64,
    "kernel.notes_dict_chars": 16000, "agent.trim_summary": False, "agent.exact_tokens": True,
    "agent.keep_notes_on_game_over": True, "agent.carry_notes_across_levels": True, "agent.animation_summaries": True,
    "agent.action_counts_in_prompt": True, "agent.seeded_sampling": True, "agent.image_scale": 10,
    "agent.diff_image": True, "agent.death_images": True, "agent.animation_images": 4,
    "agent.animation_image_scale": 4, "agent.hud_border": 4, "agent.compact_results": True, "agent.level_memory": True,
    "agent.memory_tail": 20, "agent.notes_in_turn": False, "agent.notes_stop_at_blank_line": True,
    "agent.note_section_chars": 900, "agent.nudge_after_calls": 6, "agent.max_calls_per_turn": 16,
    "agent.world_model_tools": False}


def _retire(doc: dict) -> dict:
    """An old run.json's config in today's fields: the retired fields dropped where they hold
    what today's code does (ValueError naming the first that does not), the two guard fields
    as `agent.guards`, `explorer.options` as the typed explorer fields."""
    agent, explorer = doc.get("agent") or {}, doc.get("explorer") or {}
    if "guard_stop_on_no_effect" in agent or "guard_block_from_level" in agent:
        on = (agent.pop("guard_stop_on_no_effect", True), agent.pop("guard_block_from_level", 2))
        if on not in ((True, 2), (False, 0)):
            raise ValueError(f"run.json's config has guards {on}, which this version cannot play")
        agent.setdefault("guards", on[0])
    explorer.update(explorer.pop("options", None) or {})
    for dotted, now in RETIRED.items():
        *path, key = dotted.split(".")
        section = doc
        for name in path:
            section = section.get(name) or {}
        if key in section and section.pop(key) != now:
            raise ValueError(f"run.json's config sets {dotted}, which this version no longer has (it plays as "
                             f"{json.dumps(now)}): finish the run with the version that started it")
    return doc


def config_of(info: dict) -> Config:
    """The run's config as it was resolved: the fields the plan filled in are planned again
    from the same inputs (so they come out the same and stay marked derived); a run.json from
    before issue 40 is read in today's fields (`_retire`)."""
    doc = unset_dotted(_retire(json.loads(json.dumps(info["config"]))), info.get("derived") or [])
    try:
        return Config.model_validate(doc)
    except ValidationError as e:
        raise ValueError(f"run.json's config no longer validates: {one_line(e)}") from None


def duck_command() -> str:
    """How to run duck again, as the user did: `duck` when that is the command found on PATH,
    else the path they typed (`.venv/bin/duck`, as the README says), made relative to the
    current folder when it lies below it; `.venv/bin/duck` when duck was not started by its
    script (tests, `python -m`)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name != "duck":
        return ".venv/bin/duck"
    if not Path(argv0).is_absolute():
        return argv0  # as typed: `.venv/bin/duck`, `./duck`
    on_path = shutil.which("duck")
    if on_path and Path(on_path).resolve() == Path(argv0).resolve():
        return "duck"
    try:
        return str(Path(argv0).relative_to(Path.cwd()))
    except ValueError:
        return argv0
