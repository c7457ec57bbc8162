"""Paired A/B experiments: `duck ab`, `duck ab-stats`, `duck ab-merge`.

`duck ab --a A.toml --b B.toml --games DIR --passes N --out OUT` plays every game of DIR
N times with each config. Pass p uses seed p in both arms; the two runs of one (game, pass)
are queued next to each other (who goes first alternates), so with W workers they run at
the same time, starting on the same model endpoint (`model.urls[k % len]`, k the unit's
index; the LLM policy fails over to the others), under the same load. The results are paired per game and pass and compared with duck.stats
(B − A; bootstrap interval over games; paired sign-flip p-value; per-game wins/losses).
With `--max-passes M > N`, games whose difference is still within noise get one more pass
per round, up to M, while `--budget-s` lasts.

Folder layout (each `OUT/<arm>/pNNN` is an ordinary run folder: `duck report` works on it):

    OUT/plan.json                      the two configs, games, passes, shard
    OUT/a/p000/records/<game>.jsonl    arm A, pass 0 (seed 0); OUT/b/... the same for B
    OUT/ab.json                        {"delta", "ci95", "p_value", "passes", "games": {...}, ...}
    OUT/report.html                    summary, config difference, forest plot, per-game table

A finished (game, pass, arm) is never replayed: rerunning the same command resumes, and a
rerun with a larger `--max-passes` adds adaptive passes. `--shard i/n` (1-based) plays the
units k with k % n == i-1 of the fixed passes, for one machine of n; `duck ab-merge --out
OUT SHARD_DIR...` gathers the shards (then `duck ab` on OUT may add adaptive passes).

`duck ab-stats A B` computes the same JSON from existing results: run folders (any folder
with records/ below it; runs are paired by their header's pass, or by seed when passes
repeat) or files in the format of duck-traces/runs.jsonl (`game_id`, `pass`,
`final_score`), with optional pass filters and pairing by order for A/A splits. With one
argument it recomputes an OUT folder of `duck ab`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import shutil
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from duck.config import Config, load_config
from duck.stats import compare, scores_from_runs_jsonl

log = logging.getLogger(__name__)

ARMS = ("a", "b")
_POLICY_CLASSES = {"random": ("duck.policies", "RandomPolicy"), "explorer": ("duck.explorer", "Explorer"),
                   "llm": ("duck.agent", "AgentPolicy")}


# ---------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------

def load_arm(files: list[str], overrides: list[str] | None = None) -> Config:
    """An arm's config: files in order (e.g. the baseline, then one variant), then overrides."""
    return load_config(list(files), list(overrides or []))


def config_diff(a: Config, b: Config) -> list[dict[str, Any]]:
    """The fields where two configs differ (dotted names)."""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    out = []
    for section in da:
        for k in sorted(set(da[section]) | set(db.get(section, {}))):
            va, vb = da[section].get(k), db.get(section, {}).get(k)
            if va != vb:
                out.append({"field": f"{section}.{k}", "a": va, "b": vb})
    return out


def _ctor_params(policy: str) -> set[str]:
    mod, cls = _POLICY_CLASSES.get(policy, (None, None))
    if mod is None:
        return set()
    try:
        import importlib
        ctor = getattr(importlib.import_module(mod), cls)
        return {n for n, p in inspect.signature(ctor).parameters.items()
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    except Exception:  # a policy module still being written: give it nothing extra
        return set()


def policy_options(cfg: Config, *, unit_index: int = 0, pass_: int = 0) -> dict[str, Any]:
    """Options for `make_policy`, given only to a policy whose constructor names them: the
    config (`config`, a Config), the model endpoints (`model_url`, the arm's `model.urls`),
    which endpoint this unit starts on (`url_index`: the same for both arms of a pair, round
    robin over units) and the pass (`pass_`)."""
    params = _ctor_params(cfg.play.policy)
    offered = {"config": cfg, "model_url": list(cfg.model.urls) or None, "url_index": unit_index,
               "pass_": pass_}
    return {k: v for k, v in offered.items() if k in params and v is not None}


# ---------------------------------------------------------------------------------------
# Playing units
# ---------------------------------------------------------------------------------------

def record_path(out: Path, arm: str, pass_: int, game_id: str) -> Path:
    return out / arm / f"p{pass_:03d}" / "records" / f"{game_id}.jsonl"


def _complete(path: Path) -> bool:
    if not path.exists():
        return False
    from duck.record import read_record
    try:
        return read_record(path).end is not None
    except (ValueError, OSError):
        return False


def _run_arm(task: dict[str, Any]) -> dict[str, Any]:
    """One arm of one (game, pass): a fresh policy, a fresh game, a fresh record."""
    from duck.games import GameSource
    from duck.play import play_game
    from duck.policies import make_policy
    cfg = Config.model_validate(task["config"])
    path = Path(task["record"])
    if path.exists():
        path.unlink()  # an unfinished record of an interrupted run: play the unit again
    opts = policy_options(cfg, unit_index=task["unit_index"], pass_=task["pass"])
    deadline = time.monotonic() + task["game_seconds"] if task.get("game_seconds") else None
    t0 = time.monotonic()
    res = play_game(GameSource.offline(task["games_dir"]), task["game_id"],
                    make_policy(cfg.play.policy, task["seed"], **opts),
                    max_actions=cfg.play.max_actions, record_path=path, seed=task["seed"],
                    deadline=deadline, pass_=task["pass"],
                    config={"arm": task["arm"], "url": task["url"], **cfg.model_dump(mode="json")})
    return {"arm": task["arm"], "game_id": res.game_id, "pass": task["pass"], "score": res.score,
            "levels": res.levels, "actions": res.actions, "end": res.end_reason,
            "seconds": round(time.monotonic() - t0, 2), "error": res.error}


def _first_arm(game_id: str, pass_: int) -> tuple[str, str]:
    """Alternate which arm is queued first, stably across shards and resumes."""
    return ARMS if zlib.crc32(f"{game_id}:{pass_}".encode()) % 2 == 0 else ARMS[::-1]


def unit_index(games: list[str], game_id: str, pass_: int) -> int:
    """A unit's place in the round robin over model endpoints (stable across shards)."""
    return pass_ * len(games) + games.index(game_id)


def run_units(units: list[tuple[str, int]], *, out: Path, games_dir: Path, configs: dict[str, Config],
              games: list[str], workers: int = 1, game_seconds: float | None = None) -> list[dict]:
    """Play both arms of each (game, pass) unit, A and B next to each other in the queue."""
    tasks = []
    for game_id, p in units:
        k = unit_index(games, game_id, p)
        for arm in _first_arm(game_id, p):
            path = record_path(out, arm, p, game_id)
            if _complete(path):
                continue
            urls = configs[arm].model.urls
            tasks.append({"arm": arm, "game_id": game_id, "pass": p, "seed": p, "record": str(path),
                          "games_dir": str(games_dir), "config": configs[arm].model_dump(mode="json"),
                          "unit_index": k, "url": urls[k % len(urls)] if urls else None,
                          "game_seconds": game_seconds})
    results = []
    if not tasks:
        return results
    if workers <= 1:
        results = [_run_arm(t) for t in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_run_arm, tasks))
    for r in results:
        log.info("%s p%d %s: score %.3f, levels %d, actions %d, %s%s", r["game_id"], r["pass"], r["arm"],
                 r["score"], r["levels"], r["actions"], r["end"], f" ({r['error']})" if r["error"] else "")
    return results


def select_games(games_dir: Path, only: list[str] | None) -> list[str]:
    from duck.games import GameSource
    ids = [g.game_id for g in GameSource.offline(games_dir).games()]
    if only:
        wanted = set(only)
        ids = [g for g in ids if g in wanted or g.split("-")[0] in wanted]
    if not ids:
        raise SystemExit(f"no games found under {games_dir}" + (f" matching {only}" if only else ""))
    return sorted(ids)


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {text!r}: expected i/n, e.g. 1/4") from None
    if not (n >= 1 and 1 <= i <= n):
        raise SystemExit(f"--shard {text!r}: i must be 1..n (1-based)")
    return i, n


# ---------------------------------------------------------------------------------------
# Scores from folders and files
# ---------------------------------------------------------------------------------------

def _record_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.jsonl") if p.parent.name == "records")


def scores_from_records(paths: list[Path]) -> tuple[dict[str, dict[Any, float]], dict[str, int]]:
    """game -> pass -> score from records; pairs by header pass, or by seed if passes repeat."""
    from duck.record import read_record
    from duck.scoring import score_record
    rows, incomplete = [], 0
    for p in paths:
        try:
            rec = read_record(p)
        except ValueError:
            continue
        if rec.end is None:
            incomplete += 1  # a run cut mid-game: its score is only a lower bound
            continue
        rows.append((rec.game_id, rec.header.get("pass", 0), rec.header.get("seed"), score_record(rec).score))
    by = "pass"
    if len({(g, p) for g, p, _, _ in rows}) < len(rows):
        by = "seed"
        if len({(g, s) for g, _, s, _ in rows}) < len(rows):
            raise SystemExit("records repeat the same game with the same pass and seed: "
                             "give one run per (game, pass) on each side")
    out: dict[str, dict[Any, float]] = {}
    for g, p, s, score in rows:
        out.setdefault(g, {})[p if by == "pass" else s] = score
    return out, {"runs": len(rows), "incomplete": incomplete, "paired_by": by}


def load_scores(path: str | Path) -> tuple[dict[str, dict[Any, float]], dict[str, Any]]:
    """Scores of one arm from a run folder, a record file, or a runs.jsonl-format file."""
    path = Path(path)
    if path.is_dir():
        files = _record_files(path)
        if not files:
            raise SystemExit(f"{path}: no records/*.jsonl below it")
        scores, info = scores_from_records(files)
        return scores, {"source": str(path), **info}
    if not path.is_file():
        raise SystemExit(f"{path}: no such file or folder")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if lines and lines[0].get("type") == "header":
        scores, info = scores_from_records([path])
        return scores, {"source": str(path), **info}
    return scores_from_runs_jsonl(lines), {"source": str(path), "runs": len(lines), "paired_by": "pass"}


def parse_passes(spec: str | None) -> set[int] | None:
    """`0-4`, `5,7,9`, `0-2,8` → a set of passes."""
    if not spec:
        return None
    out: set[int] = set()
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.update(range(int(lo), int(hi) + 1))
        elif part.strip():
            out.add(int(part))
    return out


def filter_passes(scores: dict[str, dict[Any, float]], keep: set[int] | None) -> dict[str, dict[Any, float]]:
    if keep is None:
        return scores
    return {g: {k: v for k, v in d.items() if k in keep} for g, d in scores.items()}


def pair_by_order(scores: dict[str, dict[Any, float]]) -> dict[str, dict[int, float]]:
    """Re-key each game's runs 0, 1, 2, ... in pass order (to pair two disjoint pass sets)."""
    return {g: {i: d[k] for i, k in enumerate(sorted(d))} for g, d in scores.items()}


def arm_scores(out: Path, arm: str) -> dict[str, dict[Any, float]]:
    folder = out / arm
    if not folder.is_dir():
        return {}
    scores, _ = scores_from_records(_record_files(folder))
    return scores


# ---------------------------------------------------------------------------------------
# The experiment
# ---------------------------------------------------------------------------------------

def ab_document(out: Path, plan: dict[str, Any], *, n_boot: int = 10000, n_perm: int = 20000,
                seed: int = 0) -> dict[str, Any]:
    a, b = arm_scores(out, "a"), arm_scores(out, "b")
    doc = compare(a, b, n_boot=n_boot, n_perm=n_perm, seed=seed)
    doc["a_label"] = plan["a"].get("label")
    doc["b_label"] = plan["b"].get("label")
    doc["config_diff"] = config_diff(Config.model_validate(plan["a"]["config"]),
                                     Config.model_validate(plan["b"]["config"]))
    doc["games_dir"] = plan.get("games_dir")
    doc["planned_passes"] = plan.get("passes")
    doc["max_passes"] = plan.get("max_passes")
    return doc


def write_outputs(out: Path, doc: dict[str, Any]) -> None:
    (out / "ab.json").write_text(json.dumps(doc, indent=1))
    from duck.report_ab import ab_html
    (out / "report.html").write_text(ab_html(doc, title=out.name), encoding="utf-8")


def _plan(args: argparse.Namespace, configs: dict[str, Config], games: list[str]) -> dict[str, Any]:
    def arm(files: list[str], sets: list[str] | None, cfg: Config) -> dict[str, Any]:
        label = " + ".join(Path(f).stem for f in files) + (f" [{', '.join(sets)}]" if sets else "")
        return {"files": files, "overrides": sets or [], "label": label, "config": cfg.model_dump(mode="json")}
    return {"a": arm(args.a, args.set_a, configs["a"]), "b": arm(args.b, args.set_b, configs["b"]),
            "games_dir": str(args.games), "games": games, "passes": args.passes,
            "max_passes": max(args.passes, args.max_passes or args.passes), "shard": args.shard}


def _check_plan(out: Path, plan: dict[str, Any]) -> None:
    path = out / "plan.json"
    if path.exists():
        old = json.loads(path.read_text())
        for arm in ARMS:
            if old[arm]["config"] != plan[arm]["config"]:
                diff = config_diff(Config.model_validate(old[arm]["config"]),
                                   Config.model_validate(plan[arm]["config"]))
                raise SystemExit(f"{out} holds another experiment (arm {arm} differs: {diff}); "
                                 f"use a new --out")
    path.write_text(json.dumps(plan, indent=1))


def run_ab(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = {"a": load_arm(args.a, args.set_a), "b": load_arm(args.b, args.set_b)}
    games_dir = Path(args.games)
    games = select_games(games_dir, args.only)
    plan = _plan(args, configs, games)
    _check_plan(out, plan)
    workers = args.workers or configs["a"].play.workers
    units = [(g, p) for p in range(args.passes) for g in games]
    shard = parse_shard(args.shard)
    if shard:
        i, n = shard
        units = [u for k, u in enumerate(units) if k % n == i - 1]
    run_units(units, out=out, games_dir=games_dir, configs=configs, games=games, workers=workers,
              game_seconds=args.game_seconds)
    rounds = 0
    if not shard and plan["max_passes"] > args.passes:
        while args.budget_s is None or time.monotonic() - t0 < args.budget_s:
            doc = compare(arm_scores(out, "a"), arm_scores(out, "b"), n_boot=200, n_perm=200)
            extra = []
            for g in games:
                s = doc["games"].get(g)
                if s and s["within_noise"] and s["passes"] < plan["max_passes"]:
                    extra.append((g, max(s["keys"]) + 1))
            if not extra:
                break
            rounds += 1
            log.info("adaptive round %d: one more pass of %s", rounds, ", ".join(g for g, _ in extra))
            run_units(extra, out=out, games_dir=games_dir, configs=configs, games=games, workers=workers,
                      game_seconds=args.game_seconds)
    doc = ab_document(out, plan, n_boot=args.boot, n_perm=args.perm, seed=args.stats_seed)
    doc["adaptive_rounds"] = rounds
    doc["shard"] = args.shard
    doc["seconds"] = round(time.monotonic() - t0, 1)
    write_outputs(out, doc)
    return doc


def merge(out: Path, shards: list[Path], *, n_boot: int = 10000, n_perm: int = 20000,
          seed: int = 0) -> dict[str, Any]:
    """Gather the records of shard folders of one experiment into `out` and score them."""
    plans = []
    for s in shards:
        p = s / "plan.json"
        if not p.exists():
            raise SystemExit(f"{s}: no plan.json (not a `duck ab` folder)")
        plans.append(json.loads(p.read_text()))
    base = plans[0]
    for s, p in zip(shards[1:], plans[1:]):
        for arm in ARMS:
            if p[arm]["config"] != base[arm]["config"]:
                raise SystemExit(f"{s}: arm {arm} has another config than {shards[0]}")
    out.mkdir(parents=True, exist_ok=True)
    copied = 0
    for s in shards:
        for f in _record_files(s):
            rel = f.relative_to(s)
            if rel.parts[0] not in ARMS:
                continue
            dst = out / rel
            if _complete(dst) or not _complete(f):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
            copied += 1
    plan = dict(base) | {"shard": None, "games": sorted({g for p in plans for g in p["games"]}),
                         "passes": max(p["passes"] for p in plans),
                         "max_passes": max(p.get("max_passes", p["passes"]) for p in plans),
                         "merged_from": [str(s) for s in shards]}
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    doc = ab_document(out, plan, n_boot=n_boot, n_perm=n_perm, seed=seed)
    doc["merged_from"] = plan["merged_from"]
    doc["records_copied"] = copied
    write_outputs(out, doc)
    return doc


def stats_from_paths(a: str, b: str | None, *, a_passes: str | None = None, b_passes: str | None = None,
                     pair_by: str = "key", n_boot: int = 10000, n_perm: int = 20000,
                     seed: int = 0) -> dict[str, Any]:
    if b is None:
        out = Path(a)
        plan_path = out / "plan.json"
        if not plan_path.exists():
            raise SystemExit(f"{a}: one argument must be a `duck ab` folder (plan.json); else give A and B")
        return ab_document(out, json.loads(plan_path.read_text()), n_boot=n_boot, n_perm=n_perm, seed=seed)
    sa, ia = load_scores(a)
    sb, ib = load_scores(b)
    sa, sb = filter_passes(sa, parse_passes(a_passes)), filter_passes(sb, parse_passes(b_passes))
    if pair_by == "order":
        sa, sb = pair_by_order(sa), pair_by_order(sb)
    doc = compare(sa, sb, n_boot=n_boot, n_perm=n_perm, seed=seed)
    doc["a_label"] = a + (f" passes {a_passes}" if a_passes else "")
    doc["b_label"] = b + (f" passes {b_passes}" if b_passes else "")
    doc["sources"] = {"a": ia, "b": ib, "pair_by": pair_by}
    return doc


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------

def _brief(doc: dict[str, Any]) -> dict[str, Any]:
    keys = ("delta", "ci95", "p_value", "passes", "a_mean", "b_mean", "n_games", "n_pairs", "wins",
            "losses", "ties", "significant", "adaptive_rounds", "seconds")
    return {k: doc[k] for k in keys if k in doc} | {
        "games": {g: {"delta": round(s["delta"], 4), "a": [round(x, 3) for x in s["a"]],
                      "b": [round(x, 3) for x in s["b"]]} for g, s in doc.get("games", {}).items()}}


def _cmd_ab(args: argparse.Namespace) -> int:
    doc = run_ab(args)
    print(json.dumps(_brief(doc) | {"ab_json": str(Path(args.out) / "ab.json"),
                                    "report": str(Path(args.out) / "report.html")}, indent=1))
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    doc = stats_from_paths(args.A, args.B, a_passes=args.a_passes, b_passes=args.b_passes,
                           pair_by=args.pair_by, n_boot=args.boot, n_perm=args.perm, seed=args.stats_seed)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_outputs(out, doc)
    print(json.dumps(doc, indent=1))
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    doc = merge(Path(args.out), [Path(s) for s in args.shards], n_boot=args.boot, n_perm=args.perm,
                seed=args.stats_seed)
    print(json.dumps(_brief(doc) | {"ab_json": str(Path(args.out) / "ab.json")}, indent=1))
    return 0


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boot", type=int, default=10000, help="bootstrap resamples")
    p.add_argument("--perm", type=int, default=20000, help="sign flips when not enumerated exactly")
    p.add_argument("--stats-seed", type=int, default=0)


def register(sub: Any) -> None:
    from duck.run import BUNDLED_GAMES
    p = sub.add_parser("ab", help="paired A/B experiment of two configs on the same games and seeds")
    p.add_argument("--a", nargs="+", required=True, metavar="TOML",
                   help="config files of arm A (the baseline), applied in order")
    p.add_argument("--b", nargs="+", required=True, metavar="TOML",
                   help="config files of arm B (the variant), e.g. the baseline then one change")
    p.add_argument("--set-a", action="append", default=None, metavar="KEY=VALUE", help="override for A")
    p.add_argument("--set-b", action="append", default=None, metavar="KEY=VALUE", help="override for B")
    p.add_argument("--games", default=str(BUNDLED_GAMES), help="environments folder")
    p.add_argument("--passes", type=int, default=3, help="passes per game (pass p uses seed p)")
    p.add_argument("--max-passes", type=int, default=None,
                   help="adaptive: more passes for games within noise, up to this many")
    p.add_argument("--budget-s", type=float, default=None, help="no new adaptive round after this long")
    p.add_argument("--game-seconds", type=float, default=None, help="wall-clock limit per game run")
    p.add_argument("--out", required=True, help="experiment folder")
    p.add_argument("--only", nargs="*", default=None, help="game ids or 4-letter prefixes")
    p.add_argument("--shard", default=None, help="i/n: play only this machine's share (1-based)")
    p.add_argument("--workers", type=int, default=None, help="parallel game processes (default play.workers)")
    _stats_args(p)
    p.set_defaults(func=_cmd_ab)

    s = sub.add_parser("ab-stats", help="A/B statistics from run folders or runs.jsonl-format files")
    s.add_argument("A", help="arm A: run folder, record, runs.jsonl file; or alone: a `duck ab` folder")
    s.add_argument("B", nargs="?", default=None, help="arm B")
    s.add_argument("--a-passes", default=None, help="keep only these passes of A, e.g. 0-4")
    s.add_argument("--b-passes", default=None, help="keep only these passes of B, e.g. 5-9")
    s.add_argument("--pair-by", choices=["key", "order"], default="key",
                   help="pair runs by pass (or seed) [key], or by rank within each game [order]")
    s.add_argument("--out", default=None, help="also write ab.json and report.html here")
    _stats_args(s)
    s.set_defaults(func=_cmd_stats)

    m = sub.add_parser("ab-merge", help="gather `duck ab --shard` folders into one and score it")
    m.add_argument("shards", nargs="+", help="shard folders of one experiment")
    m.add_argument("--out", required=True)
    _stats_args(m)
    m.set_defaults(func=_cmd_merge)
