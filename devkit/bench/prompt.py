"""`duck bench prompt`: the size of what the model is told before it plays.

Renders the first request of a game (system prompt, the `python` tool's schema, the first turn
message on a bundled game's board) through the served model's chat template as vLLM applies it
(duck.llm.render: Qwen3.8's by default; `chat_template` says which file) and prints, as
JSON, per variant (the default config; `agent.world_model_tools` on; the A/B baseline of
experiments/baseline.toml): the system prompt's characters and tokens, the rendered request's
characters and tokens, and the first turn's text tokens and image tokens (the board at
duck.agent.turn.IMAGE_SCALE on Qwen3-VL's geometry: duck.llm.vision). Text tokens are the stub server's
count (its stand-in tokenizer, devkit.stub.tokenizer: no tokenizer ships here, so an
estimate with the field's characters per token by kind: English ~3.6-3.8, code ~2.4).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from duck.agent.turn import python_tool, system_prompt, turn_message
from duck.config import Config, load_config
from duck.game.images import png_size
from duck.llm.vision import image_tokens
from duck.llm.render import default_template
from devkit.stub.tokenizer import approx_tokens

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "experiments" / "baseline.toml"
BOARD_GAME = ROOT / "tests" / "games"


def _first_turn(cfg: Config) -> dict:
    from duck.game.source import GameSource
    source = GameSource.offline(BOARD_GAME)
    game = source.make(source.game_ids()[0])
    game.reset()
    session = SimpleNamespace(obs=game.obs, game=game)
    return turn_message(session, None, 0, True, 0)


def measure(cfg: Config) -> dict[str, int]:
    system = system_prompt(cfg)
    turn = _first_turn(cfg)
    text = "".join(p.get("text", "") for p in turn["content"] if p.get("type") == "text")
    images = [p for p in turn["content"] if p.get("type") == "image_url"]
    import base64
    pixels = [png_size(base64.b64decode(p["image_url"]["url"].split(",", 1)[1])) for p in images]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    rendered, _ = default_template().render(messages, python_tool())
    return {"system_chars": len(system), "system_tokens": approx_tokens(system),
            "request_chars": len(rendered), "request_tokens": approx_tokens(rendered),
            "first_turn_text_tokens": approx_tokens(text),
            "first_turn_image_tokens": sum(image_tokens(w, h) for w, h in pixels)}


def main(argv: list[str] | None = None) -> int:
    template = default_template()
    tools = load_config(overrides=["agent.world_model_tools=true"])
    baseline = load_config([str(BASELINE)]) if BASELINE.exists() else load_config()
    out = {"chat_template": str(template.path) if template.real else "approximation (template absent)",
           "without_tools": measure(load_config()), "with_tools": measure(tools), "baseline": measure(baseline)}
    out["added_tokens"] = out["with_tools"]["request_tokens"] - out["without_tools"]["request_tokens"]
    print(json.dumps(out, indent=1))
    return 0
