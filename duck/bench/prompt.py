"""`python -m duck.bench prompt`: the size of the system prompt, with and without the world-model tools.

Renders the first request of a game (system prompt, the `python` tool's schema, an empty first
user turn) through the served model's chat template as vLLM applies it (duck.testing.stub.render:
Qwen3.8's by default; `chat_template` says which file) and prints, as JSON, per variant
(`agent.world_model_tools` false / true): the system prompt's characters, the rendered request's
characters, and its tokens as the stub server counts them (its stand-in tokenizer,
duck.testing.stub.tokenizer: no tokenizer ships here, so this is an estimate with the field's
characters per token by kind: English ~3.6-3.8, code ~2.4).
"""

from __future__ import annotations

import json

from duck.agent.turn import python_tool, render
from duck.config import load_config
from duck.testing.stub.render import approx_tokens, default_template


def measure(world_model_tools: bool) -> dict[str, int]:
    cfg = load_config()
    system = render("system.j2", call_timeout_s=cfg.kernel.call_timeout_s, output_chars=cfg.kernel.output_chars,
                    world_model_tools=world_model_tools)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "."}]
    text, _ = default_template().render(messages, python_tool(cfg.kernel.output_chars))
    return {"system_chars": len(system), "system_tokens": approx_tokens(system),
            "request_chars": len(text), "request_tokens": approx_tokens(text)}


def main(argv: list[str] | None = None) -> int:
    template = default_template()
    out = {"chat_template": str(template.path) if template.real else "approximation (template absent)",
           "without_tools": measure(False), "with_tools": measure(True)}
    out["added_tokens"] = out["with_tools"]["request_tokens"] - out["without_tools"]["request_tokens"]
    print(json.dumps(out, indent=1))
    return 0
