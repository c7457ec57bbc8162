"""The Duck's recorded action counts, as gates for our kernel: each recorded call executed so many
actions, and our replays of its code (`duck replay`, with or without the agent loop) must stop
where it stopped. The gate is the kernel's per-call hook (duck.sandbox.actions.Gate); a live
model's calls have none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from duck.sandbox.actions import GateStage, Verdict


@dataclass(frozen=True)
class RecordedCap:
    """The number of actions one recorded Duck call executed, as that call's gate in our
    kernel (duck.sandbox.actions.Gate), and what reaching it meant for the Duck:

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

    def __call__(self, executed: int, stage: GateStage) -> Verdict:
        if executed < self.actions:
            return "go"
        if self.on_reach == "kill":
            return "end"
        if stage == "request":
            return "go"  # answered as usual (an error, a `previous_...` result) until it acts
        return "stop" if self.on_reach == "stop" else "end"


def trace_caps(turns: list[dict[str, Any]]) -> list[tuple[str, RecordedCap]]:
    """(code, its recorded cap) of every recorded call with code, in the order the trace model
    (duck.testing.stub.models.TraceModel) sends them."""
    return [(c["code"], RecordedCap.of(t, c)) for t in turns for c in t.get("calls", [])
            if not c.get("code_missing")]
