"""Token counts: the server's /tokenize per message (cached), estimates calibrated per kind where
it cannot count, and the stub server's vLLM-compatible /tokenize."""

from __future__ import annotations

import json
import random
import urllib.request

import numpy as np
import pytest

from duck.agent.context import Context
from duck.agent.turn import image_part, python_tool
from duck.config import ModelConfig
from duck.game.frames import grid_png
from duck.llm.client import ModelClient, ModelError
from duck.llm.tokens import PRIOR, Estimator, TokenCounter, features, png_size, vision_tokens
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer
from devkit.stub.tokenizer import count as stub_count


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/tokenize", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_image_tokens_follow_the_png_size():
    grid = np.zeros((64, 64), dtype=np.int8)
    for scale, tokens in ((4, 66), (10, 402)):  # 256 px: 8x8 + 2; 640 px (the field's 10x): 20x20 + 2
        url = image_part(grid_png(grid, scale))["image_url"]["url"]
        assert png_size(url) == (64 * scale, 64 * scale)
        assert vision_tokens(*png_size(url)) == tokens
        assert features({"role": "user", "content": [image_part(grid_png(grid, scale))]})[3] == tokens
    assert png_size("data:image/png;base64,AAAA") is None  # unreadable: the default size stands in


def test_the_estimator_learns_chars_per_token_per_kind_from_request_deltas():
    """Deltas of whole requests (several kinds mixed, as `usage` gives them) fit each kind's rate:
    a tokenizer at 4.0 / 2.5 / 1.2 chars per token for text / code / tool results, 6 per message."""
    rng = random.Random(0)
    true = np.array([1 / 4.0, 1 / 2.5, 1 / 1.2, 1.0, 6.0])
    est = Estimator()
    for _ in range(60):
        msgs = rng.randint(1, 4)
        x = np.array([rng.randint(0, 8000), rng.randint(0, 2000), rng.randint(0, 5000),
                      rng.choice([0, 66, 402]), msgs], dtype=float)
        est.observe(x, float(x @ true))
    rates = est.rates()
    assert rates["text_chars_per_token"] == pytest.approx(4.0, rel=0.03)
    assert rates["code_chars_per_token"] == pytest.approx(2.5, rel=0.03)
    assert rates["tool_chars_per_token"] == pytest.approx(1.2, rel=0.03)
    assert (est.w > 0).all() and not np.allclose(est.w, PRIOR)


def test_the_stub_serves_vllms_tokenize_consistent_with_its_usage():
    msgs = [{"role": "system", "content": "You play a game."},
            {"role": "user", "content": [{"type": "text", "text": "Board:"},
                                         image_part(grid_png(np.zeros((64, 64), dtype=np.int8), 10))]}]
    with StubServer(FixedModel([{"content": "ok"}])) as url:
        r = ModelClient(url, ModelConfig(name="stub", retries=0)).chat(msgs)
        got = _post(url, {"model": "stub", "messages": msgs})  # vLLM's default: with the generation prompt
        assert set(got) >= {"count", "max_model_len", "tokens"} and got["count"] == len(got["tokens"])
        assert got["count"] == r.prompt_tokens and got["count"] > 402  # the 640 px board's tokens included
        text = _post(url, {"model": "stub", "prompt": "hello world"})
        assert text["count"] == stub_count("hello world") == 2
        with pytest.raises(urllib.error.HTTPError) as e:  # what the template refuses: HTTP 400
            _post(url, {"model": "stub", "messages": [{"role": "system", "content": "s"}]})
        assert e.value.code == 400


def test_the_stand_in_tokenizer_costs_code_and_tool_results_more_than_english():
    english = "The red block moves one cell to the left when the player presses the arrow key. " * 20
    code = "for n in seg:\n    if n['color'] in ['W', 'M'] and n['pixels'] <= 25:\n        print(n['id'])\n" * 20
    tool = "Node 5: color=p, pixels=1, boundary=[[18, 38]], children=[]\nWWWWMMppGGcc\n" * 20
    cpt = {k: len(v) / stub_count(v) for k, v in (("english", english), ("code", code), ("tool", tool))}
    assert cpt["english"] > 3.4 and 2.0 < cpt["code"] < 2.9 and cpt["tool"] < 1.9
    assert cpt["english"] > cpt["code"] > cpt["tool"]


def test_counts_are_the_servers_cached_per_message_and_the_context_predicts_each_prompt():
    """The agent's context, counting through the client's /tokenize, predicts every request's
    prompt tokens as the server then counts them (usage), within a few tokens per message."""
    tools = python_tool()
    replies = [{"content": f"Plan {i}", "reasoning": "I think the blue cell is the key. " * (20 + 7 * i),
                "code": f"print(current_frame.level)  # {'x' * 40 * i}"} for i in range(8)]
    with StubServer(FixedModel(replies)) as url:
        client = ModelClient(url, ModelConfig(name="stub", retries=0))
        counter = client.counter(tools)
        ctx = Context("You play an ARC-AGI-3 game with a python tool.", 100_000, 1000, counter=counter)
        errors = []
        for i in range(8):
            if i % 2 == 0:
                ctx.begin_turn({"role": "user", "content": [
                    {"type": "text", "text": f"Step {i}. Valid actions: UP, DOWN."},
                    image_part(grid_png(np.full((64, 64), i % 16, dtype=np.int8), 4))]},
                    index=i, level=1, actions_before=i)
            predicted = ctx.estimate()
            messages = ctx.messages()
            r = client.chat(messages, tools)
            errors.append(abs(predicted - r.prompt_tokens) / len(messages))
            ctx.add(r.message())
            ctx.observe(len(messages), r.prompt_tokens, r.completion_tokens)
            ctx.add({"role": "tool", "tool_call_id": r.tool_calls[0].id, "content": "{'level': 1}\n" * (5 + i)})
        # off by a few tokens per message at most (template boundaries); exact once usage anchors it
        assert ctx.exact and max(errors) <= 4 and errors[1:] == [0.0] * 7
        asked = counter.asked
        assert counter.count(ctx.turns[0].messages[0]) == (ctx.turns[0].counts[0].tokens, True)
        assert counter.asked == asked  # the second time from the cache


def test_without_a_tokenize_route_counts_fall_back_to_estimates_and_stop_asking():
    calls = []

    def broken(messages):
        calls.append(messages)
        raise ModelError("/tokenize: HTTP 404")

    counter = TokenCounter(broken)
    results = [counter.count({"role": "user", "content": "hello " * (50 + i)}) for i in range(10)]
    assert all(not exact and n > 0 for n, exact in results)
    assert len(calls) == 3 and not counter.exact  # three failures, then estimates only
    # the real client against a server without the route: a ModelError, never a hang
    with pytest.raises(ModelError):
        ModelClient("http://127.0.0.1:9", ModelConfig(name="x", stall_s=2)).tokenize([{"role": "user", "content": "u"}])
