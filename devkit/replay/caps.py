"""The Duck's recorded action counts, enforced on our kernel by a kernel of the replay's own.

Each recorded call executed so many actions (the Duck's slow sandbox cut many action loops at
30 s), and our replays of its code (`duck replay`, with or without the agent loop) must stop
where it stopped. `ReplayKernel` gives each snippet it runs the cap recorded for it: its action
host (`CappedHost`, a subclass of duck.sandbox.actions.ActionHost) stops the call there, through
the host's own stop check (`should_stop`) and by ending the snippet as a guard would, and
answers to the Duck's action names. The
production kernel knows nothing of this; a live model's calls are never capped, and a live
model cannot cap its own (the caps are not in the tool calls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from duck.config import KernelConfig
from duck.play.session import Session
from duck.game.actions import MODEL_NAMES
from duck.sandbox.actions import ActionHost, CallActions, parse
from duck.sandbox.batch_guards import Guards
from duck.sandbox.host import CallResult, Kernel


@dataclass(frozen=True)
class RecordedCap:
    """The number of actions one recorded Duck call executed, and what reaching it meant for
    the Duck:

    * "kill": the Duck killed the call at 30 s, so its next `action()` ends it, whatever it asks;
    * "cap": its next action that would execute ends it;
    * "stop": the run's time was up: that action and every later one get the terminal result.
    """

    actions: int
    on_reach: Literal["kill", "cap", "stop"]

    @classmethod
    def of(cls, turn: dict[str, Any], call: dict[str, Any]) -> "RecordedCap":
        time_up = (turn.get("end") == "yield_stop_requested"
                   or "terminal or stopping" in (call.get("result") or ""))
        on_reach = "stop" if time_up else "kill" if call.get("timed_out") else "cap"
        return cls(int(call.get("n_actions", len(call.get("actions") or []))), on_reach)


def trace_caps(turns: list[dict[str, Any]]) -> list[tuple[str, RecordedCap]]:
    """(code, its recorded cap) of every recorded call with code, in the order the trace model
    (devkit.stub.models.TraceModel) sends them."""
    return [(c["code"], RecordedCap.of(t, c)) for t in turns for c in t.get("calls", [])
            if not c.get("code_missing")]


class CappedHost(ActionHost):
    """The action host of a replay: the current call stops at its recorded cap (`cap`, set per
    call); the Duck's run time limit shows in the results' timers as it did; and its names are
    the Duck's, which its code was written against: ACTION7 listed under that name, and
    ACTION7, UNDO, CLICK and clicks written as text refused as unknown (its sandbox played no
    name for ACTION7: recorded code that tried one met an error, not an UNDO)."""

    def __init__(self, session: Session, time_limit_s: float | None = None) -> None:
        super().__init__(session)
        self.time_limit_s = time_limit_s
        self.cap: RecordedCap | None = None
        self.call: CallActions | None = None
        self.time_up = False  # a "stop" cap was reached: the run's time is up for good
        self.capped = False  # a "kill" or "cap" cap refused an action of this batch

    def timers(self) -> dict[str, float | None]:
        out = super().timers()
        if self.time_limit_s is not None:
            out["time_remaining_seconds"] = max(0.0, self.time_limit_s - out["run_elapsed_seconds"])
        return out

    def names(self) -> list[str]:
        return ["ACTION7" if n == "UNDO" else n for n in super().names()]

    def _duck_unknown(self, items: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The Duck's error for the first name it did not know, if that comes before any other error."""
        for i, item in enumerate(items, start=1):
            raw = item.get("action")
            if str(raw or "").strip().upper() in ("ACTION7", "UNDO", "CLICK") or MODEL_NAMES.click_text(raw):
                return self.error_result(f"Unknown action at index {i}: {raw!r}")
            if parse([item])[1] is not None:
                return None  # an error both sandboxes give (our parse says it)
        return None

    def _reached(self) -> bool:
        return self.cap is not None and self.call is not None and len(self.call.executed) >= self.cap.actions

    def should_stop(self) -> bool:
        """Checked before each action: the cap first (a Duck call killed or cut there)."""
        if self._reached():
            if self.cap.on_reach == "stop":
                self.time_up = True
            else:
                self.capped = True
        return self.time_up or self.capped or super().should_stop()

    def run_batch(self, items: list[dict[str, Any]], call: CallActions, info: dict[str, Any] | None = None,
                  ) -> tuple[dict[str, Any], list[tuple[str, Any, int, int]], bool]:
        self.call, self.capped = call, False
        if self._reached() and self.cap.on_reach == "kill":  # any next action() ends a killed call
            return {}, [], True
        if (unknown := self._duck_unknown(items)) is not None:
            return unknown, [], False
        result, done, end = super().run_batch(items, call, info)
        if not self.capped:
            return result, done, end
        if not done:  # the Duck's call ended before this request played anything
            return {}, [], True
        result.pop("stop_reason", None)  # the Duck's call ended here, it did not stop on time
        return result, done, True


class ReplayKernel(Kernel):
    """A kernel that gives each snippet the cap recorded for it. `caps` holds (code, cap) per
    recorded call in order (`trace_caps`); a snippet takes the first entry with its code
    (entries before it were never run: a call skipped after an acting one); a snippet without
    an entry is not capped. The recorded runs had no host guards, so it takes none."""

    def __init__(self, session: Session, config: KernelConfig, caps: list[tuple[str, RecordedCap]], *,
                 time_limit_s: float | None = None, deny_read: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(session, config, deny_read=deny_read)
        self.host = CappedHost(session, time_limit_s)
        self.state.valid = self.host.names()
        self.caps = list(caps)

    def install_guards(self, guards: Guards) -> bool:
        return False

    def run(self, code: str, **kw: Any) -> CallResult:
        self.host.cap = None
        for i, (recorded, cap) in enumerate(self.caps):
            if recorded.rstrip() == code.rstrip():
                del self.caps[:i + 1]
                self.host.cap = cap
                break
        return super().run(code, **kw)
