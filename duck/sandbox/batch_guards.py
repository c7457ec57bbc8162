"""Host-side guards against wasted actions (FIELD §3, the field's harness): checked by the host
between two actions, so model code cannot catch, skip or undo them.

* `stop_on_no_effect`: a batch stops after an action that changed nothing away from the HUD
  border (duck.game.change); the snippet goes on, and at level 1 it may still act.
* `block_from_level` (2 by default, 0 off): from that level on, once an action of a call changed
  nothing away from the border, no further action of the call is played: the request is refused
  and the snippet ended (`StopSnippet`, a BaseException; swallowing it gains nothing, as every
  later request of the call is refused too).
* No action after GAME_OVER, a level change or a win in the same call (duck.sandbox.actions).

Each guard that fires puts one line in the action result (`guard`), which the tool message shows.
The agent installs them (`Kernel.install_guards`, from `agent.guards`); the replays of the Duck's
recorded code play every action asked, as the Duck's harness did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from duck.game.change import HUD_BORDER, changed_inside

if TYPE_CHECKING:
    from duck.config import AgentConfig


BLOCK_FROM_LEVEL = 2  # Franzen's: level 1 is for probing


@dataclass(frozen=True)
class Guards:
    stop_on_no_effect: bool = True
    block_from_level: int = BLOCK_FROM_LEVEL  # 0: never block
    border: int = HUD_BORDER

    @property
    def active(self) -> bool:
        return self.stop_on_no_effect or self.block_from_level > 0

    def ineffective(self, before: np.ndarray, after: np.ndarray) -> bool:
        return not changed_inside(before, after, self.border)

    def blocks(self, ineffective: str | None, level: int) -> bool:
        """Whether a further action of the call is refused (`ineffective`: the call's first
        action that changed nothing away from the border, or None)."""
        return ineffective is not None and 0 < self.block_from_level <= level

    def stop_line(self, action: str, index: int, left: int) -> str:
        return (f"guard: {action} (action {index} of this call) changed nothing away from the HUD border, "
                f"so the {left} later action{'s' if left != 1 else ''} of its batch {'were' if left != 1 else 'was'} "
                "not played")

    def block_line(self, ineffective: str, level: int) -> str:
        return (f"guard: not played and the call ended: from level {self.block_from_level} on, no action follows "
                f"one that changed nothing away from the HUD border in the same call ({ineffective}; "
                f"this is level {level})")


def from_config(agent: AgentConfig) -> Guards:
    """The guards an agent config asks for (`agent.guards`: both, or none)."""
    return Guards() if agent.guards else Guards(stop_on_no_effect=False, block_from_level=0)
