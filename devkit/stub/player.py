"""`PlayerModel`: a scripted model that plays like a model, for load tests (issue 17).

Every game it is given makes progress, through the agent's real tool and kernel, with replies
shaped like the Duck's: each turn is two calls, one that looks (reads the segmentation, diffs
the board, prints compact facts) and one that acts (small objects to click where the game takes
clicks, else moves not yet tried on this board; two actions per turn, as the Duck's ~137 actions
in ~74 calls). A reply's total tokens are drawn from a lognormal (median `median_tokens`, spread
`sigma`) seeded by the call's index in its conversation: every game gets the same sequence of
sizes, so a game that falls behind the others shows starvation, not a run of long replies. Its
sizes and notes: docs/workbench.md, "The stub server".

One conversation per `X-Duck-Session` (the agent sends `game:pass`); the model keeps no other
state, so any number of games can share one server.
"""

from __future__ import annotations

import json
import math
import random
import threading
from typing import Any

from duck.seeds import stable_hash
from devkit.stub.models import _filler
from devkit.stub.tokenizer import CHARS_PER_TOKEN

LOOK = """seg = current_frame.segmentation
nodes = seg['nodes']
small = sorted((n for n in nodes if n['pixels'] <= 64), key=lambda n: (n['pixels'], n['id']))
changed = 0 if previous_frame is None else int((previous_frame.grid != current_frame.grid).sum())
colours = {}
for n in nodes:
    colours[n['color']] = colours.get(n['color'], 0) + n['pixels']
print(f"level {current_frame.level} step {current_frame.step}: {len(nodes)} regions, {len(small)} small, "
      f"{changed} cells changed; valid: {valid_actions}")
print('colours:', sorted(colours.items(), key=lambda kv: -kv[1])[:6])
print('small:', [(n['id'], n['color'], n['pixels'], n['boundary'][0]) for n in small[:8]])"""

ACT = """import random
if '_tried' not in globals():
    _tried, _rng = {{}}, random.Random({seed})
_board = hash(current_frame.grid.tobytes())
_done = _tried.setdefault(_board, set())
_names = [str(a) for a in valid_actions if str(a).upper() != 'RESET']
_moves = [a for a in _names if not a.upper().startswith('MOUSE')]
_clicks = []
if any(a.upper().startswith('MOUSE') for a in _names):
    for n in sorted(current_frame.segmentation['nodes'], key=lambda n: (n['pixels'], n['id'])):
        if n['pixels'] <= 256:
            r, c = n['boundary'][0]
            _clicks.append({{'action': 'MOUSE', 'row': int(r), 'col': int(c)}})
    _clicks.append({{'action': 'MOUSE', 'row': _rng.randrange(64), 'col': _rng.randrange(64)}})
_options = [a for a in _moves + _clicks if repr(a) not in _done] or _moves + _clicks or ['UP']
_batch = [_options[0] if _clicks and _options[0] in _clicks else _rng.choice(_options) for _ in range({n})]
for a in _batch:
    _done.add(repr(a))
result = action(_batch)"""


class PlayerModel:
    """Looks, then acts, turn after turn, in every conversation it is given."""

    def __init__(self, median_tokens: float = 800.0, sigma: float = 0.5, actions_per_turn: int = 2,
                 max_tokens: int = 3500) -> None:
        self.median_tokens, self.sigma = median_tokens, sigma
        self.actions_per_turn, self.max_tokens = actions_per_turn, max_tokens
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.replies: list = []  # (for the command line's banner)

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        session = request.get("_session", "default")
        with self.lock:
            k = self.calls.get(session, 0)
            self.calls[session] = k + 1
        # The k-th reply has the same size in every conversation: games then differ only by
        # what the harness and the server do to them (a game left behind is starved, not unlucky).
        rng = random.Random(stable_hash("player", k))
        tokens = min(self.max_tokens, max(60.0, rng.lognormvariate(math.log(self.median_tokens), self.sigma)))
        # Where the turn stands: after the look's output, act; otherwise (a new turn, a
        # corrective, an act that failed) look first.
        messages = request.get("messages") or [{}]
        mine = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
        looked = any("print('colours:'" in str((c.get("function") or {}).get("arguments"))
                     for c in mine.get("tool_calls") or [])
        acting = messages[-1].get("role") == "tool" and looked
        if acting:
            code = ACT.format(seed=stable_hash("player-rng", session), n=self.actions_per_turn)
            content = (f"Plan: try {self.actions_per_turn} actions not yet tried on this board "
                       f"(call {k}).\nOpen questions: which of them changes the board?")
        else:
            code = LOOK
            content = (f"World model: regions and colours as the segmentation lists them (call {k}).\n"
                       "Action model: compare the board with the previous one after each action.")
        visible = len(content) + len(json.dumps({"code": code}))
        reasoning = max(0, round(tokens * CHARS_PER_TOKEN) - visible)
        return {"content": content, "reasoning": _filler(reasoning, k), "code": code}
