"""`python -m devkit.bench NAME [args]`: run devkit.bench.NAME.main(args); NAME is a module of
devkit/bench/ with a `main`. A missing or unknown NAME is a one-line error (exit 2) that
lists the names; -h prints the usage; never a traceback."""

import importlib
import pkgutil
import sys

import devkit.bench


def usage() -> str:
    names = sorted(m.name for m in pkgutil.iter_modules(devkit.bench.__path__)
                   if not m.name.startswith("_")
                   and hasattr(importlib.import_module(f"devkit.bench.{m.name}"), "main"))
    return f"usage: python -m devkit.bench NAME [args]  (NAME: {', '.join(names)})"


def fail(message: str) -> None:
    print(f"python -m devkit.bench: error: {message}; {usage()}", file=sys.stderr)
    sys.exit(2)


if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
    print(usage())
    sys.exit(0)
if len(sys.argv) < 2:
    fail("which benchmark? none named")
name = sys.argv[1]
module = None
if name.isidentifier() and not name.startswith("_"):  # never a path, never __main__ itself
    try:
        module = importlib.import_module(f"devkit.bench.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"devkit.bench.{name}":
            raise  # the benchmark exists but one of its imports does not: a real error
if module is None or not hasattr(module, "main"):
    fail(f"no benchmark named {name!r}")
sys.exit(module.main(sys.argv[2:]) or 0)
