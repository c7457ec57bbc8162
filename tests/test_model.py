"""The model client over real HTTP (the official openai package) against the stub server."""

from __future__ import annotations

import socket
import time

import pytest

from duck.config import ModelConfig
from duck.llm.client import (ContextOverflow, ModelClient, ModelError, Reply, ToolCall, join_urls, list_models, pick_url, request_seed)
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer

MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def _capture(replies):
    """A FixedModel and the request bodies it answered."""
    model = FixedModel(replies)
    return model, model.requests


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}"


def test_stream_returns_content_reasoning_tool_call_and_usage():
    model, seen = _capture([{"content": "Plan: go", "reasoning": "think " * 200, "code": "print(1)"}])
    with StubServer(model) as url:
        r = ModelClient(url, ModelConfig(name="stub")).chat(MSGS, seed=7)
    assert r.content == "Plan: go" and r.reasoning == "think " * 200
    assert r.tool_calls[0].name == "python" and r.tool_calls[0].arguments == '{"code": "print(1)"}'
    assert r.finish_reason == "tool_calls" and r.cut is None
    assert r.prompt_tokens > 0 and r.completion_tokens > 0 and r.cached_tokens == 0
    body = seen[0]
    assert body["seed"] == 7 and body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_qwen_sampling_and_thinking_switch_reach_the_server():
    model, seen = _capture([{"content": "a"}, {"content": "b"}])
    with StubServer(model) as url:
        ModelClient(url, ModelConfig(name="m", temperature=0.6, top_p=0.95, top_k=20, thinking=True,
                                  preserve_thinking=True, max_output_tokens=1234)).chat(MSGS)
        ModelClient(url, ModelConfig(name="m", temperature=0.7, top_p=0.8, thinking=False,
                                  preserve_thinking=None)).chat(MSGS)
    a, b = seen
    assert (a["temperature"], a["top_p"], a["top_k"], a["max_tokens"]) == (0.6, 0.95, 20, 1234)
    assert a["chat_template_kwargs"] == {"enable_thinking": True, "preserve_thinking": True}
    assert b["chat_template_kwargs"] == {"enable_thinking": False}


def test_reasoning_goes_back_under_both_field_names():
    msg = Reply(content="c", reasoning="why", tool_calls=[ToolCall("id1", "python", '{"code": "x"}')]).message()
    assert msg["reasoning"] == "why" and msg["reasoning_content"] == "why"
    assert msg["tool_calls"][0]["function"] == {"name": "python", "arguments": '{"code": "x"}'}
    assert "reasoning" not in Reply(content="c").message()


def test_a_timeout_keeps_what_was_received():
    # (a 30 s stall: the clock tells our 1 s limit from the stall with room for a busy machine)
    model = FixedModel([{"reasoning": "partial thought " * 50, "stall_s": 30, "content": "late",
                         "code": "x=1"}])
    with StubServer(model) as url:
        t0 = time.monotonic()
        r = ModelClient(url, ModelConfig(name="stub", timeout_s=1.0, stall_s=20.0, retries=0)).chat(MSGS)
    assert time.monotonic() - t0 < 15  # cut at our ~1 s limit, not after the 30 s stall nor at stall_s
    assert r.cut == "timeout" and r.reasoning.startswith("partial thought") and r.tool_calls == []


@pytest.mark.parametrize("fail", ["error", "drop", "end"])
def test_a_stream_that_breaks_mid_reply_is_a_failure_retried_not_a_cut_reply(fail):
    """Issue 35: an error chunk (vLLM 0.33's, on an engine failure), a reset connection or a
    body that ends without a finish reason, after the first tokens: the partial reply is thrown
    away and the request retried (it was kept as `cut="timeout"`, "the time limit", or taken
    for a whole reply without a tool call)."""
    broken = {"reasoning": "partial thought " * 50, "content": "x", "code": "x=1", "fail": fail}
    model = FixedModel([broken, {"reasoning": "whole", "content": "ok", "code": "x=2"}])
    with StubServer(model) as url:
        r = ModelClient(url, ModelConfig(name="stub", retries=1, backoff_s=0.01)).chat(MSGS)
    assert (r.content, r.reasoning, r.cut, r.attempts) == ("ok", "whole", None, 2)
    with StubServer(FixedModel([broken])) as url:
        with pytest.raises(ModelError) as e:
            ModelClient(url, ModelConfig(name="stub", retries=0)).chat(MSGS)
    assert e.value.cut == "error" and e.value.retryable and "mid-reply (800 characters received, not kept)" in str(e.value)


def test_a_stall_before_the_time_limit_is_a_failure_not_a_cut():
    """No byte for `stall_s` while our own limit is still far: the server went silent (a
    wedge), a failure like a broken connection; only our limit keeps a partial reply."""
    model = FixedModel([{"reasoning": "partial thought " * 50, "stall_s": 30, "content": "late",
                         "code": "x=1"}])
    with StubServer(model) as url:
        t0 = time.monotonic()
        with pytest.raises(ModelError) as e:
            ModelClient(url, ModelConfig(name="stub", timeout_s=60.0, stall_s=0.5, retries=0)).chat(MSGS)
    assert time.monotonic() - t0 < 15 and e.value.cut == "error" and "APITimeoutError" in str(e.value)
    with StubServer(FixedModel([{"stall_s": 3, "content": "late"}])) as url:  # our limit, nothing received yet
        with pytest.raises(ModelError) as e:
            ModelClient(url, ModelConfig(name="stub", timeout_s=1.0, stall_s=5.0, retries=0)).chat(MSGS)
    assert e.value.retryable and e.value.cut is None and "before any token" in str(e.value)


def test_a_cut_reply_keeps_only_the_tail_of_its_thinking_marked_as_cut():
    thought = "".join(f"step {k}: the red cell moved left.\n" for k in range(600))  # ~20K characters
    model = FixedModel([{"reasoning": thought, "content": "", "finish_reason": "length"},
                        {"reasoning": thought, "content": "Plan: go", "code": "x=1"},
                        {"reasoning": thought, "stall_s": 3, "content": "late"}])
    with StubServer(model) as url:
        c = ModelClient(url, ModelConfig(name="stub", retries=0, cut_thinking_chars=3000, timeout_s=1.0, stall_s=5.0))
        cut, whole, late = c.chat(MSGS), c.chat(MSGS), c.chat(MSGS)
    assert cut.cut == "length" and cut.reasoning == thought  # the reply itself holds all it received
    msg = cut.message("[thinking cut]")
    kept = msg["reasoning"]
    assert kept.startswith("[thinking cut]\nstep ") and thought.endswith(kept.removeprefix("[thinking cut]\n"))
    assert len(kept) <= 3000 + len("[thinking cut]\n") and msg["reasoning_content"] == kept
    assert cut.thinking_dropped == len(thought) - len(kept.removeprefix("[thinking cut]\n")) > 16_000
    assert cut.stats()["thinking_dropped"] == cut.thinking_dropped
    assert whole.cut is None and whole.message()["reasoning"] == thought and whole.thinking_dropped == 0
    assert late.cut == "timeout" and late.reasoning == thought  # the time limit cuts it the same way
    assert late.thinking_dropped > 16_000 and len(late.message()["reasoning"]) <= 3000 + len("…\n")
    # 0 keeps all of a cut reply's thinking (the old behaviour)
    assert Reply(reasoning=thought, cut="length", keep_thinking=0).message()["reasoning"] == thought


def test_retries_with_backoff_then_succeed():
    model = FixedModel([{"status": 500}, {"status": 503}, {"content": "ok"}])
    with StubServer(model) as url:
        r = ModelClient(url, ModelConfig(name="stub", retries=3, backoff_s=0.01)).chat(MSGS)
    assert r.content == "ok" and r.attempts == 3


def test_failover_to_the_next_url():
    model = FixedModel([{"content": "from the live one"}])
    with StubServer(model) as url:
        c = ModelClient([_dead_url(), url], ModelConfig(name="stub", retries=2, backoff_s=0.01), start=0)
        r = c.chat(MSGS)
    assert r.content == "from the live one" and r.url == url and r.attempts == 2


def test_client_errors_are_not_retried_and_context_overflow_is_recognised():
    model = FixedModel([{"status": 400, "error": "This model's maximum context length is 40960 tokens"},
                        {"status": 404, "error": "no such model"}, {"content": "never reached"}])
    with StubServer(model) as url:
        c = ModelClient(url, ModelConfig(name="stub", retries=3, backoff_s=0.01))
        with pytest.raises(ContextOverflow):
            c.chat(MSGS)
        with pytest.raises(ModelError) as e:
            c.chat(MSGS)
        assert e.value.status == 404 and not e.value.retryable


def test_all_retries_failing_raises_a_retryable_error():
    with StubServer(FixedModel([{"status": 502}], loop=True)) as url:
        with pytest.raises(ModelError) as e:
            ModelClient(url, ModelConfig(name="stub", retries=2, backoff_s=0.01)).chat(MSGS)
    assert e.value.retryable


def test_seeds_are_stable_and_distinct():
    assert request_seed(0, "ls20", 3, 5, 0) == request_seed(0, "ls20", 3, 5, 0)
    seeds = {request_seed(0, g, p, t, 0) for g in ("a", "b") for p in range(3) for t in range(50)}
    assert len(seeds) == 300 and all(0 <= s < 2**31 for s in seeds)


def test_urls_spread_games_and_parse():
    urls = ["http://a", "http://b", "http://c"]
    assert pick_url(urls, "x", index=4) == 1
    spread = {pick_url(urls, f"game{i}") for i in range(30)}
    assert spread == {0, 1, 2}
    assert join_urls("http://a, http://b") == ["http://a", "http://b"]
    assert join_urls(None) == []


def test_list_models():
    with StubServer(FixedModel([]), model_name="Qwen3.6-27B-FP8") as url:
        assert list_models(url) == ["Qwen3.6-27B-FP8"]
