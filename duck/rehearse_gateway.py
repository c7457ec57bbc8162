"""What stands in for Kaggle's gateway in a rehearsal: the official arc_agi REST app in
competition mode on 127.0.0.1 (as duck.gateway serves it), plus the close hook Kaggle's
gateway writes its submission from, run as a child process (`python -m duck.rehearse
gateway ...`); and the small HTTP helpers the rehearsal's checks ask it with.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

API_KEY = "test-key-123"


def serve_gateway(games_dir: str, port: int, closed_path: str) -> None:
    """duck.gateway's app (arc_agi's REST app, competition mode, 127.0.0.1) plus the hook
    Kaggle's gateway has: when the scorecard is closed, what it holds is written out
    (`closed_path`, JSON), so the rehearsal sees the gateway's own count of every game."""
    from arc_agi import Arcade, OperationMode
    from arc_agi.server import create_app

    def on_close(card: Any) -> None:
        Path(closed_path).write_text(card.model_dump_json())

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    arcade = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=games_dir,
                    logger=logging.getLogger("arc_agi"))
    app, _ = create_app(arcade, competition_mode=True, on_scorecard_close=on_close)
    app.run(host="127.0.0.1", port=port, threaded=True)


class Gateway:
    """`serve_gateway` as a child process, ready when /api/healthcheck answers."""

    def __init__(self, games_dir: Path, work: Path) -> None:
        self.games_dir, self.port = str(games_dir), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed_path = work / "gateway_closed_scorecard.json"
        self.log_path = work / "gateway.log"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Gateway":
        env = {k: v for k, v in os.environ.items() if k != "OPERATION_MODE"}
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "duck.rehearse", "gateway", self.games_dir,
                                      str(self.port), str(self.closed_path)], stdout=out, stderr=out, env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.proc.returncode}; see {self.log_path}")
            if http_get(f"{self.url}/api/healthcheck", 1)[0] == 200:
                return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the gateway did not come up in 30 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def closed_card(self) -> dict[str, Any] | None:
        return json.loads(self.closed_path.read_text()) if self.closed_path.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 10.0) -> tuple[int, Any]:
    """(HTTP status, JSON body or text); status 0 when nothing answered."""
    req = urllib.request.Request(url, headers={"X-API-Key": API_KEY})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)
    try:
        return status, json.loads(data or b"null")
    except ValueError:
        return status, data.decode(errors="replace")


def port_open(url: str) -> bool:
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0
