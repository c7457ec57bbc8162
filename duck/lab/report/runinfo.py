"""The run's own account of itself in a report: the header rows made from `run.json`
(duck.run.info) and score.json's partial marking, and the config difference of two runs.

Everything here reads JSON only; a run folder without run.json (older runs, hand-made
folders) gets a header that says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from duck.paths import REPO


def load_info(run_dir: Path) -> dict[str, Any] | None:
    """run.json of a run folder, or None (absent or unreadable: the report goes on without it)."""
    try:
        info = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def header_rows(info: dict[str, Any] | None, recorded: list[str]) -> list[list[str]]:
    """[label, value] rows: the command, status, times, commit, policy, the serving profile (a model's
    run only), machine, versions, and which games the run meant to play but has no record of."""
    if info is None:
        return [["run.json", "none: what produced this folder is not recorded (a run older than run.json)"]]
    cfg = info.get("config") or {}
    play = cfg.get("play") or {}
    git = info.get("git") or {}
    m = info.get("machine") or {}
    ver = info.get("versions") or {}
    commit = (f"{str(git.get('commit'))[:12]}{' (dirty: uncommitted changes)' if git.get('dirty') else ''}"
              f"{' on ' + git['branch'] if git.get('branch') else ''}") if git else "not a git checkout"
    plan = info.get("plan") or {}
    profile = str(info.get("profile") or "")
    if plan:
        profile += (f": {plan.get('served_name')}, {plan.get('slots')} slots × {plan.get('context_tokens')} "
                    f"tokens, KV {plan.get('kv_cache_dtype')}")
    rows = [["command", " ".join(str(a) for a in info.get("command") or [])],
            ["status", str(info.get("status"))],
            ["started / ended (UTC)", f"{info.get('started')} / {info.get('ended') or '–'}"],
            ["commit", commit],
            ["policy", f"{shown(play.get('policy'))} · seed {play.get('seed')} · "
                       f"{play.get('max_actions')} actions per game · {play.get('workers')} worker(s)"],
            *([["serving profile", profile]] if play.get("policy") == "llm" else []),  # (no model, none)
            ["games", f"{len(info.get('games') or [])} from {info.get('games_dir')}"],
            ["machine", f"{m.get('host')} · {m.get('os')} · {m.get('cpus')} CPUs · {m.get('memory_gb')} GB"
                        + (f" · {', '.join(m['gpus'])}" if m.get("gpus") else "")],
            ["versions", ", ".join(f"{k} {v}" for k, v in ver.items())]]
    missing = [g for g in info.get("games") or [] if g not in set(recorded)]
    if missing:
        rows.append(["missing games", f"{len(missing)}: {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}"
                                      " (not played: the score is over the recorded games)"])
    for r in info.get("resumes") or []:
        rows.append(["resumed", f"{r.get('started')} → {r.get('ended') or '–'}: {len(r.get('games') or [])} games, "
                                f"{r.get('status')}"])
    return rows


def shown(value: Any) -> Any:
    """A value as a report shows it: a path of this machine relative to the checkout or the current
    folder where it lies inside one, else under `~/`; a policy file elsewhere (`/x/y.py:Class`) by
    its file's name (run.json keeps the whole path)."""
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    path, colon, cls = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    p = Path(path)
    for base in (REPO, Path.cwd(), Path.home()):
        if p.is_relative_to(base):
            return f"{'~/' if base == Path.home() else ''}{p.relative_to(base)}{colon}{cls}"
    return f"{p.name}{colon}{cls}" if colon else value


def flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} → {"a.b": 1}."""
    if not isinstance(doc, dict):
        return {prefix: doc}
    out: dict[str, Any] = {}
    for k, v in doc.items():
        out |= flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def config_difference(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[list[str]]:
    """[field, A's value, B's value] for every config field (and the commit) the two runs differ in."""
    fa = flat((a or {}).get("config") or {})
    fb = flat((b or {}).get("config") or {})
    rows = [[k, json.dumps(shown(fa.get(k))), json.dumps(shown(fb.get(k)))]
            for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    ca, cb = ((x or {}).get("git") or {} for x in (a, b))
    if ca.get("commit") != cb.get("commit") or ca.get("dirty") != cb.get("dirty"):
        rows.insert(0, ["commit", f"{str(ca.get('commit'))[:12]}{' dirty' if ca.get('dirty') else ''}",
                        f"{str(cb.get('commit'))[:12]}{' dirty' if cb.get('dirty') else ''}"])
    return rows
