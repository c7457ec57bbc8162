"""The stub server's latency model and /metrics, over real HTTP with the real client."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest

from duck.config import profiles
from duck.config import ModelConfig
from duck.llm import metrics as vllm_metrics
from duck.llm.client import ModelClient
from devkit.stub.latency import Engine, LatencyModel
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer


def test_the_model_meets_the_fields_figures():
    m = LatencyModel()
    assert m.stream_tps(1) == pytest.approx(169.0) == m.total_tps(1)
    assert m.total_tps(10) == pytest.approx(672.8, rel=1e-3)  # FIELD §4: ~700 at 10 streams
    assert 880 < m.total_tps(16) < 1150  # ~900-1,150 at 14-16
    assert m.stream_tps(16) < m.stream_tps(10) < m.stream_tps(1)  # streams share the GPU
    assert m.total_tps(16) > m.total_tps(10) > m.total_tps(1)  # but the total still grows
    plan = profiles.plan("flash-next")
    assert (m.max_num_seqs, m.kv_tokens, m.prefill_tps) == (plan.max_num_seqs, plan.kv_tokens, 11000.0)
    assert m.tokens_per_chunk == 2.7 and LatencyModel(chunk_tokens=16).tokens_per_chunk == 16  # an MTP step, or the interval
    assert LatencyModel.parse("speed=20,kv_tokens=1000") == LatencyModel(speed=20.0, kv_tokens=1000)
    assert LatencyModel.parse("kv_tokens=none").kv_tokens is None
    with pytest.raises(ValueError, match="unknown"):
        LatencyModel.parse("sped=2")
    with pytest.raises(ValueError, match="faster"):
        LatencyModel(decode_exponent=1.2)  # more streams would make each one faster


def _reply(tokens: int) -> dict:
    return {"content": "ok", "code": "print(1)", "completion_tokens": tokens}


def _concurrent(url: str, n: int) -> list[float]:
    """Seconds each of `n` requests took, all sent at once (clients made beforehand)."""
    clients = [ModelClient(url, ModelConfig(name="stub", retries=0), session=f"g{i}") for i in range(n)]
    start, out = threading.Barrier(n), [0.0] * n

    def chat(i: int) -> None:
        start.wait()
        t0 = time.monotonic()
        clients[i].chat([{"role": "user", "content": f"go {i}"}])
        out[i] = time.monotonic() - t0

    threads = [threading.Thread(target=chat, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def _overhead(n: int, tokens: int) -> float:
    """The median time of `n` such requests at once to a server without the latency model: what
    HTTP and the client add on this machine now (a busy machine adds more), to take off."""
    with StubServer(FixedModel([_reply(tokens)], loop=True)) as url:
        return sorted(_concurrent(url, n))[n // 2]


def test_decode_slows_each_stream_as_streams_are_added():
    # 400 tokens at 1.5x speed: alone ~1.6 s (169 tokens/s); 24 at once ~5.6 s each (169 x 24^-0.4).
    # (Never faster than the model; slower by the HTTP and client overhead, measured beside it.)
    m = LatencyModel(speed=1.5, chunk_tokens=16, max_num_seqs=32, kv_tokens=None)
    with StubServer(FixedModel([_reply(400)], loop=True), latency=m) as url:
        alone = _concurrent(url, 1)[0]
        crowd = sorted(_concurrent(url, 24))
    alone_net, crowd_net = alone - _overhead(1, 400), crowd[len(crowd) // 2] - _overhead(24, 400)
    expected = m.stream_tps(1) / m.stream_tps(24)
    one = 400 / (m.stream_tps(1) * m.speed)
    assert 0.9 * one < alone and alone_net < 1.6 * one
    assert crowd_net / alone_net == pytest.approx(expected, rel=0.35)


def test_uncached_prompt_tokens_cost_prefill_time_and_a_cached_prefix_is_free():
    m = LatencyModel(speed=4.0, prefill_tps=4000.0)
    big = [{"role": "system", "content": "rules " * 8000}, {"role": "user", "content": "first"}]
    with StubServer(FixedModel([_reply(8)], loop=True), latency=m) as url:
        client = ModelClient(url, ModelConfig(name="stub", retries=0), session="one")
        first = client.chat(big)
        second = client.chat(big + [first.message(), {"role": "tool", "tool_call_id": first.tool_calls[0].id,
                                                      "content": "1"}])
    assert first.cached_tokens == 0 and second.cached_tokens > 0.9 * second.prompt_tokens
    assert first.first_token_s == pytest.approx(first.prompt_tokens / (4000 * 4.0), rel=0.5)
    assert second.first_token_s < first.first_token_s / 3


def test_requests_wait_for_room_in_the_kv_cache():
    # Each request holds ~1,000 tokens; the cache holds 1,500: the second waits for the first.
    m = LatencyModel(speed=4.0, kv_tokens=1500, chunk_tokens=16)
    with StubServer(FixedModel([_reply(1000)], loop=True), latency=m) as url:
        times = sorted(_concurrent(url, 2))
    one, extra = 1000 / (m.stream_tps(1) * m.speed), _overhead(2, 1000)
    assert times[0] > 0.9 * one and times[0] - extra == pytest.approx(one, rel=0.35)
    assert times[1] > 1.8 * one and times[1] - extra == pytest.approx(2 * one, rel=0.35)


def test_metrics_use_vllm_names_and_count_what_was_served():
    with StubServer(FixedModel([_reply(50)], loop=True), kv_tokens=32_000) as url:
        before = vllm_metrics.fetch(url)
        client = ModelClient(url, ModelConfig(name="stub", retries=0), session="m")
        r1 = client.chat([{"role": "user", "content": "a " * 500}])
        r2 = client.chat([{"role": "user", "content": "a " * 500}, r1.message(),
                          {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "x"}])
        text = urllib.request.urlopen(url + "/metrics").read().decode()
        after = vllm_metrics.summary(text)
    assert "vllm:prefix_cache_queries_total{" in text and "vllm:cache_config_info{" in text
    d = vllm_metrics.delta(before, after)
    assert d["prefix_cache_queries"] == r1.prompt_tokens + r2.prompt_tokens
    assert d["prefix_cache_hits"] == r1.cached_tokens + r2.cached_tokens > 0
    assert d["generation_tokens"] == 100
    assert after["kv_cache_tokens"] == 32_000


def test_every_prefill_ends_whatever_the_share_of_the_prefill_rate():
    # At 1000x speed with 21 prefilling, these token counts left the old loop (`while left > 0`)
    # with a floating-point residue that never reached 0: the request spun for ever.
    engine = Engine(LatencyModel(speed=1e3))
    for uncached in (1, 2, 16, 100, 107, 114, 121, 128, 195, 200, 209, 214, 2999):
        engine.prefilling = 20
        states: list[tuple[int, int]] = []

        def one() -> None:
            with engine.request(uncached, 0, 1) as stream:
                stream.prefill()
                states.append((engine.prefilling, engine.decoding))

        t = threading.Thread(target=one, daemon=True)
        t.start()
        t.join(5)
        assert not t.is_alive(), f"the prefill of {uncached} tokens never ended"
        assert states == [(20, 1)]  # prefilled, then decoding
    assert engine.running == 0 and engine.decoding == 0
