"""Whether two runs played the same actions, game by game, from their records (e.g. two
`duck replay --through-agent` outputs, before and after a change: replay_loop.json compares
each with the Duck's record, whose unknown positions match anything; this compares every action).

    .venv/bin/python scripts/same_actions.py RUN_A RUN_B
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from duck.play.record import read_record  # noqa: E402


def main(a: Path, b: Path) -> int:
    same = total = actions = 0
    for p in sorted((a / "records").glob("*.jsonl")):
        q = b / "records" / p.name
        x = [r["action"] for r in read_record(p).actions]
        y = [r["action"] for r in read_record(q).actions] if q.exists() else None
        total, actions = total + 1, actions + len(x)
        if x == y:
            same += 1
            continue
        first = next((k for k, (u, v) in enumerate(zip(x, y or [])) if u != v), min(len(x), len(y or [])))
        print(f"{p.stem}: {len(x)} vs {len(y) if y is not None else 'no record'} actions, first difference at {first}")
    print(f"{same} of {total} games played the same actions ({actions} actions in {a})")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
