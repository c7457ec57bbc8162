"""The training export's figures on a stub run (experiments/LOG.md, issue 47), each a process of
its own as a user runs it: `duck stub-server --player --tokenizer T`, `duck play --policy llm` on
the bundled games, then `duck export-sft` (segments, requests, ms-swift and tokens) and `duck
export-check`, with their wall time, peak memory (the child's max RSS) and what they wrote.

    .venv/bin/python scripts/train_figures.py [--max-actions 80] [--out runs/train-figures]

Needs the train extra (the tokenizer). Prints one JSON object per step and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUCK = str(Path(sys.executable).parent / "duck")
TOKENIZER = "qwen3.6-27b"


def timed(name: str, argv: list[str]) -> dict:
    """Run `argv`: its exit status, wall time, peak RSS (os.wait4: that child's own) and last line."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    row = {"step": name, "rc": p.returncode, "seconds": round(time.monotonic() - t0, 2),
           "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}
    try:
        row["out"] = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        row["out"] = text[-300:]
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-actions", type=int, default=80, help="actions per game of the stub run")
    ap.add_argument("--out", default=str(ROOT / "runs" / "train-figures"), help="where the run and data go")
    a = ap.parse_args()
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    stub = subprocess.Popen([DUCK, "stub-server", "--player", "--port", "0", "--tokenizer", TOKENIZER],
                            stdout=subprocess.PIPE, text=True)
    try:
        url = json.loads(stub.stdout.readline())["url"]
        timed("play", [DUCK, "play", "--games", str(ROOT / "tests" / "games"), "--policy", "llm",
                       "--model-url", url, "--max-actions", str(a.max_actions), "--out", str(out / "run")])
    finally:
        stub.terminate()
        stub.wait(timeout=30)
    rows = [timed("export segments", [DUCK, "export-sft", str(out / "run"), "--out", str(out / "seg")]),
            timed("export requests", [DUCK, "export-sft", str(out / "run"), "--out", str(out / "req"),
                                      "--unit", "request"]),
            timed("export segments, ms-swift and tokens", [
                DUCK, "export-sft", str(out / "run"), "--out", str(out / "tok"), "--tokenizer", TOKENIZER,
                "--format", "ms-swift", "--format", "tokens"]),
            timed("check segments", [DUCK, "export-check", str(out / "seg")]),
            timed("check tokens", [DUCK, "export-check", str(out / "tok"), "--tokenizer", TOKENIZER])]
    manifest = json.loads((out / "tok" / "manifest.json").read_text())
    c = manifest["counts"]
    summary = {"samples": c["samples"], "spans": c["spans"], "replies": c["replies"],
               "loss_share": c["loss_share"],
               "characters": c["characters"], "images": c["images"], "sampled": manifest["sampled"],
               "request_samples": rows[1]["out"].get("samples") if isinstance(rows[1]["out"], dict) else None,
               "replies_per_second": {r["step"]: round(c["replies"] / r["seconds"], 1) for r in rows},
               "peak_rss_mb": {r["step"]: r["peak_rss_mb"] for r in rows},
               "ok": all(r["rc"] == 0 for r in rows)}
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
