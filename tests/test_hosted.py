"""The model agent on a hosted OpenAI-compatible provider (the `hosted` profile), through the
stub answering as a strict provider would (`duck stub-server --hosted`): the real `duck play`,
the real openai client, real HTTP. The key comes from the environment and is found nowhere
in the run folder; usage and cost are in the records; a 429 is waited out; the spend guard
stops a run like Ctrl-C and `--resume` finishes it; each bad input is one line before
anything plays, or a clean stop with the reason mid-run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BUNDLED
from duck.config import ConfigError, load_config
from duck.llm import probe, provider
from duck.llm.client import ModelClient, ModelError
from duck.play.record import read_records
from devkit.stub.hosted import Hosted
from devkit.stub.models import FixedModel
from devkit.stub.player import PlayerModel
from devkit.stub.server import StubServer

DUCK = str(Path(sys.executable).parent / "duck")
KEY = "sk-test-hosted-7f3a9c"  # what the provider accepts; must appear in no file of a run
MSGS = [{"role": "user", "content": "u"}]


def env(key: str | None = KEY, **more: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("DUCK_") and k != "OPENAI_API_KEY"}
    if key is not None:
        e["OPENAI_API_KEY"] = key
    return e | more


def play(url: str, out: Path, *args: str, sets: tuple[str, ...] = (), key: str | None = KEY,
         resume: bool = False) -> subprocess.CompletedProcess:
    cmd = [DUCK, "play", "--resume", "--out", str(out)] if resume else \
        [DUCK, "play", "--games", str(BUNDLED), "--policy", "llm", "--model-url", url, "--out", str(out), *args,
         "--set", "model.profile=hosted", "model.backoff_s=0.05", *sets]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env(key))


def every_file(folder: Path) -> str:
    """Everything written under a run folder, gzipped files read through."""
    return "".join((gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()).decode("utf-8", "replace")
                   for p in sorted(folder.rglob("*")) if p.is_file())


def test_the_agent_plays_through_a_hosted_provider_with_its_key_from_the_environment(tmp_path):
    hosted = Hosted(api_key=KEY, rate_limit=5, retry_after_s=1.0)
    with StubServer(PlayerModel(), hosted=hosted) as url:
        t0 = time.monotonic()
        r = play(url, tmp_path / "run", "--only", "zs01", "--max-actions", "12")
        took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    rec = read_records(tmp_path / "run")[0]
    assert rec.end["reason"] == "max_actions" and len(rec.actions) == 12
    model = [e["data"] for e in rec.events if e["kind"] == "model"]
    assert model and all(m["usage"]["total_tokens"] == m["prompt_tokens"] + m["completion_tokens"] for m in model)
    assert all(m["cost"] > 0 and m["cost"] == m["usage"]["cost"] for m in model)  # the provider's own cost
    # through the 429s: each answered request number 5, 10, ... was waited out (Retry-After: 1 s) and retried
    assert hosted.rate_limited >= 2 and sum(m["attempts"] - 1 for m in model) == hosted.rate_limited
    assert took > hosted.rate_limited * 1.0
    # standard fields only: the stub refuses any other (400) and there was none; no /tokenize exists there
    assert rec.header["config"]["model"]["api_key_env"] == "OPENAI_API_KEY"
    text = every_file(tmp_path / "run")
    assert KEY not in text and "sk-test" not in text  # not in run.json, records, conversations, the ledger
    assert "sk-test" not in r.stdout + r.stderr


def test_reasoning_comes_back_in_the_field_the_provider_sent_it_in():
    replies = [{"content": "a", "reasoning": "first thought", "code": "print(1)"}, {"content": "b"}]
    model = FixedModel(replies)
    cfg = load_config(overrides=["model.profile=hosted", "model.api_key_env=DUCK_TEST_KEY"]).model
    os.environ["DUCK_TEST_KEY"] = KEY
    try:
        with StubServer(model, hosted=Hosted(api_key=KEY)) as url:
            c = ModelClient(url, cfg)
            first = c.chat(MSGS, probe.PROBE_TOOL)
            msg = first.message()
            assert msg["reasoning"] == "first thought" and "reasoning_content" not in msg  # (it refuses that name)
            tool = {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "1"}
            assert c.chat(MSGS + [msg, tool], probe.PROBE_TOOL).content == "b"
            assert c.counter().tokenize is None  # no /tokenize at a provider: estimates, calibrated on usage
    finally:
        del os.environ["DUCK_TEST_KEY"]
    sent = model.requests[1]
    assert sent["messages"][1]["reasoning"] == "first thought"
    assert "top_k" not in sent and "chat_template_kwargs" not in sent and "reasoning_effort" not in sent
    # reasoning_effort: the standard field, sent only when set; the efforts a provider takes
    effort = load_config(overrides=["model.profile=hosted", "model.reasoning_effort=high"]).model
    assert provider.fields(effort, hosted=True) == {"reasoning_effort": "high"}
    with pytest.raises(ConfigError, match="the flash-next template accepts xhigh, medium, low"):
        load_config(overrides=["model.reasoning_effort=high"])


def test_openrouter_reasoning_details_are_kept_and_sent_back_untouched():
    from duck.llm.reply import Reply, merge_details
    blocks: list = []
    merge_details(blocks, [{"type": "reasoning.text", "text": "Look ", "index": 0}])
    merge_details(blocks, [{"type": "reasoning.text", "text": "first.", "index": 0, "signature": "sig"}])
    assert blocks == [{"type": "reasoning.text", "text": "Look first.", "index": 0, "signature": "sig"}]
    r = Reply(content="c", reasoning="Look first.", details=blocks, reasoning_as=("reasoning_details",))
    assert r.message()["reasoning_details"] == blocks and "reasoning" not in r.message()
    cut = Reply(reasoning="x " * 3000, details=blocks, reasoning_as=("reasoning_details",), cut="length",
                keep_thinking=100)
    assert "reasoning_details" not in cut.message() and len(cut.message()["reasoning"]) < 200  # text, not stale blocks


def test_retry_after_is_honoured_in_seconds_and_as_a_date():
    import email.utils

    import openai
    httpx = openai._base_client.httpx2  # (the HTTP package the openai client is built on)
    hosted = Hosted(rate_limit=2, retry_after_s=0.6)  # the second request is a 429
    with StubServer(FixedModel([{"content": "ok"}], loop=True), hosted=hosted) as url:
        cfg = load_config(overrides=["model.profile=hosted", "model.api_key_env=",
                                     "model.backoff_s=30"]).model
        c = ModelClient(url, cfg)
        assert c.chat(MSGS).attempts == 1
        t0 = time.monotonic()
        r = c.chat(MSGS)
    took = time.monotonic() - t0
    assert r.attempts == 2 and hosted.rate_limited == 1 and 0.5 < took < 15  # its 0.6 s, not 30 s
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    response = httpx.Response(503, headers={"Retry-After": when}, request=httpx.Request("POST", url))
    assert 25 < provider.retry_after(openai.APIStatusError("busy", response=response, body=None)) <= 30


def test_the_spend_guard_stops_the_run_like_ctrl_c_and_resume_finishes_it(tmp_path):
    out = tmp_path / "run"
    with StubServer(PlayerModel(), hosted=Hosted(api_key=KEY)) as url:
        # A game of 4 actions takes ~40-47K tokens (6 requests): the cap lets zc01 finish and stops zs01
        # half-way; the resume (a new command, a new 70K) plays zs01 again from its start.
        r = play(url, out, "--only", "zs01", "zc01", "--max-actions", "4", sets=("model.max_total_tokens=70000",))
        assert r.returncode == 130, r.stderr
        doc = json.loads((out / "score.json").read_text())
        assert doc["run_status"] == "interrupted" and doc["partial"] is True and doc["unfinished"] == ["zs01-00000001"]
        assert doc["stopped_by"].startswith("spend limit:") and "model.max_total_tokens is 70,000" in doc["stopped_by"]
        assert "spend limit" in r.stderr and "duck play --resume" in r.stderr
        first = {rec.game_id[:4]: rec.end["reason"] for rec in read_records(out)}
        assert first == {"zc01": "max_actions", "zs01": "stopped"}  # cut at its next action, as by Ctrl-C
        r2 = play(url, out, resume=True)
    assert r2.returncode == 0, r2.stderr
    doc = json.loads((out / "score.json").read_text())
    assert doc["partial"] is False and doc["run_status"] == "complete" and "stopped_by" not in doc
    assert {rec.game_id[:4]: rec.end["reason"] for rec in read_records(out)} == {"zs01": "max_actions",
                                                                                 "zc01": "max_actions"}


def test_a_key_refused_mid_run_stops_the_run_with_the_reason(tmp_path):
    player = PlayerModel()
    model = FixedModel([player.reply] * 4 + [{"status": 401, "error": "Key revoked"}], loop=True)
    with StubServer(model, hosted=Hosted(api_key=KEY)) as url:
        r = play(url, tmp_path / "run", "--only", "zs01", "zc01", "--max-actions", "40")
    assert r.returncode == 130, r.stderr
    doc = json.loads((tmp_path / "run" / "score.json").read_text())
    assert doc["stopped_by"].startswith("the model provider refused the key: HTTP 401") and "Key revoked" in doc["stopped_by"]
    assert doc["partial"] is True and doc["run_status"] == "interrupted"
    recs = read_records(tmp_path / "run")
    assert all(not e.get("kind") == "fallback" for rec in recs for e in rec.events)  # no explorer took it over


@pytest.mark.parametrize("case, stub, args, key, says", [
    ("missing key variable", {}, [], None,
     "model.api_key_env names OPENAI_API_KEY, which is not set in this environment"),
    ("refused key", {"api_key": "another-key"}, [], KEY, "refused the agent's request: HTTP 401: the key in $OPENAI_API_KEY"),
    ("no credit", {"status": 402}, [], KEY, "HTTP 402: no credit left"),
    ("a field it refuses", {"refuse_fields": frozenset({"seed"})}, [], KEY,
     "it refuses a field the client sends (Unrecognized request argument supplied: seed)"),
    ("a vLLM-only field", {}, ["model.top_k=40"], KEY, "model.top_k is vLLM-only"),
    ("no tool calls", {"without": frozenset({"tools"})}, [], KEY, "without a tool call (the probe asked for one)"),
    ("no images", {"without": frozenset({"images"})}, [], KEY, "the model takes no images"),
    ("a cost cap without costs", {"price": None}, ["model.max_cost=1"], KEY, "reports no cost"),
])
def test_each_bad_provider_input_is_one_line_before_anything_plays(tmp_path, case, stub, args, key, says):
    status = stub.pop("status", None)
    model = FixedModel([{"status": status}] if status else [{"content": "ok", "code": "print(1)"}], loop=True)
    hosted = Hosted(**({"api_key": KEY} | stub))
    with StubServer(model, hosted=hosted) as url:
        r = play(url, tmp_path / "run", "--only", "zs01", "--max-actions", "5", sets=tuple(args), key=key)
    assert r.returncode == 2, (case, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("duck play: error: ") and says in lines[0], (case, lines)
    assert not list((tmp_path / "run").glob("records/*.jsonl"))  # nothing played
    assert KEY not in r.stderr


def test_hosted_config_never_holds_a_key():
    with pytest.raises(ConfigError, match="NAME of the environment variable") as e:
        load_config(overrides=["model.api_key_env=sk-or-v1-abcdef0123"])
    assert "sk-or-v1" not in str(e.value)
    with pytest.raises(ConfigError, match="looks like a secret") as e:
        load_config(overrides=['model.headers={"Authorization": "Bearer sk-x1"}'])
    assert "sk-x1" not in str(e.value)
    cfg = load_config(overrides=["model.profile=hosted", 'model.headers={"X-Title": "duck", "X-Api-Key": "$DUCK_T"}'])
    assert provider.headers(cfg.model, {"DUCK_T": "v"}) == {"X-Title": "duck", "X-Api-Key": "v"}
    with pytest.raises(provider.ProviderError, match=r"reads \$DUCK_T"):
        provider.headers(cfg.model, {})
    # the plan: the provider's concurrency as the slots, the profile's window as the context budget
    assert (cfg.scheduler.slots, cfg.agent.context_tokens, cfg.plan.kv_tokens) == (4, 131072, 0)
    small = load_config(overrides=["model.profile=hosted", "scheduler.slots=2", "agent.context_tokens=65536"])
    assert (small.scheduler.slots, small.agent.context_tokens, small.model.max_output_tokens) == (2, 65536, 12288)


def test_a_refused_key_mid_call_is_not_retried_and_its_echo_is_redacted():
    model = FixedModel([{"status": 401, "error": f"Incorrect API key provided: {KEY}"}, {"content": "never"}])
    cfg = load_config(overrides=["model.profile=hosted", "model.api_key_env=DUCK_TEST_KEY"]).model
    os.environ["DUCK_TEST_KEY"] = KEY
    try:
        with StubServer(model, hosted=Hosted()) as url:
            with pytest.raises(ModelError) as e:
                ModelClient(url, cfg).chat(MSGS)
    finally:
        del os.environ["DUCK_TEST_KEY"]
    assert e.value.status == 401 and not e.value.retryable and KEY not in str(e.value) and "***" in str(e.value)
