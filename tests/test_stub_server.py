"""The stub server: rendering and prefix statistics, scripted and trace models, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from duck.config import ModelConfig
from duck.game.actions import parse_display
from duck.llm.client import ModelClient
from devkit.replay.caps import RecordedCap, trace_caps
from devkit.stub.models import FixedModel, SolutionModel, TraceModel, action_code, trace_replies
from devkit.stub.server import StubServer
from duck.llm.render import common_prefix, default_template
from devkit.stub.traces import recorded_actions

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "duck-traces"


def _turn(i, content, responses, calls, **kw):
    return {"pass": 0, "turn_index": i, "content": content, "model_responses": responses, "calls": calls,
            "pre_turn_auto_actions": kw.get("auto", [])}


SYNTHETIC = [  # a made-up run in the traces' format (no trace data in the repo)
    _turn(0, "World model: x\n\nPlan: y",
          [{"finish_reason": "tool_calls", "reasoning_chars": 120, "content_chars": 14, "tool_call_count": 1},
           {"finish_reason": "tool_calls", "reasoning_chars": 0, "content_chars": 7, "tool_call_count": 1}],
          [{"response_index": 0, "code": "print(1)", "actions": []},
           {"response_index": 1, "code": "action(['UP','UP'])", "actions": ["UP", "UP"]}]),
    _turn(1, "thinking aloud",
          [{"finish_reason": "stop", "reasoning_chars": 10, "content_chars": 14, "tool_call_count": 0},
           {"finish_reason": "tool_calls", "reasoning_chars": 5, "content_chars": 0, "tool_call_count": 1}],
          [{"response_index": 1, "code": "action({'action': 'MOUSE', 'row': 3, 'col': 9})",
            "actions": ["MOUSE(row=3, col=9)"]}], auto=["RESET"]),
    _turn(2, "", [{"finish_reason": "tool_calls", "reasoning_chars": 0, "content_chars": 0, "tool_call_count": 1}],
          [{"response_index": 0, "code": "", "code_missing": True, "actions": []}]),
]


def test_trace_replies_follow_the_record():
    replies = trace_replies(SYNTHETIC)
    assert len(replies) == 5
    assert replies[0]["content"] == "World model: x" and len(replies[0]["reasoning"]) == 120
    assert replies[1]["content"] == "Plan: y"
    # The tool call holds only what the model wrote; the recorded caps are the replay kernel's.
    assert json.loads(replies[1]["tool_calls"][0]["arguments"]) == {"code": "action(['UP','UP'])"}
    assert trace_caps(SYNTHETIC) == [("print(1)", RecordedCap(0, "cap")),
                                     ("action(['UP','UP'])", RecordedCap(2, "cap")),
                                     ("action({'action': 'MOUSE', 'row': 3, 'col': 9})", RecordedCap(1, "cap"))]
    assert replies[2]["tool_calls"] == [] and replies[2]["finish_reason"] == "stop"  # the Duck's nudge case
    assert json.loads(replies[4]["tool_calls"][0]["arguments"]) == {}  # the malformed call, kept malformed
    assert recorded_actions(SYNTHETIC) == [[1], [1], [0], [6, 9, 3]]
    assert parse_display("MOUSE(row=70, col=-2)").to_json() == [6, 0, 63]


def test_trace_model_over_http_then_gone():
    with StubServer(TraceModel(SYNTHETIC)) as url:
        c = ModelClient(url, ModelConfig(name="stub", retries=0))
        got = [c.chat([{"role": "user", "content": "u"}]) for _ in range(5)]
        assert got[1].tool_calls[0].arguments.startswith('{"code": "action')
        with pytest.raises(Exception, match="410"):
            c.chat([{"role": "user", "content": "u"}])


def test_render_drops_or_keeps_past_thinking_like_the_template():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1", "reasoning": "R1",
             "tool_calls": [{"function": {"name": "python", "arguments": '{"code": "x"}'}}]},
            {"role": "tool", "content": "T1"}, {"role": "user", "content": "U2"},
            {"role": "assistant", "content": "A2", "reasoning": "R2"}, {"role": "tool", "content": "T2"}]
    dropped, _ = default_template().render(msgs, preserve_thinking=False)
    kept, _ = default_template().render(msgs, preserve_thinking=True)
    assert "R1" not in dropped and "R2" in dropped  # only after the last user query
    assert "R1" in kept and "<tool_response>\nT1\n</tool_response>" in kept
    assert "<parameter=code>\nx\n</parameter>" in kept
    assert kept.endswith("<|im_start|>assistant\n<think>\n")
    # vLLM 0.33 reads a past reply's reasoning from `reasoning` or `reasoning_content` (0.19 lost the latter).
    only_rc = [dict(m, reasoning_content=m.pop("reasoning")) if "reasoning" in m else m for m in map(dict, msgs)]
    assert default_template().render(only_rc, preserve_thinking=True)[0] == kept


def test_render_is_the_real_template_and_refuses_what_vllm_refuses():
    from duck.llm.render import QWEN36_TEMPLATE, ChatTemplate, HistoryError, default_template
    if not default_template().real:
        pytest.skip("../shared/qwen3.8/chat_template.jinja not present")
    assert default_template().path.parent.name == "qwen3.8"  # Flash-Next's and Qwen3.8-27B's, the default
    tools = [{"type": "function", "function": {"name": "python", "description": "Run <code> & see",
                                               "parameters": {"type": "object"}}}]
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": [{"type": "text", "text": "é"}, img]}]
    text, images = default_template().render(msgs, tools)
    # Qwen3.8 puts the default reasoning effort's sentence (xhigh) before the tools; Qwen3.6 has none
    assert text.startswith("<|im_start|>system\nReasoning effort is set to xhigh.")
    assert "\n\n# Tools\n\nYou have access to the following functions" in text
    if QWEN36_TEMPLATE.is_file():
        old, _ = ChatTemplate(QWEN36_TEMPLATE).render(msgs, tools)
        assert old.startswith("<|im_start|>system\n# Tools\n\nYou have access to the following functions")
    assert '"description": "Run <code> & see"' in text  # tojson keeps <, & and non-ASCII as they are
    # vLLM 0.33 hands the template a content list's parts in their order (0.19 put the images first;
    # tests/conformance checks the stub against 0.33's own rendering byte for byte)
    assert "<|im_start|>user\né<|vision_start|><|image_pad|><|vision_end|><|im_end|>" in text and images == 1
    bad = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                               "function": {"name": "python",
                                                                            "arguments": '{"code": "s = \''}}]}
    with pytest.raises(HistoryError, match="JSON"):
        default_template().render([{"role": "user", "content": "u"}, bad, {"role": "tool", "content": "t"}])
    with pytest.raises(HistoryError, match="No user query"):
        default_template().render([{"role": "system", "content": "S"}])


def test_prefix_statistics_per_conversation():
    server = StubServer(FixedModel([{"content": "a"}], loop=True))
    with server as url:
        a = ModelClient(url, ModelConfig(name="stub"), session="g1:0")
        b = ModelClient(url, ModelConfig(name="stub"), session="g2:0")
        msgs = [{"role": "system", "content": "S" * 1000}, {"role": "user", "content": "U"}]
        a.chat(msgs)
        b.chat([{"role": "system", "content": "other"}, {"role": "user", "content": "U"}])
        r = a.chat(msgs + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}])
    shares = [q["prefix_share"] for q in server.requests]
    assert shares[0] is None and shares[1] is None and shares[2] > 0.9
    # The reply "a" was generated for request 0 and sent back in request 2: the cache holds it.
    assert server.requests[2]["cache_share"] > shares[2]
    assert r.cached_tokens and r.cached_tokens < r.prompt_tokens
    assert common_prefix("abcdef", "abcxyz") == 3 and common_prefix("", "a") == 0


def test_solution_model_plays_each_conversation_separately():
    model = SolutionModel(ROOT / "tests" / "games")
    game = next(g for g in model.solutions if g.startswith("zc01"))
    r1 = model.reply({"_session": f"{game}:0"})
    r2 = model.reply({"_session": f"{game}:0"})
    assert "print" in r1["code"] and r2["code"] == action_code(model.solutions[game][0])
    assert "print" in model.reply({"_session": f"{game}:1"})["code"]  # another pass: its own cursor
    assert model.reply({"_session": "nope:0"})["status"] == 404


def test_stub_server_command_line(tmp_path):
    replies = tmp_path / "r.json"
    replies.write_text(json.dumps([{"content": "hi"}]))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from duck.cli import main; sys.exit(main())",
                             "stub-server", "--port", "0", "--replies", str(replies), "--loop"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        banner = json.loads(proc.stdout.readline())
        c = ModelClient(banner["url"], ModelConfig(name="stub", retries=0))
        assert c.chat([{"role": "user", "content": "u"}]).content == "hi"
        assert c.chat([{"role": "user", "content": "u"}]).content == "hi"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.skipif(not (TRACES / "turns").is_dir(), reason="duck-traces not present")
def test_a_real_trace_gives_one_reply_per_recorded_response():
    from devkit.stub.traces import load_trace
    turns = load_trace(TRACES, "ft09", 0)
    replies = trace_replies(turns)
    assert len(replies) == sum(len(t["model_responses"]) for t in turns)
    n_calls = sum(len(r["tool_calls"]) for r in replies)
    assert n_calls == sum(len(t["calls"]) for t in turns)
    assert sum(len(r["reasoning"]) for r in replies) == sum(t["reasoning_chars"] for t in turns)


def test_the_hosted_stub_answers_as_a_strict_provider(tmp_path):
    """`duck stub-server --hosted`: a key, standard fields only, no /tokenize or /metrics, reasoning
    under `reasoning` only, usage with cost, and a 429 with Retry-After on every 2nd request."""
    import urllib.error
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("DUCK_")} | {"STUB_KEY": "k-123"}
    proc = subprocess.Popen([sys.executable, "-m", "duck.cli", "stub-server", "--port", "0", "--hosted", "--player",
                             "--api-key-env", "STUB_KEY", "--rate-limit", "2", "--retry-after", "3"],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)

    def post(route: str, body: dict, key: str | None = "k-123") -> tuple[int, dict, dict]:
        req = urllib.request.Request(url + route, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {key}"} if key else {})})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read()), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), dict(e.headers)

    try:
        banner = json.loads(proc.stdout.readline())
        url = banner["url"]
        assert banner["hosted"] is True
        chat = {"model": "m", "messages": [{"role": "user", "content": "look"}]}
        assert post("/tokenize", {"messages": chat["messages"]})[0] == 404
        assert post("/v1/chat/completions", chat, key=None)[0] == 401
        status, doc, _ = post("/v1/chat/completions", dict(chat, top_k=20, chat_template_kwargs={}))
        assert status == 400 and "Unrecognized request argument supplied: chat_template_kwargs, top_k" in doc["error"]["message"]
        status, doc, _ = post("/v1/chat/completions", chat)
        msg = doc["choices"][0]["message"]
        assert status == 200 and msg["reasoning"] and "reasoning_content" not in msg
        assert doc["usage"]["cost"] > 0 and doc["usage"]["total_tokens"] > 0
        status, doc, headers = post("/v1/chat/completions", chat)  # the 2nd past the key check
        assert status == 429 and headers["Retry-After"] == "3"
        bad = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]
        assert post("/v1/chat/completions", dict(chat, messages=bad))[0] == 400  # a field it does not read
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(url + "/metrics", timeout=10)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
