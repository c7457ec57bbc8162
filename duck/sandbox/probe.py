"""`python -m duck.sandbox.probe RFD WFD`: a worker that only confines itself (worker side).

It speaks the worker's first two messages (its config in, `ready` with the verified layers
out, duck.sandbox.worker) and runs the same `confine()`, but imports neither numpy nor the
game's views, so the layer report of every record header (duck.sandbox.wall.isolation.report)
costs one interpreter start, not a kernel's.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from duck.sandbox import wire
from duck.sandbox.wall.confine import confine, prctl
from duck.sandbox.guard import GUARD, Guard

PR_SET_DUMPABLE = 4


def begin(argv: list[str], what: str) -> tuple[wire.Reader, int, dict[str, Any], dict[str, str], Guard]:
    """The first steps of a worker (and of this probe): read the config (the first message on
    RFD: a command line is readable by every process on the machine, and the plan names the
    games' and the records' folders), confine itself by its plan, install the guard. Returns
    (the reader, the write fd, the config, the verified layers, the guard)."""
    rfd, wfd = int(argv[0]), int(argv[1])
    reader = wire.Reader(rfd)
    first = reader.recv()
    if first is None or first[0].get("op") != "config":
        raise SystemExit(f"{what} expected its config first")
    cfg = first[0]["cfg"]

    def map_ids() -> bool:  # the host writes this process's id maps in its new user namespace
        wire.send(wfd, {"op": "userns"})
        got = reader.recv()
        return got is not None and got[0].get("op") == "mapped"

    layers = confine(cfg["plan"], map_ids)
    guard = Guard(os.getcwd(), cfg.get("deny_read", []))
    sys.addaudithook(guard)
    layers["guard"] = GUARD
    return reader, wfd, cfg, layers, guard


def main(argv: list[str]) -> None:
    reader, wfd, _, layers, _ = begin(argv, "the probe")
    # Dumpable, as each call's process makes itself (duck.sandbox.call): the host checks it can
    # read its /proc/<pid>/fd as its uid (duck.sandbox.wall.quota.fail_closed).
    prctl(PR_SET_DUMPABLE, 1)
    wire.send(wfd, {"op": "ready", "pid": os.getpid(), "layers": layers})
    try:
        reader.recv()  # `exit`, or the host closing the pipe
    except wire.WireError:
        pass

if __name__ == "__main__":
    main(sys.argv[1:])
