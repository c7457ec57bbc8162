"""What stands in for Kaggle's gateway in a rehearsal: duck.game.gateway's local gateway (the
official arc_agi REST app in competition mode on 127.0.0.1) with the close hook Kaggle's
gateway writes its submission from; and the small HTTP helpers the rehearsal's checks ask
it with.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from duck.config import KaggleConfig
from duck.game.gateway import LocalGateway

API_KEY = KaggleConfig().api_key  # what the official gateway accepts

class Gateway(LocalGateway):
    """The local gateway of duck.game.gateway, logging and writing its closed scorecard in `work`."""

    def __init__(self, games_dir: Path, work: Path) -> None:
        super().__init__(games_dir, log_path=work / "gateway.log",
                         closed_path=work / "gateway_closed_scorecard.json")

    def closed_card(self) -> dict | None:
        """The scorecard as the gateway wrote it at close."""
        if self.closed_path and self.closed_path.exists():
            return json.loads(self.closed_path.read_text())
        return None


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
