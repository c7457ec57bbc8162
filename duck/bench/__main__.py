import importlib
import sys

if len(sys.argv) < 2:
    sys.exit("usage: python -m duck.bench NAME [args]  (NAME: a module of duck/bench/)")
sys.exit(importlib.import_module(f"duck.bench.{sys.argv[1]}").main(sys.argv[2:]) or 0)
