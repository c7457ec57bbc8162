"""The `duck` command. Each subsystem registers its own subcommands here."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from duck.run import BUNDLED_GAMES


def _play(args: argparse.Namespace) -> int:
    from duck.run import play_folder
    policy = args.policy or ("llm" if args.model_url else "explorer")
    options = {"model_url": args.model_url} if args.model_url else {}
    doc = play_folder(args.games, args.out, policy=policy, seed=args.seed,
                      max_actions=args.max_actions, workers=args.workers,
                      games=args.only, options=options, overwrite=args.overwrite)
    summary = {"score": round(doc["score"], 4), "toolkit_score": doc.get("toolkit_score"),
               "games": {g: {"levels": v["levels"], "actions": v["actions"],
                             "score": round(v["score"], 3), **({"error": v["error"]} if "error" in v else {})}
                         for g, v in doc["games"].items()}}
    print(json.dumps(summary, indent=1))
    return 0


def _score(args: argparse.Namespace) -> int:
    from duck.run import write_score
    print(json.dumps(write_score(args.run_dir), indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="duck", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    play = sub.add_parser("play", help="play every game of a folder and score the run")
    play.add_argument("--games", default=str(BUNDLED_GAMES), help="environments folder (default: bundled games)")
    play.add_argument("--policy", choices=["random", "explorer", "llm"], default=None,
                      help="default: llm when --model-url is given, else explorer")
    play.add_argument("--model-url", default=None, help="OpenAI-compatible base URL for --policy llm")
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--max-actions", type=int, default=200)
    play.add_argument("--workers", type=int, default=1, help="games played in parallel processes")
    play.add_argument("--only", nargs="*", default=None, help="game ids (or 4-letter prefixes) to play")
    play.add_argument("--out", default="runs/play", help="run folder (records/ and score.json)")
    play.add_argument("--overwrite", action="store_true", help="replace the records of --out")
    play.set_defaults(func=_play)

    score = sub.add_parser("score", help="recompute score.json from a run folder's records")
    score.add_argument("run_dir")
    score.set_defaults(func=_score)

    for module in _command_modules():
        module.register(sub)
    return p


def _command_modules() -> list:
    """Subsystems that add their own subcommands (each has `register(subparsers)`)."""
    import importlib
    mods = []
    for name in ("scheduler.cli", "duck.lab.replay", "duck.lab.report.build", "duck.lab.ab.run", "duck.llm.serve",
                 "duck.testing.stub.server", "duck.testing.rehearse.run"):
        try:
            mods.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
    return mods


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("arc_agi").setLevel(logging.WARNING if args.verbose else logging.ERROR)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
