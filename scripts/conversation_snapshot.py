"""Play scripted games through the default agent config and save what the model saw, to diff
two versions of the code (issue 40: "the conversations of a scripted game are identical").

    .venv/bin/python scripts/conversation_snapshot.py OUT_DIR
    .venv/bin/python scripts/conversation_snapshot.py --compare BEFORE_DIR AFTER_DIR  (or diff -r)

Each scenario (the scripts of tests/test_what_the_model_sees.py on zt01 and zb01, plus zs01
with the level memory, a trim, a kernel error and the model's `notes` dict) is played by the
real agent on the real kernel against the stub server. OUT_DIR/<scenario>.json holds the
requests the server received and the conversation file's lines, with what differs from run to
run taken out: times, latencies, the stub's URL and tool-call ids (numbered in order), and every
image replaced by a hash of its bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from duck.agent.loop import AgentPolicy  # noqa: E402
from duck.config import load_config  # noqa: E402
from duck.game.source import GameSource  # noqa: E402
from duck.play.conversation import read_conversation  # noqa: E402
from duck.play.session import play_game  # noqa: E402
from devkit.stub.models import FixedModel  # noqa: E402
from devkit.stub.server import StubServer  # noqa: E402

BUNDLED, CLICKS = ROOT / "tests" / "games", ROOT / "tests" / "fixtures" / "click_games"
ZS01 = ["action(['DOWN', 'LEFT', 'UP', 'RIGHT'])", "action(['RIGHT', 'DOWN', 'LEFT', 'DOWN', 'RIGHT', 'UP'])"]


def _r(code: str, content: str = "ok", reasoning: str = "") -> dict[str, Any]:
    return {"content": content, "code": code, **({"reasoning": reasoning} if reasoning else {})}


SCENARIOS: dict[str, tuple[Path, str, list[dict[str, Any]], list[str]]] = {
    "zt01-animation": (CLICKS, "zt01", [_r("action('MOUSE(row=52, col=28)')"), _r("print(len(last_animation))")], []),
    "zb01-game-over": (BUNDLED, "zb01", [
        _r("for a in ['UP'] * 18:\n    action(a)"),
        _r("action(['RIGHT', 'RIGHT', 'DOWN', 'DOWN', 'DOWN', 'RIGHT', 'RIGHT', 'UP', 'UP', 'RIGHT', 'RIGHT', "
           "'DOWN', 'DOWN'])"),
        _r("action('DOWN')", content="Rule: walk the maze to the green cell\nbefore the bar empties\n\nx"),
        _r("print(1)")], []),
    "zb01-batch": (BUNDLED, "zb01", [_r("action(['RIGHT', 'RIGHT', 'UP'])"), _r("print(1)")], []),
    "zb01-errors-and-notes": (BUNDLED, "zb01", [
        _r("notes['Plan'] = 'go right'\nprint(current_frame.step, valid_actions)", content="Plan: look first"),
        _r("1/0"), _r("def f(:\n  pass"), _r("result = {'a': [1, 2]}\naction(['RIGHT', 'LEFT', 'FLY'])"),
        _r("print('x' * 9000)\naction('RIGHT')\naction('UP')"), _r("action('LEFT')"), _r("print(1)")], []),
    "zs01-memory-and-trim": (BUNDLED, "zs01", [_r(ZS01[0]), _r(ZS01[1], content="Rule: slide to green.")]
                             + [_r("action('DOWN')", content="look", reasoning="r" * 6000) for _ in range(6)],
                             ["agent.context_tokens=9000", "model.max_output_tokens=500"]),
}
VOLATILE = {"t", "latency_s", "first_token_s", "url", "urls", "wall_ms"}


def _clean(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items() if k not in VOLATILE}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    if isinstance(v, str) and v.startswith("data:image/png;base64,"):
        return "png:" + hashlib.sha256(v.encode()).hexdigest()[:16]
    return v


def play(name: str, out: Path) -> None:
    games, prefix, replies, more = SCENARIOS[name]
    server = StubServer(FixedModel(replies), keep_prompts=True)
    source = GameSource.offline(games)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith(prefix))
    cfg = load_config(overrides=["model.retries=0", "model.backoff_s=0.01", "model.name=stub", "agent.fallback=null",
                                 "agent.failures_before_fallback=1", *more])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "records" / f"{game_id}.jsonl"
        with server as url:
            play_game(source, game_id, AgentPolicy(0, cfg, model_url=url), max_actions=200, record_path=path)
        conv = read_conversation(next((Path(tmp) / "conversations").glob(f"{game_id}.jsonl*")))
    doc = {"received": _clean([p["messages"] for p in server.prompts]), "conversation": _clean(conv.lines)}
    text = json.dumps(doc, indent=1, sort_keys=True)
    ids: dict[str, str] = {}  # the stub's random tool-call ids, numbered in order of appearance
    text = re.sub(r"call_\d+", lambda m: ids.setdefault(m.group(0), f"call#{len(ids)}"), text)
    (out / f"{name}.json").write_text(text)


def compare(a: Path, b: Path) -> None:
    """Per scenario: whether the requests are identical, and the conversation lines but the
    `start` line and the `notes` lines (what issue 40 changed on purpose), and the notes lines."""
    for f in sorted(a.glob("*.json")):
        x, y = json.loads(f.read_text()), json.loads((b / f.name).read_text())
        rest = [[ln for ln in d["conversation"] if ln["type"] not in ("start", "notes")] for d in (x, y)]
        notes = [sum(ln["type"] == "notes" for ln in d["conversation"]) for d in (x, y)]
        print(f"{f.stem}: {len(x['received'])} requests identical: {x['received'] == y['received']}; other lines "
              f"identical: {rest[0] == rest[1]}; start line identical: {x['conversation'][0] == y['conversation'][0]}; "
              f"notes lines {notes[0]} -> {notes[1]}")


def main() -> None:
    if sys.argv[1] == "--compare":
        return compare(Path(sys.argv[2]), Path(sys.argv[3]))
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in (sys.argv[2:] or SCENARIOS):
        play(name, out)
        print(name)


if __name__ == "__main__":
    main()
