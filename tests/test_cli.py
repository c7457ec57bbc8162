"""The `duck` command itself: its table of lazily imported commands tells the truth, every
flag of every command has help text, and start-up imports nothing heavy (`duck --help` and the
explorer's `duck play` stay under a second: README, "Playing")."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from conftest import BUNDLED
from duck.cli import COMMANDS, Parser, build_parser

HEAVY = ("openai", "matplotlib", "duck.agent", "duck.sandbox.host", "duck.lab", "devkit", "rich")


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))


@pytest.mark.parametrize("module", sorted({c.module for c in COMMANDS.values()}))
def test_each_module_registers_the_commands_the_table_names(module):
    sub = Parser(prog="duck").add_subparsers(dest="command")
    importlib.import_module(module).register(sub)
    registered = {a.dest: a.help for a in sub._choices_actions}
    named = {n: c.help for n, c in COMMANDS.items() if c.module == module}
    assert registered == named  # the same names, and the help `duck --help` shows without importing them


def test_every_flag_of_every_command_has_help():
    missing = []
    for name, parser in _subparsers(build_parser("*")).choices.items():
        for a in parser._actions:
            if not isinstance(a, argparse._HelpAction) and not a.help:
                missing.append(f"duck {name} {a.option_strings[0] if a.option_strings else a.dest}")
    assert not missing, missing


def test_the_input_checks_name_real_arguments():
    """COMMANDS' `inputs` and `positive` are dest names of the command's own arguments."""
    sub = _subparsers(build_parser("*"))
    for name, c in COMMANDS.items():
        dests = {a.dest for a in sub.choices[name]._actions}
        assert set(c.inputs) | set(c.positive) <= dests, name


def _imported_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\n"
             f"import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith({HEAVY!r}))))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_duck_help_imports_nothing_heavy():
    assert _imported_after("from duck.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass") == []
    assert _imported_after("from duck.cli import main\ntry:\n    main(['play', '--help'])\nexcept SystemExit:\n"
                           "    pass") == []


def test_the_explorer_plays_without_the_model_client_or_matplotlib(tmp_path):
    code = (f"from duck.cli import main\n"
            f"main(['play', '--games', {str(BUNDLED)!r}, '--only', 'zs01', '--max-actions', '2',"
            f" '--out', {str(tmp_path / 'run')!r}])")
    assert _imported_after(code) == []
    # matplotlib stays importable after the toolkit was imported without it (duck.game.toolkit)
    after = _imported_after("import duck.game.source, matplotlib.pyplot, arc_agi.rendering as r\n"
                            "assert not r.HAS_MATPLOTLIB  # the toolkit took its no-render branch")
    assert "matplotlib.pyplot" in after
