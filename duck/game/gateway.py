"""A local competition gateway: the official arc_agi REST app in competition mode.

It stands in for Kaggle's `http://gateway:8001/` in tests and rehearsals: the same code
(`arc_agi.server.create_app`) with `competition_mode=True` over an environments folder, on
127.0.0.1 only. Baselines are hidden from clients, one scorecard per server, one `make()`
per game, and the scorecard can be read only once closed.

    python -m duck.game.gateway --games tests/games --port 8001
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests


def serve(games_dir: str, port: int, host: str = "127.0.0.1", closed_path: str | None = None) -> None:
    """Serve until killed. With `closed_path`, the hook Kaggle's gateway has: when the
    scorecard is closed, what it holds is written there (JSON), so a rehearsal can see the
    gateway's own count of every game."""
    from arc_agi import Arcade, OperationMode
    from arc_agi.server import create_app

    def on_close(card: object) -> None:
        Path(closed_path).write_text(card.model_dump_json())

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    arcade = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=games_dir,
                    logger=logging.getLogger("arc_agi"))
    app, _ = create_app(arcade, competition_mode=True, on_scorecard_close=on_close if closed_path else None)
    app.run(host=host, port=port, threaded=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalGateway:
    """The gateway as a child process, for tests and rehearsals (a context manager)."""

    def __init__(self, games_dir: str | Path, port: int | None = None, log_path: str | Path | None = None,
                 closed_path: str | Path | None = None):
        self.games_dir = str(games_dir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.closed_path = Path(closed_path) if closed_path else None
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "LocalGateway":
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        env = {k: v for k, v in os.environ.items() if k != "OPERATION_MODE"}
        cmd = [sys.executable, "-m", "duck.game.gateway", "--games", self.games_dir, "--port", str(self.port)]
        if self.closed_path:
            cmd += ["--closed-json", str(self.closed_path)]
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=out, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.proc.returncode}"
                                   + (f"; see {self.log_path}" if self.log_path else ""))
            try:
                if requests.get(f"{self.url}/api/healthcheck", timeout=1).ok:
                    return self
            except requests.RequestException:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("gateway did not come up in 30 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", required=True)
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--closed-json", default=None, help="write the scorecard here when it is closed")
    a = p.parse_args(argv)
    serve(a.games, a.port, a.host, a.closed_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
