"""Benchmarks: `duck bench NAME [args]` runs `devkit.bench.NAME.main(args)`.

Each prints JSON on stdout, so a closing note can quote the command and its output. A missing
or unknown NAME is a one-line error (exit 2) that lists the names.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Any


def names() -> list[str]:
    """The benchmarks: the modules of devkit/bench/ with a `main`."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
                  and hasattr(importlib.import_module(f"{__name__}.{m.name}"), "main"))


def run(args: argparse.Namespace) -> int:
    name = args.name
    if name is None:
        raise SystemExit(f"which benchmark? none named (NAME: {', '.join(names())})")
    module = None
    if name.isidentifier() and not name.startswith("_"):  # never a path
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # the benchmark exists but one of its imports does not: a real error
    if module is None or not hasattr(module, "main"):
        raise SystemExit(f"no benchmark named {name!r} (NAME: {', '.join(names())})")
    return module.main(args.args) or 0


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="run a benchmark of the workbench; it prints JSON",
                       description="Run devkit.bench.NAME with the arguments after NAME (`duck bench NAME --help`: "
                                   "its own flags). Each prints JSON on stdout.")
    p.add_argument("name", metavar="NAME", nargs="?",
                   help="the benchmark (a module of devkit/bench/ with a main)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    p.set_defaults(func=run)
