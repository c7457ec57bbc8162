"""The `duck` command: `duck play` and `duck score` here, every other subcommand registered by
the module that implements it (`register(subparsers)`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from duck.config import POLICIES, ConfigError, PlayConfig, load_config, with_values
from duck.game.source import GameError
from duck.lab import doctor, replay
from duck.lab.ab import run as ab
from duck.lab.report import build as report
from duck.llm import serve
from duck.play.scoring import write_score
from duck.testing.rehearse import run as rehearse
from duck.testing.stub import server as stub_server
from scheduler import cli as simulate

class BadInput(ValueError):
    """A command's input is wrong: reported in one line, exit status 2."""


COMMAND_MODULES = (simulate, replay, report, ab, serve, stub_server, rehearse, doctor)


def _play(args: argparse.Namespace) -> int:
    # Here, not at the top: the policies bring the model client (openai, ~0.6 s to import),
    # which no other command needs.
    from duck.llm.client import join_urls
    from duck.run import RunError, play_folder
    cfg = load_config(args.config, args.set)
    # The flags replace the config's values; with a model URL and no --policy, the model plays.
    values = {f"play.{k}": getattr(args, k) for k in ("seed", "max_actions", "workers")
              if getattr(args, k) is not None}
    if args.model_url:
        values["model.urls"] = join_urls(args.model_url)
    if args.policy or args.model_url:
        values["play.policy"] = args.policy or "llm"
    if args.no_conversations:
        values["play.conversations"] = False
    cfg = with_values(cfg, values)
    if args.games is not None and not Path(args.games).is_dir():
        raise BadInput(f"--games {args.games}: no such folder")
    try:
        doc = play_folder(args.games or cfg.play.games_dir, args.out, cfg, games=args.only,
                          overwrite=args.overwrite)
    except RunError as e:
        raise BadInput(str(e)) from None
    summary = {"score": round(doc["score"], 4), "toolkit_score": doc.get("toolkit_score"),
               "games": {g: {"levels": v["levels"], "actions": v["actions"],
                             "score": round(v["score"], 3), **({"error": v["error"]} if "error" in v else {})}
                         for g, v in doc["games"].items()}}
    print(json.dumps(summary, indent=1))
    _warn_problems(doc)
    return 0


def _warn_problems(doc: dict) -> None:
    """One line each on stderr: records with skipped lines, scores the toolkit disagrees with."""
    for game, problems in (doc.get("record_problems") or {}).items():
        print(f"duck: warning: record of {game}: {len(problems)} line(s) skipped ({problems[0]})", file=sys.stderr)
    if doc.get("disagrees"):
        print(f"duck: warning: the toolkit's scorecard disagrees on {', '.join(doc['disagrees'])}", file=sys.stderr)


def _score(args: argparse.Namespace) -> int:
    if not (Path(args.run_dir) / "records").is_dir():
        raise BadInput(f"{args.run_dir} has no records/ folder")
    doc = write_score(args.run_dir)
    print(json.dumps(doc, indent=1))
    _warn_problems(doc)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="duck", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)

    d = PlayConfig()  # the defaults, for the help text only
    play = sub.add_parser("play", help="play every game of a folder and score the run")
    play.add_argument("--games", default=None, help=f"environments folder (default: play.games_dir, "
                      f"{d.games_dir}; the bundled demo games are tests/games)")
    play.add_argument("--policy", choices=POLICIES, default=None,
                      help=f"default: llm when --model-url is given, else play.policy ({d.policy})")
    play.add_argument("--model-url", default=None, help="OpenAI-compatible base URL(s) for --policy llm")
    play.add_argument("--seed", type=int, default=None, help=f"default: play.seed ({d.seed})")
    play.add_argument("--max-actions", type=int, default=None,
                      help=f"per game, at least 1; default: play.max_actions ({d.max_actions})")
    play.add_argument("--workers", type=int, default=None, help="games played in parallel processes, "
                      f"at least 1 (default: play.workers, {d.workers})")
    play.add_argument("--config", nargs="*", default=[], help="config files (TOML/JSON), in order")
    play.add_argument("--set", nargs="*", default=[], metavar="A.B=VALUE", help="config overrides")
    play.add_argument("--only", nargs="*", default=None, help="game ids (or 4-letter prefixes) to play")
    play.add_argument("--out", default="runs/play", help="run folder (records/ and score.json)")
    play.add_argument("--overwrite", action="store_true", help="replace the records of --out")
    play.add_argument("--no-conversations", action="store_true",
                      help="write no conversation files (RUN/conversations/; default: play.conversations)")
    play.set_defaults(func=_play)

    score = sub.add_parser("score", help="recompute score.json from a run folder's records")
    score.add_argument("run_dir")
    score.set_defaults(func=_score)

    for module in COMMAND_MODULES:
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("arc_agi").setLevel(logging.WARNING if args.verbose else logging.ERROR)
    try:
        return args.func(args)
    except (ConfigError, GameError, BadInput) as e:  # bad input: one line, not a traceback
        print(f"duck {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
