"""Benchmarks: `python -m devkit.bench NAME [args]` runs `devkit.bench.NAME.main(args)`.

Each prints JSON on stdout, so a closing note can quote the command and its output.
"""
