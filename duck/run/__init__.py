"""Playing every game of a folder and writing a run folder (`duck play`).

A run folder holds `run.json` (what produced it: duck.run.info), `records/<game_id>.jsonl`
(duck.play.record), `conversations/<game_id>.jsonl.gz` (duck.play.conversation) and
`score.json` (duck.play.scoring); the games are played by duck.run.pool (shared with `duck ab`),
in separate processes when `play.workers > 1`. The rule: bad input is a `RunError` (one line,
before anything is touched), and old records are removed (`overwrite`) only once the new run
has found its games and checked its folder.

`interactive=True` (the `duck` command): the live progress (duck.run.progress) and Ctrl-C
(duck.run.interrupt): the first stops every game at its next action and writes score.json marked
partial, the second kills at once. `resume=True` plays, with the run's own config, only the
games the folder lacks or whose record ended short. What the command says at the end is
duck.run.summary. The folder, the bad inputs, the file-mode fallback and resuming: docs/runs.md.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from duck.config import POLICIES, Config, load_config, with_values
from duck.files import fresh_run, unwritable
from duck.game.source import GameError, offline_game_ids
from duck.play.record import read_record
from duck.play.scoring import record_finished, score_doc, write_score
from duck.run import games as game_runs, provenance
from duck.run.info import ROOT, config_of, duck_command, new_info, now, read_info, write_info
from duck.run.pool import Runner
from duck.run.progress import RunView
from duck.sandbox.fallback import games_for_play

log = logging.getLogger(__name__)


class RunError(ValueError):
    """Bad input to a run, said in one line."""


def _check_policy(cfg: Config) -> Config:
    """A policy that cannot play is an error before anything plays: a user's policy file
    that does not load; `llm` with no model server answering (play.model_fallback: the
    fallback plays instead, and says so). A policy file's path is made absolute (workers,
    `--resume` from elsewhere)."""
    name = cfg.play.policy
    if name not in POLICIES:
        from duck.policies import PolicyError, load_policy_file
        path, _, cls = name.rpartition(":")
        spec = f"{Path(path).resolve()}:{cls}"
        try:
            load_policy_file(spec)
        except PolicyError as e:
            raise RunError(str(e).replace(spec, name)) from None
        return with_values(cfg, {"play.policy": spec})
    return cfg


def _model_status(cfg: Config) -> str | None:
    """None when `--policy llm` has a model server that answers; else why not (one line). A
    hosted provider gets one probe request (duck.llm.provider.check): one that answers but
    cannot serve the agent (its key, a field, tool calls, images) is a RunError."""
    if cfg.play.policy != "llm":
        return None
    from duck.llm.client import list_models  # the model client: only when a model plays
    if cfg.plan.profile == "hosted":
        from duck.llm.probe import ProviderError, check
        try:
            return check(cfg.model)
        except ProviderError as e:
            raise RunError(f"{e}; nothing played") from None
    if not cfg.model.urls:
        return "--policy llm needs a model server: --model-url URL (or model.urls)"
    problems = []
    for url in cfg.model.urls:
        try:
            list_models(url, timeout=5.0)
            return None
        except Exception as e:  # refused, unresolvable, time-out, not an OpenAI server
            problems.append(f"{url} ({type(e).__name__}: {getattr(e, 'reason', None) or e})")
    return f"--policy llm: no model server answers at {'; '.join(problems)}"


def play_folder(games_dir: str | Path | None, out: str | Path, cfg: Config | None = None, *,
                policy: str | None = None, seed: int | None = None, max_actions: int | None = None,
                workers: int | None = None, options: dict[str, Any] | None = None,
                games: list[str] | None = None, overwrite: bool = False, resume: bool = False,
                model_urls: list[str] | None = None, interactive: bool = False,
                command: list[str] | None = None, policy_changed_ok: bool = False) -> dict:
    """Play each game of `games_dir` (or those `games` names: ids or 4-letter prefixes) once
    with the config's `play` section (default: `load_config()`), whose fields the keyword
    arguments replace (`options`: the explorer's); returns (and writes) the score.json document.

    `resume`: the run folder's own games dir, games and config (run.json); only `workers` and
    `model_urls` may differ, and a user policy file must be unchanged (`policy_changed_ok`:
    play on with the changed file; duck.run.provenance). `interactive`: live progress, Ctrl-C
    and signal handling (see the module's docstring). `command`: what run.json records as the
    command (default argv)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} is a file, not a folder")
    values: dict[str, Any] = {f"play.{k}": v for k, v in (("policy", policy), ("seed", seed),
                                                          ("max_actions", max_actions), ("workers", workers))
                              if v is not None}
    values.update({f"explorer.{k}": v for k, v in (options or {}).items()})
    if model_urls:
        values["model.urls"] = list(model_urls)
    if resume:
        info, cfg, games_dir, ids = _resume_plan(out, values, policy_changed_ok)
    else:
        cfg = with_values(cfg or load_config(), values)
        if games_dir is None:
            games_dir = cfg.play.games_dir
        ids = _fresh_plan(Path(games_dir), out, games, overwrite)
        info = None
    games_dir = Path(games_dir)
    cfg = _check_policy(cfg)
    unreachable = _model_status(cfg)
    if unreachable and not cfg.play.model_fallback:
        raise RunError(f"{unreachable}; nothing played (play.model_fallback=true lets "
                       f"{cfg.agent.fallback or 'the fallback'} play instead)")
    if unreachable and cfg.agent.fallback is None:
        raise RunError(f"{unreachable}; play.model_fallback is set but agent.fallback is null")
    if why := unwritable(out, "records"):  # out/records exists and takes a file
        raise RunError(why)
    info, entry, todo = _begin(out, cfg, info, ids, games_dir, command)
    if not todo:
        info["status"] = entry["status"] = "complete"
        entry["ended"] = now()
        write_info(out, info)
        return write_score(out) | {"resumed": []}
    ends, reason = _play(games_dir, out, cfg, todo, interactive=interactive, unreachable=unreachable,
                         before=len(ids) - len(todo))
    doc = _finish(out, info, entry, ends, reason)
    if resume:
        doc["resumed"] = todo
    return doc


def _begin(out: Path, cfg: Config, info: dict | None, ids: list[str], games_dir: Path,
           command: list[str] | None) -> tuple[dict, dict, list[str]]:
    """run.json at the start (a new one, or the resume's entry added) and the games to play.
    A fresh run removes the folder's old records only now: it has its games and a folder it
    can write."""
    todo = ids if info is None else [g for g in ids if not record_complete(out / "records" / f"{g}.jsonl")]
    if info is None:
        fresh_run(out)
        info = new_info(cfg, command=command, out=out, games_dir=games_dir, games=ids)
        try:
            info["policy_files"] = provenance.record(cfg, out, ROOT)
        except OSError as e:
            raise RunError(f"--out {out}: the policy file cannot be copied there: {e.strerror or e}") from None
        info["git"] = provenance.mark_dirty(info["git"], info["policy_files"])
        entry = info
    else:
        for g in todo:  # a record that ended short is played again from its start
            (out / "records" / f"{g}.jsonl").unlink(missing_ok=True)
        entry = {"command": list(command if command is not None else sys.argv), "started": now(), "ended": None,
                 "status": "running", "games": todo}
        changed = info.pop("_changed", [])
        if changed:  # --policy-changed-ok: the rest is played by another version of the file
            entry["policy_files_changed"] = changed
            if info.get("git"):
                info["git"]["dirty"] = True
                info["git"].setdefault("dirty_because", []).append("a policy file changed before a --resume")
        info["resumes"].append(entry)
        info["status"] = "running"
    try:
        write_info(out, info)
    except OSError as e:
        raise RunError(f"--out {out}: run.json cannot be written: {e.strerror or e}") from None
    return info, entry, todo


def _finish(out: Path, info: dict, entry: dict, ends: list[dict], reason: str | None) -> dict:
    """run.json and score.json at the end; the score.json document with the run's ending."""
    status = ("interrupted" if reason else
              "disk_full" if any(e.get("end_reason") == "disk_full" for e in ends) else "complete")
    info["status"] = entry["status"] = status
    info["ended"] = entry["ended"] = now()
    info["stopped_by"] = entry["stopped_by"] = reason  # (score.json shows it: Ctrl-C, the spend guard)
    for e in ends:
        if e.get("kind") == "end":
            log.info("%s: levels %s, actions %s, %s%s", e["game"], e.get("levels"), e.get("actions"),
                     e.get("end_reason"), f" ({e['error']})" if e.get("error") else "")
    try:
        write_info(out, info)
        doc = write_score(out)
    except OSError as e:  # a full disk: the score is still computed from the records kept
        doc = score_doc(out)
        doc["run_status"] = status
        doc["not_written"] = f"score.json could not be written: {e.strerror or e}"
    doc["stopped_by"] = reason
    doc["fallback"] = sorted({e["game"] for e in ends if e.get("fallback")})
    doc["played"] = sum(e.get("kind") == "end" for e in ends)
    doc["errors"] = [{"game": e["game"], "error": e.get("error"), "traceback": e.get("traceback")}
                     for e in ends if e.get("kind") == "end" and e.get("end_reason") == "error"]
    return doc


def _fresh_plan(games_dir: Path, out: Path, games: list[str] | None, overwrite: bool) -> list[str]:
    old = sorted((out / "records").glob("*.jsonl"))
    if old and not overwrite:
        raise RunError(f"{out} already holds records; choose another --out, pass --overwrite to replace them, "
                       "or --resume to finish the run")
    if not games_dir.is_dir():
        raise RunError(f"--games {games_dir}: no such folder")
    try:
        return offline_game_ids(games_dir, games)
    except GameError as e:
        raise RunError(str(e)) from None


def _resume_plan(out: Path, values: dict[str, Any], policy_changed_ok: bool) -> tuple[dict, Config, str, list[str]]:
    if not out.is_dir():
        raise RunError(f"--resume: no run folder at {out}")
    try:
        info = read_info(out)
        cfg = config_of(info) if info is not None else None
    except ValueError as e:
        raise RunError(f"--resume: {e}") from None
    if info is None or cfg is None:
        raise RunError(f"--resume: {out} has no run.json (only a folder duck play wrote can be resumed)")
    extra = {k: v for k, v in values.items() if k not in ("play.workers", "model.urls")}
    if extra:
        raise RunError(f"--resume plays with the run's own config (run.json); not with {', '.join(extra)}")
    cfg = with_values(cfg, values)
    games_dir = info.get("games_dir") or ""
    if not Path(games_dir).is_dir():
        raise RunError(f"--resume: the run's games folder {games_dir} is gone")
    info.setdefault("resumes", [])
    try:
        changed = provenance.check_unchanged(info, out, policy_changed_ok)
    except ValueError as e:
        raise RunError(str(e)) from None
    info["_changed"] = changed
    return info, cfg, games_dir, [str(g) for g in info["games"]]


def record_complete(path: Path) -> bool:
    """A record that ended where its game ended (not cut by Ctrl-C, a full disk or a kill;
    also `duck ab`'s test of a finished run)."""
    try:
        return record_finished(read_record(path))
    except (OSError, ValueError):
        return False


def _play(games_dir: Path, out: Path, cfg: Config, ids: list[str], *, interactive: bool,
          unreachable: str | None, before: int = 0) -> tuple[list[dict], str | None]:
    """Play `ids` (`before`: the run's games a resume leaves as they are); returns their end
    messages and what stopped the run (None: nothing)."""
    workers = min(cfg.play.workers, len(ids))
    view = None
    if interactive:
        resumed = f" (a resume: {before} of the run's {before + len(ids)} finished before)" if before else ""
        title = (f"{len(ids)} game{'' if len(ids) == 1 else 's'}{resumed} · policy {cfg.play.policy} · "
                 f"{cfg.play.workers} worker(s) · {cfg.play.max_actions} actions each → {out}")
        view = RunView(ids, title=title)
        if unreachable:
            view.notice(f"{unreachable}: {cfg.agent.fallback} plays every game (play.model_fallback)")

    def kill_line() -> str:
        return (f"duck play: killed at once (second Ctrl-C); records keep every line written; "
                f"finish with: {duck_command()} play --resume --out {out}")
    with ExitStack() as stack:
        health_flag = None
        if cfg.play.policy == "llm" and cfg.agent.fallback is not None:
            # The run's model-down flag: set from the start when no server answered (the
            # fallback was asked for), or by the first game whose server stopped answering.
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="duck-health-"))
            health_flag = str(Path(tmp) / "model_down")
            if unreachable:
                Path(health_flag).write_text(unreachable)
        play_dir = stack.enter_context(games_for_play(games_dir, out / "records", cfg.kernel.layers_off))
        runner = stack.enter_context(Runner(view, workers=workers, interactive=interactive, kill_line=kill_line))
        guard = _guard(out, cfg, runner.stop)
        if guard is not None:  # (games played here install theirs: none is left behind for the next run)
            stack.callback(_uninstall_guard)
            if view is not None:
                stack.callback(lambda: guard.reason() and view.notice(f"{guard.reason()}: stopping: every game "
                                                                        "ends at its next action"))
        ends = runner.run(game_runs.play_one, [(g, (str(play_dir), g, cfg, str(out), health_flag)) for g in ids])
        if any(e.get("end_reason") == "disk_full" for e in ends) and view is not None:
            view.notice("the disk is full: the run stopped; records keep every line written")
        reason = runner.reason or (guard and guard.reason())
    return ends, reason


def _guard(out: Path, cfg: Config, stop: Any) -> Any:
    """A model run's spend guard (duck.llm.guard): a fresh ledger for this command, which each
    game's process opens (duck.run.games.play_one); None when no model plays."""
    if cfg.play.policy != "llm":
        return None
    from duck.llm.guard import LEDGER, Guard
    Guard.begin(out / LEDGER)
    return Guard(out / LEDGER, stop=stop)


def _uninstall_guard() -> None:
    from duck.llm.guard import install
    install(None)

