"""The `duck` command: `duck play` and `duck score` here, every other subcommand registered by
the module that implements it (`register(subparsers)`), imported only when that command runs.

Every command's errors come out the same way (`main`): bad input is one line on stderr
(`duck CMD: error: ...`, exit 2), a full disk one line (exit 1), Ctrl-C one line (exit 130),
and anything unexpected one line naming the exception (exit 1; `duck -v CMD ...` shows the
traceback). Start-up stays under a second: nothing heavy (openai, arc_agi, matplotlib,
numpy-based perception) is imported before the command that needs it.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

@dataclass(frozen=True)
class Command:
    """A command another module implements (its `register(subparsers)`): imported only when it
    runs. `inputs`: the arguments (dest names) that name files or folders that must exist;
    `positive`: the numbers that must be above 0. Both are checked here, before the command
    runs, so that its bad input is one line whatever its own code would have raised."""

    module: str
    help: str
    inputs: tuple[str, ...] = ()
    positive: tuple[str, ...] = ()


# Most of these modules bring the model client (openai, ~0.6 s to import), the toolkit
# (arc_agi: flask, requests) or the report's plotting (matplotlib), which `duck --help`,
# `duck score` and the explorer's `duck play` never need. tests/test_cli.py checks that each
# module registers these names with this help text.
COMMANDS: dict[str, Command] = {
    "simulate": Command("devkit.simulator.cli", "replay progress curves under a scheduling policy and a server model",
                        ("runs", "baselines"), ("seeds", "games", "slots", "budget")),
    "replay": Command("devkit.replay.replay", "replay Duck traces through the kernel (replay.json), or with "
                      "--through-agent through the whole agent loop (replay_loop.json)",
                      ("traces_dir", "games"), ("workers", "timeout")),
    "report": Command("duck.lab.report.build", "per-game scoring report (report.html + report.md) of a run "
                      "folder; with two, a comparison game by game"),
    "gif": Command("duck.lab.report.gif", "an animated GIF of a game from its record, to share "
                   "(RUN/gif/<game>.gif)", ("run",), ("scale", "max_frames")),
    "ab": Command("duck.lab.ab.run", "paired A/B experiment of two configs on the same games and seeds",
                  ("a", "b", "games"), ("passes", "max_passes", "budget_s", "game_seconds", "workers", "boot", "perm")),
    "ab-stats": Command("duck.lab.ab.run", "A/B statistics from run folders or runs.jsonl-format files",
                        ("A", "B"), ("boot", "perm")),
    "ab-merge": Command("duck.lab.ab.run", "gather `duck ab --shard` folders into one and score it", ("shards",),
                        ("boot", "perm")),
    "serve": Command("duck.llm.serve", "start vLLM (one server per GPU), wait until ready, supervise it", ("config",)),
    "stub-server": Command("devkit.stub.server", "a local OpenAI-compatible server driven by a scripted model",
                           ("replies", "traces", "solutions", "conversation")),
    "rehearse": Command("devkit.rehearse.run", "rehearse a Kaggle run: the real notebook, a local gateway, "
                        "a stand-in vLLM", ("games",), ("budget_seconds", "max_actions")),
    "bench": Command("devkit.bench", "run a benchmark of the workbench; it prints JSON"),
    "doctor": Command("devkit.doctor.doctor", "check a GPU machine: driver, vLLM, the plan, duck serve, a smoke chat, "
                      "the plan's slots of games at once, against the field's operating points",
                      ("games", "lock", "config"), ("game_seconds", "max_actions")),
}
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
DESCRIPTION = ("duck-arc3: play the ARC-AGI-3 games with a Duck-style model agent (a Qwen model writing Python "
               "in a sandbox) or the non-LLM explorer, and score, report and compare the runs.")


class BadInput(ValueError):
    """A command's input is wrong: reported in one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors in one line (the usage is one `--help` away)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _play(args: argparse.Namespace) -> int:
    # Here, not at the top: the run brings the toolkit and the policies.
    from duck.run import RunError, play_folder
    from duck.run.interrupt import EXIT_INTERRUPTED as INTERRUPTED
    from duck.run.summary import after_play
    if args.resume:
        given = [flag for flag, v in (("--games", args.games), ("--policy", args.policy), ("--seed", args.seed),
                                      ("--max-actions", args.max_actions), ("--config", args.config),
                                      ("--set", args.set), ("--only", args.only), ("--overwrite", args.overwrite),
                                      ("--no-conversations", args.no_conversations)) if v]
        if given:
            raise BadInput(f"--resume plays with the run's own config (its run.json): drop {', '.join(given)}")
        if args.out is None:
            raise BadInput("--resume needs --out RUN: the run folder to finish")
        games, cfg = None, None  # both from the run's run.json
        kw = dict(resume=True, workers=args.workers, policy_changed_ok=args.policy_changed_ok,
                  model_urls=_urls(args.model_url))
    else:
        games, cfg = _fresh(args)
        kw = dict(games=args.only, overwrite=args.overwrite)
    try:
        doc = play_folder(games, args.out, cfg, **kw, interactive=True, command=["duck", *sys.argv[1:]])
    except RunError as e:
        raise BadInput(str(e)) from None
    return after_play(args.out, doc, as_json=args.json, verbose=args.verbose, interrupted_code=INTERRUPTED)


def _fresh(args: argparse.Namespace) -> tuple[str, Any]:
    """A new run's games folder and config (the config with the flags over it); sets
    `args.out` to a new folder when none was given."""
    from duck.config import load_config, with_values
    cfg = load_config(args.config, args.set)
    # The flags replace the config's values; with a model URL and no --policy, the model plays.
    values: dict[str, Any] = {f"play.{k}": getattr(args, k) for k in ("seed", "max_actions", "workers")
                              if getattr(args, k) is not None}
    if args.model_url:
        values["model.urls"] = _urls(args.model_url)
    if args.policy or args.model_url:
        values["play.policy"] = args.policy or "llm"
    if args.no_conversations:
        values["play.conversations"] = False
    cfg = with_values(cfg, values)
    if args.games is not None and not Path(args.games).is_dir():
        raise BadInput(f"--games {args.games}: " + ("not a folder" if Path(args.games).exists() else "no such folder"))
    if args.policy_changed_ok:
        raise BadInput("--policy-changed-ok goes with --resume")
    if args.out is None:
        args.out = _default_out(cfg.play.policy)
    return args.games or cfg.play.games_dir, cfg


def _urls(value: str | None) -> list[str]:
    if not value:
        return []
    from duck.llm.client import join_urls
    urls = join_urls(value)
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise BadInput(f"--model-url {', '.join(bad)}: not an http(s):// URL")
    return urls


def _default_out(policy: str) -> str:
    """`runs/<date>-<time>-<policy>` (a user policy: its class), a new folder each run."""
    name = policy.rpartition(":")[2] or policy
    base = time.strftime("runs/%Y%m%d-%H%M%S-") + "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
    out, n = base, 1
    while Path(out).exists():
        n += 1
        out = f"{base}-{n}"
    return out


def _score(args: argparse.Namespace) -> int:
    from duck.play.scoring import write_score
    from duck.run.info import duck_command
    from duck.run.summary import warn_problems
    run = Path(args.run_dir)
    if not run.is_dir():
        raise BadInput(f"{run}: " + ("not a folder" if run.exists() else "no such folder"))
    if not (run / "records").is_dir():
        raise BadInput(f"{run} has no records/ folder")
    doc = write_score(run)
    print(json.dumps(doc, indent=1))
    warn_problems(doc)
    if doc.get("missing") or doc.get("unfinished"):
        missing, short = doc.get("missing") or [], doc.get("unfinished") or []
        parts = ([f"{len(missing)} of {doc.get('games_expected')} games missing ({_names(missing)})"] if missing else []) \
            + ([f"{len(short)} unfinished ({_names(short)})"] if short else [])
        print(f"duck: warning: partial run: {'; '.join(parts)}; the score is over the {len(doc['games'])} recorded; "
              f"finish with: {duck_command()} play --resume --out {run}", file=sys.stderr)
    elif not (run / "run.json").is_file():
        print(f"duck: warning: {run} has no run.json: which games it meant to play is unknown "
              "(only the recorded ones are scored)", file=sys.stderr)
    return 0


def _names(ids: list[str], n: int = 5) -> str:
    return ", ".join(ids[:n]) + (f", ... {len(ids) - n} more" if len(ids) > n else "")


def _add_play(sub: Any) -> None:
    from duck.config import PlayConfig  # pydantic and the profiles (~0.15 s): only for play's own help
    d = PlayConfig()  # the defaults, for the help text only
    play = sub.add_parser("play", help="play every game of a folder and score the run",
                          description="Play every game of a folder; write RUN/records/*.jsonl, RUN/score.json and "
                                      "RUN/run.json. A live line per game on a terminal; Ctrl-C stops cleanly "
                                      "(score.json marked partial, exit 130), a second Ctrl-C kills at once.")
    play.add_argument("--games", default=None, help=f"environments folder (default: play.games_dir, "
                      f"{d.games_dir}: the public games; the bundled demo games are tests/games)")
    play.add_argument("--policy", default=None, metavar="random|explorer|llm|FILE.py:CLASS",
                      help=f"who plays: random, the explorer (no model), llm (the model agent; needs a server), or "
                           f"your own class in a file (README, 'Your own policy'); default: llm when --model-url is "
                           f"given, else play.policy ({d.policy})")
    play.add_argument("--model-url", default=None, metavar="URL[,URL...]",
                      help="OpenAI-compatible base URL(s) for --policy llm (a server that does not answer is an error "
                           "before anything plays, unless --set play.model_fallback=true)")
    play.add_argument("--seed", type=int, default=None, help=f"run seed, the same for every game "
                      f"(default: play.seed, {d.seed})")
    play.add_argument("--max-actions", type=int, default=None,
                      help=f"per game, at least 1; default: play.max_actions ({d.max_actions})")
    play.add_argument("--workers", type=int, default=None, help="games played in parallel processes, "
                      f"at least 1 (default: play.workers, {d.workers})")
    play.add_argument("--config", nargs="*", default=[], metavar="FILE",
                      help="config files (TOML, or JSON), applied in order (duck/config/; experiments/*.toml)")
    play.add_argument("--set", nargs="*", default=[], metavar="A.B=VALUE",
                      help="config overrides after the files, e.g. play.max_actions=200")
    play.add_argument("--only", nargs="*", default=None, metavar="GAME",
                      help="game ids (or 4-letter prefixes) to play")
    play.add_argument("--out", default=None, help="run folder (records/, score.json, run.json; default: a new "
                      "runs/<date>-<time>-<policy>)")
    play.add_argument("--overwrite", action="store_true", help="replace the records of --out")
    play.add_argument("--resume", action="store_true",
                      help="finish the run in --out: play, with its own config (run.json), only the games it lacks "
                           "or that ended short (Ctrl-C, a full disk, a kill); --workers and --model-url may change")
    play.add_argument("--policy-changed-ok", action="store_true",
                      help="with --resume: play on although the run's policy file changed (recorded in run.json)")
    play.add_argument("--json", action="store_true",
                      help="print the summary as JSON on stdout on a terminal too (it always is in a pipe)")
    play.add_argument("--no-conversations", action="store_true",
                      help="write no conversation files (RUN/conversations/; default: play.conversations)")
    play.set_defaults(func=_play)


def _add_score(sub: Any) -> None:
    score = sub.add_parser("score", help="recompute score.json from a run folder's records; say which games are missing")
    score.add_argument("run_dir", help="a run folder (records/ inside; run.json names the games it meant to play)")
    score.set_defaults(func=_score)


def _command_of(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported ("*": every command's, as for tests)."""
    p = Parser(prog="duck", description=DESCRIPTION,
                                epilog="duck COMMAND --help: that command's flags. README.md: what each does.")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log at INFO (what each game did, the model client's retries) and show tracebacks")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in ("*", "play"):
        _add_play(sub)
    else:
        sub.add_parser("play", help="play every game of a folder and score the run")
    _add_score(sub)
    modules: list[str] = []
    chosen = COMMANDS[command].module if command in COMMANDS else None
    for name, c in COMMANDS.items():
        if command == "*" or c.module == chosen:
            if c.module not in modules:
                modules.append(c.module)
        else:
            sub.add_parser(name, help=c.help)
    for module in modules:
        try:
            importlib.import_module(module).register(sub)
        except ModuleNotFoundError as e:
            if e.name != module.split(".")[0]:
                raise  # the module is there, one of its imports is not: a real error
            p.exit(EXIT_BAD_INPUT, f"duck {command}: error: this command is part of the workbench ({e.name}/), "
                                   "which this installation leaves out (the Kaggle wheel); run it from a "
                                   "checkout (README)\n")
    return p


def _check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What a command names must be there and make sense (Command.inputs, .positive; an
    --out that is a file): one line each, before the command runs."""
    c = COMMANDS.get(args.command)
    if c is None:
        return
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    label = {a.dest: (a.option_strings[-1] if a.option_strings else (a.metavar or a.dest)) for a in sub._actions}
    for dest in c.inputs:
        values = getattr(args, dest, None)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and value and "://" not in value and not Path(value).exists():
                raise BadInput(f"{label.get(dest, dest)} {value}: no such file or folder")
    for dest in c.positive:
        value = getattr(args, dest, None)
        if isinstance(value, str):  # a comma list of numbers (`duck simulate --slots 8,10,12`)
            try:
                value = min(float(x) for x in value.split(",") if x.strip())
            except ValueError:
                continue  # not numbers: the command's own parsing says what is wrong
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            raise BadInput(f"{label.get(dest, dest)} {getattr(args, dest)}: must be above 0")
    out = getattr(args, "out", None)
    if isinstance(out, str) and Path(out).exists() and not Path(out).is_dir():
        raise BadInput(f"--out {out} is a file, not a folder")


def _input_error(e: BaseException) -> bool:
    """Errors that mean the input was wrong. GameError is looked up only if its module was
    imported (a command that never loaded the toolkit cannot have raised it)."""
    from duck.config import ConfigError
    kinds: tuple[type, ...] = (BadInput, ConfigError)
    if "duck.game.source" in sys.modules:
        kinds += (sys.modules["duck.game.source"].GameError,)
    if "duck.policies" in sys.modules:
        kinds += (sys.modules["duck.policies"].PolicyError,)
    return isinstance(e, kinds)


def _os_error(e: OSError) -> str:
    where = f"{e.filename}: " if e.filename else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{where}the disk is full ({e.strerror})"
    return f"{where}{e.strerror or e}"


def _as_list(value: Any) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value]) if v]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else repr(e)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("arc_agi").setLevel(logging.WARNING if args.verbose else logging.ERROR)
    if args.command == "play" and not args.verbose:
        # The model client's per-retry warnings: the run's progress and summary say once
        # when the model became unreachable (-v shows every retry).
        logging.getLogger("duck.llm").setLevel(logging.ERROR)
    cmd = f"duck {args.command}"
    try:
        _check_inputs(parser, args)
        args.argv = argv  # what a command prints to be run again (duck ab's resume line)
        return args.func(args)
    except KeyboardInterrupt:
        print(f"{cmd}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `duck ... | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except SystemExit as e:  # a module's own `raise SystemExit("message")`
        if isinstance(e.code, str):
            print(f"{cmd}: error: {e.code}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise
    except Exception as e:
        if _input_error(e):  # bad input: one line, not a traceback
            print(f"{cmd}: error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.verbose:
            raise
        if isinstance(e, OSError):
            if e.errno == errno.EADDRINUSE and getattr(args, "port", None):
                print(f"{cmd}: error: --port {args.port}: already in use (another server listens there)", file=sys.stderr)
                return EXIT_BAD_INPUT
            print(f"{cmd}: error: {_os_error(e)}", file=sys.stderr)
            return EXIT_FAILED if e.errno in (errno.ENOSPC, errno.EDQUOT) else EXIT_BAD_INPUT
        if isinstance(e, ValueError):  # a malformed input file, or a value the command refused
            c = COMMANDS.get(args.command)
            given = [v for d in (c.inputs if c else ()) for v in _as_list(getattr(args, d, None))]
            kind = {"JSONDecodeError": "malformed JSON", "TOMLDecodeError": "malformed TOML",
                    "UnicodeDecodeError": "not UTF-8 text"}.get(type(e).__name__, type(e).__name__)
            print(f"{cmd}: error: {kind}: {_first_line(e)}" + (f" (reading {', '.join(given)})" if given else ""),
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"{cmd}: error: {type(e).__name__}: {_first_line(e)} (duck -v {args.command} ... shows the traceback)",
              file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
