"""`duck bench facts`: every fact the model is told about the boards, checked against
the boards (DESIGN §6: a checker in the repo proves it over the public games).

Plays the games first (`--policy`, `--max-actions`; records under `--out`) or reads a run's
records (`--records RUN`), then for every action the kernel's `last_action_result['animation']`
(duck.game.animation.summarize_animation, on the frames as the worker holds them) and for
every call (a model record's turns; one action per call otherwise) the turn's "Net change" and
"Animation" lines (duck.agent.turn.call_facts), and checks each claim with
devkit.bench.facts_check, which reads the text back and the boards afresh. Prints JSON: the
claims by kind, the false ones by kind, how many actions carry one, the first examples, and
per animated level-up whether its frame before the last is nearer the board before it than
the next level's first board (`level_ups`: the evidence that the switch is the last frame).

    duck bench facts --games environment_files --policy explorer --max-actions 150
    duck bench facts --records runs/RUN
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import numpy as np

from devkit.bench.facts_check import Claim, check_animation_line, check_change
from duck.game.animation import summarize_animation
from duck.game.change import Step
from duck.game.frames import Frame
from duck.play.record import Record, read_record, unpack_grid


def _level(levels: int, state: str, win_levels: int) -> int:
    """The level the kernel's frames carry (duck.sandbox.actions.ActionHost.level_number)."""
    n = win_levels or 1
    return n if state == "WIN" else max(1, min(n, levels + 1))


def steps_of(rec: Record) -> Iterator[tuple[dict[str, Any], Step, int]]:
    """(record line, its Step, levels completed before it) for every action of a record."""
    grids = dict(rec.grids())
    if 0 not in grids:
        return
    before, levels = grids[0], int(rec.header.get("levels", 0))
    for a in rec.actions:
        after = grids[a["i"]]
        frames = list(unpack_grid(a["anim"])) + [after] if a.get("anim") else [after]
        yield a, Step(str(a["action"]), before, tuple(np.asarray(f) for f in frames), a["state"], a["levels"]), levels
        before, levels = after, a["levels"]


def _calls(rec: Record) -> Iterator[list[tuple[dict[str, Any], Step, int]]]:
    """The record's actions grouped by the model call that played them (one per action
    without one)."""
    group: list[tuple[dict[str, Any], Step, int]] = []
    key = None
    for item in steps_of(rec):
        info = item[0].get("info") or {}
        k = (info.get("turn"), info.get("call")) if "turn" in info and "auto" not in info else None
        if group and (k is None or k != key):
            yield group
            group = []
        group.append(item)
        key = k
    if group:
        yield group


def check_record(rec: Record) -> list[tuple[int, str, Claim]]:
    """(action index, which text, claim) for every claim about the record's boards."""
    from duck.agent.turn import call_facts
    from duck.sandbox.host import CallResult
    out: list[tuple[int, str, Claim]] = []
    win = int(rec.header.get("win_levels") or 0)
    state = rec.header.get("state", "NOT_FINISHED")
    for a, st, levels in steps_of(rec):
        lb, la = _level(levels, state, win), _level(a["levels"], a["state"], win)
        text = summarize_animation(Frame(st.before, level=lb), [Frame(f, level=la) for f in st.frames])
        levelled = a["levels"] > levels and a["state"] != "WIN"
        out += [(a["i"], "kernel", c) for c in check_change(text, st.before, st.frames, lb, levelled)]
        state = a["state"]
    for call in _calls(rec):
        steps, level_before = [s for _, s, _ in call], call[0][2]
        obs = SimpleNamespace(grid=steps[-1].after, state=steps[-1].state, levels_completed=steps[-1].levels)
        f = call_facts(CallResult("ok", actions=[s.action for s in steps], steps=steps), SimpleNamespace(obs=obs),
                       level_before, steps[0].before)
        i = call[-1][0]["i"]
        if f.change is not None:
            board = f.final if f.won_board is None else f.won_board
            out += [(i, "net_change", c) for c in check_change(f.change, steps[0].before, [board])]
        if f.animation is not None:
            out += [(i, "animation_line", c) for c in check_animation_line(f.animation, steps, level_before)]
    return out


def play(games: str, policy: str, max_actions: int, seed: int, only: list[str] | None, out: Path) -> list[Path]:
    """Play each game with `policy` into out/records; the record paths."""
    from duck.config import load_config
    from duck.game.source import GameSource
    from duck.play.session import play_game
    from duck.policies import make_policy
    source, cfg, paths = GameSource.offline(games), load_config(), []
    for gid in source.game_ids(only):
        path = out / "records" / f"{gid}.jsonl"
        play_game(source, gid, make_policy(policy, seed, config=cfg), max_actions=max_actions, record_path=path,
                  seed=seed, conversation=False)
        paths.append(path)
    return paths


def level_ups(rec: Record) -> tuple[int, int]:
    """(animated actions that switched to the next level, those whose frame before the last is
    nearer the board before the action than the next level's first board): the evidence that
    the switch is the last frame (duck.game.animation.won_frame)."""
    n = old = 0
    for a, st, levels in steps_of(rec):
        if a["levels"] > levels and a["state"] != "WIN" and len(st.frames) > 1:
            won = st.frames[-2]
            n += 1
            old += int((won != st.before).sum()) < int((won != st.frames[-1]).sum())
    return n, old


def report(paths: list[Path], examples: int = 20) -> dict[str, Any]:
    claims, false, per_game = Counter(), Counter(), {}
    bad_actions, changed, shown, ups, unreadable = 0, 0, [], [0, 0], {}
    for p in paths:
        try:
            rec = read_record(p)
        except (OSError, ValueError) as e:  # (no header, not a file: named, the others go on)
            unreadable[p.name] = f"{type(e).__name__}: {e}"
            continue
        changed += sum(1 for _, st, _ in steps_of(rec) if not np.array_equal(st.before, st.after))
        ups = [x + y for x, y in zip(ups, level_ups(rec))]
        found = check_record(rec)
        wrong = [(i, where, c) for i, where, c in found if not c.ok]
        claims.update(c.kind for _, _, c in found)
        false.update(c.kind for _, _, c in wrong)
        bad_actions += len({i for i, _, _ in wrong})
        per_game[rec.game_id] = {"actions": len(rec.actions), "claims": len(found), "false": len(wrong)}
        shown += [{"game": rec.game_id, "action": i, "text": where, "claim": c.text, "why": c.why}
                  for i, where, c in wrong][:max(0, examples - len(shown))]
    return {"records": len(paths) - len(unreadable), "unreadable": unreadable, "actions": sum(g["actions"] for g in per_game.values()), "changed_actions": changed,
            "claims": dict(sorted(claims.items())), "false": dict(sorted(false.items())),
            "false_total": sum(false.values()), "actions_with_false": bad_actions,
            "games_with_false": sum(1 for g in per_game.values() if g["false"]),
            "level_ups": {"animated": ups[0], "frame_before_last_of_the_old_level": ups[1]}, "per_game": per_game,
            "examples": shown}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="duck bench facts", description=__doc__.splitlines()[0])
    ap.add_argument("--games", default="environment_files")
    ap.add_argument("--records", default="", help="check this run's records (RUN or RUN/records) instead of playing")
    ap.add_argument("--policy", default="explorer")
    ap.add_argument("--max-actions", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated game prefixes")
    ap.add_argument("--out", default="", help="where the played records go (default: a temporary folder)")
    ap.add_argument("--examples", type=int, default=20)
    args = ap.parse_args(argv)
    if args.records:
        folder = Path(args.records)
        folder = folder / "records" if (folder / "records").is_dir() else folder
        paths = sorted(folder.glob("*.jsonl"))
        if not paths:
            print(json.dumps({"error": f"no records under {folder}"}))
            return 2
        print(json.dumps(report(paths, args.examples), indent=1))
        return 0
    if not any(Path(args.games).rglob("metadata.json")):
        print(json.dumps({"error": f"no games under {args.games} (fetch the public games: README)"}))
        return 2
    only = [p for p in args.only.split(",") if p] or None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        paths = play(args.games, args.policy, args.max_actions, args.seed, only, out)
        print(json.dumps(report(paths, args.examples), indent=1))
    return 0
