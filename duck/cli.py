"""The `duck` command. Each subsystem registers its own subcommands here."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from duck.config import POLICIES


def _play(args: argparse.Namespace) -> int:
    from duck.config import load_config
    from duck.llm.client import join_urls
    from duck.run import play_folder
    cfg = load_config(args.config, args.set)
    if args.model_url:
        cfg.model.urls = join_urls(args.model_url)
    # The flags override the config; with a model URL and no --policy, the model plays.
    cfg.play.policy = args.policy or ("llm" if args.model_url else cfg.play.policy)
    for key in ("seed", "max_actions", "workers"):
        if getattr(args, key) is not None:
            setattr(cfg.play, key, getattr(args, key))
    doc = play_folder(args.games or cfg.play.games_dir, args.out, cfg, games=args.only, overwrite=args.overwrite)
    summary = {"score": round(doc["score"], 4), "toolkit_score": doc.get("toolkit_score"),
               "games": {g: {"levels": v["levels"], "actions": v["actions"],
                             "score": round(v["score"], 3), **({"error": v["error"]} if "error" in v else {})}
                         for g, v in doc["games"].items()}}
    print(json.dumps(summary, indent=1))
    return 0


def _score(args: argparse.Namespace) -> int:
    from duck.play.scoring import write_score
    print(json.dumps(write_score(args.run_dir), indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="duck", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    play = sub.add_parser("play", help="play every game of a folder and score the run")
    play.add_argument("--games", default=None, help="environments folder (default: play.games_dir, "
                      "environment_files; the bundled demo games are tests/games)")
    play.add_argument("--policy", choices=POLICIES, default=None,
                      help="default: llm when --model-url is given, else play.policy (explorer)")
    play.add_argument("--model-url", default=None, help="OpenAI-compatible base URL(s) for --policy llm")
    play.add_argument("--seed", type=int, default=None, help="default: play.seed (0)")
    play.add_argument("--max-actions", type=int, default=None, help="per game; default: play.max_actions (1000)")
    play.add_argument("--workers", type=int, default=None, help="games played in parallel processes "
                      "(default: play.workers, 1)")
    play.add_argument("--config", nargs="*", default=[], help="config files (TOML/JSON), in order")
    play.add_argument("--set", nargs="*", default=[], metavar="A.B=VALUE", help="config overrides")
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
