"""Playing every game of a folder and writing a run folder (`duck play`).

A run folder holds `run.json` (what produced it: duck.run.info), `records/<game_id>.jsonl`
(one per game, see duck.play.record), `conversations/<game_id>.jsonl.gz` (one per game a
model played, see duck.play.conversation; `play.conversations` false: none) and `score.json`
(see duck.play.scoring). The engine is pure Python under the GIL, so games run in separate
processes when `play.workers > 1`; each worker opens its own `GameSource` (duck.run.games).

Bad input is a `RunError` (one line, before anything is touched): an `--out` that is a file
or cannot be created or written, no games folder, an `--only` naming no game, a policy file
that cannot be used, `--policy llm` with no model server answering (unless
`play.model_fallback`), a `--resume` of a folder without run.json. Old records are removed
(`overwrite`) only once the new run has found its games and checked its folder.
Where the sandbox's only file-system wall is file modes (no Landlock, no mount namespace:
duck.sandbox.fallback), the games are played from a root-only copy, the records and
conversations folders are closed to other users and the games' path is kept out of the
command line, so the kernel's own uid can read none of them.

`interactive=True` (the `duck` command): the live progress (duck.run.progress) and Ctrl-C
(duck.run.interrupt): the first stops every game at its next action and the run writes
score.json marked partial (`run_status` "interrupted"); the second kills it at once. A full
disk stops the run the same way (`run_status` "disk_full"). `resume=True` plays, with the
run's own config from run.json, only the games the folder lacks or whose record ended short
(duck.play.scoring.record_finished); the finished records are not touched.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue as queue_mod
import sys
import tempfile
import threading
from concurrent.futures import CancelledError, ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from duck.config import POLICIES, Config, load_config, with_values
from duck.game.source import GameError, GameSource
from duck.play.record import read_record
from duck.play.scoring import record_finished, score_doc, write_score
from duck.run import games as game_runs
from duck.run.info import config_of, new_info, now, read_info, write_info
from duck.run.interrupt import Interrupts
from duck.run.progress import RunView
from duck.sandbox.fallback import games_for_play

log = logging.getLogger(__name__)


class RunError(ValueError):
    """Bad input to a run, said in one line."""


def _writable_out(out: Path) -> None:
    """`out/records` exists and takes a file, or RunError."""
    if out.exists() and not out.is_dir():
        raise RunError(f"--out {out} is a file, not a folder")
    try:
        (out / "records").mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out / "records", prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise RunError(f"--out {out} cannot be written: {e.strerror or e}") from None


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
    """None when `--policy llm` has a model server that answers; else why not (one line)."""
    if cfg.play.policy != "llm":
        return None
    from duck.llm.client import list_models  # the model client: only when a model plays
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
                command: list[str] | None = None) -> dict:
    """Play each game of `games_dir` (or those `games` names: ids or 4-letter prefixes) once
    with the config's `play` section (default: `load_config()`), whose fields the keyword
    arguments replace (`options`: the explorer's); returns (and writes) the score.json document.

    `resume`: the run folder's own games dir, games and config (run.json); only `workers` and
    `model_urls` may differ. `interactive`: live progress, Ctrl-C and signal handling (see
    the module's docstring). `command`: what run.json records as the command (default argv)."""
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
        info, cfg, games_dir, ids = _resume_plan(out, values)
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
    _writable_out(out)
    todo = ids if info is None else [g for g in ids if not _finished(out, g)]
    if info is None:
        for f in (out / "records").glob("*.jsonl"):  # only now: the new run has its games and a folder it can write
            f.unlink()
        for f in (out / "conversations").glob("*.jsonl*"):  # (play_game replaces those it plays)
            f.unlink()
        info = new_info(cfg, command=command, out=out, games_dir=games_dir, games=ids)
        entry = info
    else:
        for g in todo:  # a record that ended short is played again from its start
            (out / "records" / f"{g}.jsonl").unlink(missing_ok=True)
        entry = {"command": list(command if command is not None else sys.argv), "started": now(), "ended": None,
                 "status": "running", "games": todo}
        info["resumes"].append(entry)
        info["status"] = "running"
    try:
        write_info(out, info)
    except OSError as e:
        raise RunError(f"--out {out}: run.json cannot be written: {e.strerror or e}") from None
    if not todo:
        info["status"] = entry["status"] = "complete"
        entry["ended"] = now()
        write_info(out, info)
        return write_score(out) | {"resumed": []}

    ends, reason = _play(games_dir, out, cfg, todo, interactive=interactive, unreachable=unreachable)
    status = ("interrupted" if reason else
              "disk_full" if any(e.get("end_reason") == "disk_full" for e in ends) else "complete")
    info["status"] = entry["status"] = status
    info["ended"] = entry["ended"] = now()
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
    if resume:
        doc["resumed"] = todo
    doc["fallback"] = sorted({e["game"] for e in ends if e.get("fallback")})
    return doc


def _fresh_plan(games_dir: Path, out: Path, games: list[str] | None, overwrite: bool) -> list[str]:
    old = sorted((out / "records").glob("*.jsonl"))
    if old and not overwrite:
        raise RunError(f"{out} already holds records; choose another --out, pass --overwrite to replace them, "
                       "or --resume to finish the run")
    if not games_dir.is_dir():
        raise RunError(f"--games {games_dir}: no such folder")
    try:
        ids = GameSource.offline(games_dir).game_ids(games)
    except GameError as e:
        raise RunError(str(e)) from None
    if not ids:
        raise RunError(f"no games found under {games_dir}")
    return ids


def _resume_plan(out: Path, values: dict[str, Any]) -> tuple[dict, Config, str, list[str]]:
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
    return info, cfg, games_dir, [str(g) for g in info["games"]]


def _finished(out: Path, game_id: str) -> bool:
    try:
        return record_finished(read_record(out / "records" / f"{game_id}.jsonl"))
    except (OSError, ValueError):
        return False


def _play(games_dir: Path, out: Path, cfg: Config, ids: list[str], *, interactive: bool,
          unreachable: str | None) -> tuple[list[dict], str | None]:
    """Play `ids`; returns their end messages and what stopped the run (None: nothing)."""
    parallel = cfg.play.workers > 1 and len(ids) > 1
    stop: Any = multiprocessing.Event() if parallel else threading.Event()
    with ExitStack() as stack:
        health_flag = None
        if cfg.play.policy == "llm" and cfg.agent.fallback is not None:
            # The run's model-down flag: set from the start when no server answered (the
            # fallback was asked for), or by the first game whose server stopped answering.
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="duck-health-"))
            health_flag = str(Path(tmp) / "model_down")
            if unreachable:
                Path(health_flag).write_text(unreachable)
        view = None
        if interactive:
            title = (f"{len(ids)} games · policy {cfg.play.policy} · {cfg.play.workers} worker(s) · "
                     f"{cfg.play.max_actions} actions each → {out}")
            view = RunView(ids, title=title)
        play_dir = stack.enter_context(games_for_play(games_dir, out / "records", cfg.kernel.layers_off))
        pool = None
        pool_queue: Any = None
        if parallel:
            pool_queue = multiprocessing.Queue()
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=min(cfg.play.workers, len(ids)),
                                                           initializer=game_runs.init_worker,
                                                           initargs=(stop, pool_queue)))
        interrupts = None
        if interactive:
            def on_stop(why: str) -> None:
                view.notice(f"{why}: stopping: every game ends at its next action, queued games do not start "
                            "(Ctrl-C again kills at once)")

            def kill() -> None:
                for p in list(getattr(pool, "_processes", {}).values()) if pool else []:
                    p.kill()

            def on_kill() -> None:
                view.kill_line(f"duck play: killed at once (second Ctrl-C); records keep every line written; "
                               f"finish with: duck play --resume --out {out}")
            interrupts = stack.enter_context(Interrupts(stop, on_stop=on_stop, kill=kill, on_kill=on_kill))
        if view is not None:
            if unreachable:
                view.notice(f"{unreachable}: {cfg.agent.fallback} plays every game (play.model_fallback)")
            stack.callback(view.close)
        if pool is not None:
            ends = _play_pool(pool, pool_queue, stop, view, play_dir, out, cfg, ids, health_flag)
        else:
            if view is not None:
                view.start()
            game_runs.use_here(stop, view.handle if view else None)
            ends = []
            for g in ids:
                ends.append(_guarded(g, game_runs.play_one, str(play_dir), g, cfg, str(out), health_flag))
                if view is not None:
                    view.handle(ends[-1])
            game_runs.use_here(None, None)
        if any(e.get("end_reason") == "disk_full" for e in ends) and view is not None:
            view.notice("the disk is full: the run stopped; records keep every line written")
        reason = interrupts.reason if interrupts is not None else None
    return ends, reason


def _guarded(game_id: str, fn: Any, *args: Any) -> dict:
    """One game's end message, whatever happened to it (a crash is that game's error)."""
    try:
        return fn(*args)
    except OSError as e:
        return {"kind": "end", "game": game_id, "end_reason": "disk_full" if game_runs.is_disk_full(e) else "error",
                "error": f"{type(e).__name__}: {e}", "levels": 0, "actions": 0, "score": 0.0}
    except Exception as e:
        return {"kind": "end", "game": game_id, "end_reason": "error", "error": f"{type(e).__name__}: {e}",
                "levels": 0, "actions": 0, "score": 0.0}


def _play_pool(pool: ProcessPoolExecutor, q: Any, stop: Any, view: RunView | None, play_dir: Path, out: Path,
               cfg: Config, ids: list[str], health_flag: str | None) -> list[dict]:
    futures = {pool.submit(game_runs.play_one, str(play_dir), g, cfg, str(out), health_flag): g for g in ids}
    if view is not None:
        view.start()  # after the workers forked: no display thread is copied into them
    ends: dict[str, dict] = {}
    pending, cancelled = set(futures), False

    def drain(timeout: float) -> None:
        try:
            msg = q.get(timeout=timeout)
            while True:
                if view is not None:
                    view.handle(msg)
                elif isinstance(msg, logging.LogRecord):
                    logging.getLogger(msg.name).handle(msg)
                msg = q.get_nowait()
        except queue_mod.Empty:
            pass

    while pending:
        drain(0.1)
        if stop.is_set() and not cancelled:
            cancelled = True
            for f in pending:
                f.cancel()  # the queued games never start (those already handed over return "skipped")
        for f in [f for f in pending if f.done()]:
            pending.discard(f)
            g = futures[f]
            try:
                ends[g] = f.result()
            except CancelledError:
                ends[g] = {"kind": "skipped", "game": g}
            except Exception as e:  # a worker that died (killed, out of memory): that game's error
                ends[g] = {"kind": "end", "game": g, "end_reason": "error", "error": f"{type(e).__name__}: {e}",
                           "levels": 0, "actions": 0, "score": 0.0}
            if view is not None:
                view.handle(ends[g])
    drain(0.0)
    return [ends[g] for g in ids]
