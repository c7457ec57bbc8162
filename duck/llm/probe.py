"""The probe before a run on a hosted provider: one small request as the agent makes them (the
python tool, an image, the profile's sampling fields) that must come back with a tool call, so
that what would fail every game is one line before anything plays (`ProviderError`): a missing
or refused key, no credit, a refused field, no tool calls or images, a cost cap with no cost.
"""

from __future__ import annotations

from duck.config import ModelConfig
from duck.llm.client import ModelClient, ModelError
from duck.llm.provider import ProviderError, api_key

# A 1x1 PNG: the probe's image (whether the provider takes images at all).
PROBE_PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
             "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
PROBE_TOOL = [{"type": "function", "function": {
    "name": "python", "description": "Run Python code.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]
PROBE = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PROBE_PNG}},
                                      {"type": "text",
                                       "text": "Call the python tool with the code print(1)."}]}]


def preflight(url: str, cfg: ModelConfig) -> None:
    """One probe request (module docstring); raises ProviderError with the one line to print.
    Connection failures pass through as ModelError (the caller's "no server answers")."""
    probe = cfg.model_copy(update={"max_output_tokens": min(cfg.max_output_tokens, 2048), "retries": 1})
    client = ModelClient(url, probe)  # (a missing key variable raises here)
    where = f"the provider at {url}"
    try:
        reply = client.chat(PROBE, PROBE_TOOL, seed=0)
    except ModelError as e:
        if e.status is None or e.status >= 500 or e.status in (408, 429):
            raise  # unreachable or busy: not a verdict on the provider
        raise ProviderError(f"{where} refused the agent's request: "
                            f"{_why(e.status, str(e), cfg.api_key_env)}") from None
    if cfg.max_cost and reply.cost is None:
        raise ProviderError(f"model.max_cost is set but {where} reports no cost in its usage: cap the tokens "
                            "with model.max_total_tokens instead")
    if not reply.tool_calls and reply.finish_reason != "length" and not reply.cut:
        raise ProviderError(f"{where} answered {cfg.name} without a tool call (the probe asked for one): the "
                            "agent needs a model served with tool-call support")


def check(cfg: ModelConfig) -> str | None:
    """Before a run: None when a URL of `model.urls` serves the agent (the probe), else why no
    server answers (one line); raises ProviderError when one answers but cannot serve it."""
    from duck.llm.client import ModelError
    api_key(cfg)  # a missing variable is said before any request
    problems = []
    for url in cfg.urls:
        try:
            preflight(url, cfg)
            return None
        except ModelError as e:
            problems.append(f"{url} ({e})")
    return f"--policy llm: no model server answers at {'; '.join(problems)}" if problems else \
        "--policy llm needs a model server: --model-url URL (or model.urls)"


def _why(status: int, message: str, variable: str) -> str:
    message = message.split(" - ", 1)[-1]  # (the openai client's "HTTP 400: Error code: 400 - " prefix)
    text = message.lower()
    if status in (401, 403):
        return f"HTTP {status}: the key in ${variable or '(none: model.api_key_env)'} is refused ({message[:200]})"
    if status == 402:
        return f"HTTP 402: no credit left on the key ({message[:200]})"
    if "image" in text or "vision" in text or "multimodal" in text:
        return f"the model takes no images, and the agent shows the board as one ({message[:200]})"
    if "tool" in text or "function" in text:
        return f"the model takes no tool calls, and the agent acts through one ({message[:200]})"
    if any(k in text for k in ("unrecognized", "unknown", "not permitted", "extra", "unsupported")):
        return f"it refuses a field the client sends ({message[:240]}); the hosted profile sends standard OpenAI fields only"
    return message[:300]
