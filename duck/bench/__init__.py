"""Benchmarks: `python -m duck.bench NAME [args]` runs `duck.bench.NAME.main(args)`.

Each prints JSON on stdout, so a closing note can quote the command and its output.
"""
