"""Whether the games may use the model, and what they do when they may not.

`ModelHealth` is a flag file the notebook's monitor sets when the vLLM server dies or stops
answering (`probe_model` is its check: a one-token chat, which a wedged server fails while
still listing its models). `FallbackPolicy` is the policy a game plays under while a model
is configured: the model-driven policy while the flag is clear, the explorer from where the
game stands as soon as it is set or the model policy fails.
"""

from __future__ import annotations

import json
import logging
import traceback
import urllib.request
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("duck.kaggle.run")  # the notebook shows this logger's INFO lines

MODEL_DOWN = "model_down"  # the PlayStopped reason that hands a game to the explorer


class ModelHealth:
    """Whether games may use the model, as a flag file: cheap to read from any thread or
    process (a game worker checks it before each action)."""

    def __init__(self, flag: Path) -> None:
        self.flag = Path(flag)

    def down(self) -> bool:
        return self.flag.exists()

    def ok(self) -> bool:
        return not self.flag.exists()

    def mark_down(self, reason: str, quiet: bool = False) -> None:
        if not self.flag.exists() and not quiet:
            log.warning("model server down: %s; games go on with the explorer", reason)
        self.flag.parent.mkdir(parents=True, exist_ok=True)
        self.flag.write_text(reason)

    def mark_up(self) -> None:
        self.flag.unlink(missing_ok=True)


def probe_model(model_url: str | None, timeout_s: float) -> bool:
    """A one-token chat: a wedged server still answers /v1/models, not this."""
    try:
        with urllib.request.urlopen(model_url.rstrip("/") + "/v1/models", timeout=10) as r:
            name = json.loads(r.read())["data"][0]["id"]
        body = json.dumps({"model": name, "max_tokens": 1, "temperature": 0,
                           "messages": [{"role": "user", "content": "ping"}]}).encode()
        req = urllib.request.Request(model_url.rstrip("/") + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status == 200
    except Exception as e:
        log.info("model probe failed: %s", e)
        return False


class _Watched:
    """A Session seen by the model-driven policy: the next action raises
    PlayStopped(model_down) as soon as the server is marked down."""

    def __init__(self, session: Any, health: ModelHealth) -> None:
        self._session = session
        self._health = health

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def stop_reason(self) -> str | None:
        return MODEL_DOWN if self._health.down() else self._session.stop_reason()

    def step(self, action: Any, info: dict[str, Any] | None = None) -> Any:
        from duck.play.session import PlayStopped
        if self._health.down():
            raise PlayStopped(MODEL_DOWN)
        return self._session.step(action, info)


class FallbackPolicy:
    """The model-driven policy while the server is healthy, the explorer otherwise: a game
    whose model fails (server down, or the policy raises) goes on with the explorer from
    where it is, instead of sitting idle."""

    name = "llm"

    def __init__(self, llm: Callable[[], Any], explorer: Callable[[], Any], health: ModelHealth) -> None:
        self.llm, self.explorer, self.health = llm, explorer, health

    def play(self, session: Any) -> None:
        from duck.game.source import GameError
        from duck.play.session import PlayStopped
        if self.health.ok():
            try:
                self.llm().play(_Watched(session, self.health))
                return
            except PlayStopped as e:
                if e.reason != MODEL_DOWN:
                    raise
                session.event("fallback", "the model server is down: the explorer takes over")
            except GameError:
                raise
            except Exception as e:  # a bug or a model failure must not idle the game
                session.event("fallback", f"the model policy failed ({type(e).__name__}: {e}): "
                                          "the explorer takes over", traceback.format_exc(limit=6))
        else:
            session.event("fallback", "no model server: the explorer plays")
        if session.stop_reason() is None:
            self.explorer().play(session)
