"""Whether the games may use the model: `ModelHealth`, a flag file the notebook's monitor sets
when the vLLM server dies or stops answering (`probe_model` is its check), saying whether the
server is coming back (the games park) or gone for good (the explorer takes them; what a game
does then is duck.policies' business).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from duck.config import ModelConfig
from duck.llm.client import ModelError, list_models, smoke_chat

log = logging.getLogger(__name__)

COMING_BACK = "coming back: "  # the flag's text starts so while the server is expected back


class ModelHealth:
    """Whether games may use the model, as a flag file: cheap to read from any thread or
    process (a game worker checks it before each action)."""

    def __init__(self, flag: Path) -> None:
        self.flag = Path(flag)

    def down(self) -> bool:
        return self.flag.exists()

    def coming_back(self) -> bool:
        """Down, and a restart is under way or still possible: the model games wait."""
        try:
            return self.flag.read_text().startswith(COMING_BACK)
        except OSError:
            return False

    def down_for_s(self) -> float:
        """Seconds since the flag was set (0 when up)."""
        try:
            return max(0.0, time.time() - self.flag.stat().st_mtime)
        except OSError:
            return 0.0

    def mark_down(self, reason: str, quiet: bool = False, coming_back: bool = False) -> None:
        """Set the flag: `coming_back` when the server is expected back (the games park), else
        down for good (the explorer takes the games)."""
        if not quiet and (not self.flag.exists() or self.coming_back() != coming_back):
            log.warning("model server down: %s; %s", reason,
                        "model games wait for it" if coming_back else "games go on with the explorer")
        self.flag.parent.mkdir(parents=True, exist_ok=True)
        self.flag.write_text(COMING_BACK + reason if coming_back else reason)

    def mark_up(self) -> None:
        self.flag.unlink(missing_ok=True)


def probe_model(model_url: str | None, timeout_s: float, config: ModelConfig | None = None) -> bool:
    """A one-token chat (a wedged server still answers /v1/models, not this): True when it
    answers within `timeout_s`, a refusal included (a 4xx other than 408/429: the server is
    up, the failure is the request's); False on silence (a wedge), no connection, or a 5xx.
    `config`: the run's model settings (a hosted provider's name, key and fields); None, the
    served model's defaults under the name the server lists."""
    try:
        cfg = config if config is not None else ModelConfig(name=list_models(model_url)[0])
        # timeout_s bounds a reply once it streams; stall_s, a server that sends no byte (a wedge)
        cfg = cfg.model_copy(update={"stall_s": min(cfg.stall_s, timeout_s)})
        smoke_chat(model_url, cfg, timeout_s=timeout_s, max_tokens=1, retries=0)
        return True
    except ModelError as e:
        if e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429):
            return True  # it answers, with a refusal: up (a game's failures are its own, no outage)
        log.info("model probe failed: %s", e)
        return False
    except Exception as e:  # any other failure, of the server or of the network, means "not answering"
        log.info("model probe failed: %s", e)
        return False
