"""Our client and agent against the pinned vLLM's own protocol layer (opt-in: pytest -m vllm).

The server is tests/conformance/vllm_standin.py, run by the pinned vLLM's venv
(`bash scripts/vllm-venv.sh`; `DUCK_VLLM_VENV` names another): vLLM's argument parser on
`duck serve`'s flags, its request validation, message parsing, Qwen3.6 chat template,
multimodal processing, `qwen3_coder` tool parser, `qwen3` reasoning parser and streaming
generator, over HTTP; only the engine is scripted (each output tokenized with Qwen's
special tokens). Our side is the real thing in this process: duck.llm.client.ModelClient, the
agent on a bundled game with the real kernel. Skipped, with the reason, when the venv is
absent; never part of CI.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from duck.config import ModelConfig, load_config
from duck.agent.turn import image_part, python_tool
from duck.game.frames import grid_png
from duck.llm.client import ContextOverflow, ModelClient, ModelError
from duck.llm.serve import command, pick_chat_template
from duck.testing.stub.render import IMAGE_PAD, ChatTemplate

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PIN = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
           ["serve"] if r.startswith("vllm"))
VENV = Path(os.environ.get("DUCK_VLLM_VENV") or Path.home() / ".cache" / "duck-arc3" / f"vllm-{PIN.split('==')[1]}")
PY = VENV / "bin" / "python"
NAME = "Qwen3.6-27B-FP8"
TAGS = ["</parameter>", "<parameter=", "</function>", "<function=", "</tool_call>"]

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not PY.exists(), reason=f"no vLLM venv at {VENV} (bash scripts/vllm-venv.sh)")]


def out(reasoning: str, content: str = "", code: str | None = None) -> str:
    """What Qwen3.6 writes after the prompt's `<think>\\n`, in its own format."""
    text = f"{reasoning}\n</think>\n\n{content}"
    if code is not None:
        text += f"\n\n<tool_call>\n<function=python>\n<parameter=code>\n{code}\n</parameter>\n</function>\n</tool_call>"
    return text


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Standin:
    def __init__(self, url: str, argv: list[str], template: str | None, why: str) -> None:
        self.url, self.argv, self.template, self.why = url, argv, template, why

    def _call(self, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def script(self, *outputs: str) -> None:
        self._call("/script", {"outputs": list(outputs)})

    def log(self) -> list[dict]:
        return self._call("/log")["requests"]

    def client(self, **sampling) -> ModelClient:
        return ModelClient(self.url, ModelConfig(name=NAME, **sampling, retries=0, timeout_s=60))


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in, started with exactly the flags `duck serve` builds for a model folder
    without a chat template (so the Qwen3.6 copy is passed with --chat-template)."""
    model_dir = tmp_path_factory.mktemp("qwen-tiny")
    port = _free_port()
    serve = load_config(overrides=[f"model.serve.model_path={model_dir}"]).model.serve
    template, why = pick_chat_template(serve)
    argv, env = command(serve, NAME, port, template)
    assert argv[1:3] == ["serve", str(model_dir)]
    log = open(model_dir.parent / "standin.log", "w")
    proc = subprocess.Popen([str(PY), str(HERE / "vllm_standin.py"), "--model-dir", str(model_dir), *argv[3:]],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env), cwd=str(model_dir.parent))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the stand-in exited: {(model_dir.parent / 'standin.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(url + "/v1/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        yield Standin(url, argv, template, why)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_the_pinned_vllm_is_installed():
    got = subprocess.run([str(PY), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True)
    assert got.stdout.strip() == PIN.split("==")[1], got.stderr[-2000:]


def test_duck_serve_flags_parse_with_the_pinned_vllm(tmp_path):
    """`duck serve`'s exact argv through `vllm serve`'s own parser and validation."""
    cfg = load_config()
    (tmp_path / "t.jinja").write_text("{{ messages }}")  # (vLLM checks that the file exists)
    argv, _ = command(cfg.model.serve, cfg.model.name, chat_template=str(tmp_path / "t.jinja"))
    r = subprocess.run([str(PY), str(HERE / "vllm_argcheck.py")], input=json.dumps(argv), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    s = cfg.model.serve
    assert got["subparser"] == "serve" and got["model_tag"] == s.model_path
    assert got["served_model_name"] == [cfg.model.name] and got["port"] == s.port
    assert (got["max_model_len"], got["max_num_seqs"], got["max_num_batched_tokens"], got["stream_interval"]) == (
        s.max_model_len, s.max_num_seqs, s.max_num_batched_tokens, s.stream_interval)
    assert got["gpu_memory_utilization"] == s.gpu_memory_utilization
    assert got["enable_prefix_caching"] and got["enable_prompt_tokens_details"] and got["enable_auto_tool_choice"]
    assert (got["tool_call_parser"], got["reasoning_parser"]) == ("qwen3_coder", "qwen3")
    assert got["limit_mm_per_prompt"] == {"image": s.images_per_prompt, "video": 0}
    assert got["cudagraph_mode"].endswith("PIECEWISE") and got["chat_template"] == str(tmp_path / "t.jinja")
    # The flag the old pin used is refused by this version (why ServeConfig.linear_backend is empty).
    r = subprocess.run([str(PY), str(HERE / "vllm_argcheck.py")], input=json.dumps(argv + ["--linear-backend", "cutlass"]),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "unrecognized arguments: --linear-backend" in r.stderr


def test_the_template_copy_is_served_when_the_model_folder_has_none(standin):
    assert standin.template and "preserve_thinking" in Path(standin.template).read_text()
    assert "has no chat template" in standin.why


MSGS = [{"role": "system", "content": "You play a game."}, {"role": "user", "content": "Look at the board."}]
CODES = {
    "multi-line": "for i in range(3):\n    if i:\n        print(i)\nx = [a for a in range(4)]",
    "comparisons and arrows": "def f(a: int) -> bool:\n    return a < 3 and a >= 1 or a << 2 > 5\nprint(f(2))",
    "html": "html = '<div class=\"x\"><b>bold</b> &amp; <br/></div>'\nprint(html)",
    "think and tool_response tags": "s = '<think></think><tool_response><tool_call>'\nprint(len(s))",
    "backslashes, quotes, unicode": "print('a\\\\b', \"q'\", 'é→✓', '\\t')",
}


def test_code_comes_back_exactly(standin):
    c = standin.client()
    tools = python_tool(4096)
    for name, code in CODES.items():
        standin.script(out("I will run it.", "Plan: run", code))
        r = c.chat(MSGS, tools, seed=1)
        assert [json.loads(t.arguments) for t in r.tool_calls] == [{"code": code}], name
        assert r.reasoning == "I will run it.\n" and r.cut is None and not r.dropped, name


def _history_ok(standin, messages: list[dict]) -> None:
    """The next request with this history is accepted (vLLM 0.19 answers 400 otherwise)."""
    standin.script(out("ok", "fine"))
    r = standin.client().chat(messages + [{"role": "user", "content": "Go on."}], python_tool(4096), seed=2)
    assert r.content.strip() == "fine"  # (vLLM keeps the blank line after </think> in content)


def test_tag_strings_in_code_never_leave_an_unreadable_call(standin):
    c = standin.client()
    outcomes = {}
    for tag in TAGS:
        code = f"s = '{tag}'\nprint(s)"
        standin.script(out("Write the tag.", "", code))
        r = c.chat(MSGS, python_tool(4096), seed=3)
        for t in r.tool_calls:
            assert isinstance(json.loads(t.arguments), dict)
        kept = [json.loads(t.arguments).get("code") for t in r.tool_calls]
        outcomes[tag] = ("intact" if kept == [code] else "dropped" if r.dropped and not kept
                         else f"changed: {kept!r}" + (" + dropped" if r.dropped else ""))
        assert all(d["why"] == "invalid" for d in r.dropped)
        _history_ok(standin, MSGS + [r.message()])
    print("tag outcomes on vLLM", PIN, json.dumps(outcomes))
    assert any(v != "intact" for v in outcomes.values())  # the format's known limit, seen here


def test_a_reply_cut_by_the_output_cap_inside_a_tool_call(standin):
    code = "\n".join(f"print({i} * {i})" for i in range(200))
    standin.script(out("short", "", code))
    r = standin.client(max_output_tokens=300).chat(MSGS, python_tool(4096), seed=4)
    assert standin.log()[-1]["finish"] == "length"
    assert r.cut == "length" and not r.tool_calls and r.dropped and r.dropped[0]["why"] == "length"
    print("finish_reason reported by vLLM", PIN, "for a length cut inside a call:", r.finish_reason)
    _history_ok(standin, MSGS + [r.message()])
    # What the client now refuses to send: the cut call as it came, which vLLM 0.19 answers with 400.
    bad = dict(r.message(), tool_calls=[{"id": "call_x", "type": "function",
                                         "function": {"name": "python", "arguments": r.dropped[0]["arguments"]}}])
    standin.script(out("never", "reached"))
    with pytest.raises(ModelError) as e:
        standin.client().chat(MSGS + [bad, {"role": "tool", "tool_call_id": "call_x", "content": "cut"}],
                              python_tool(4096))
    assert e.value.status == 400, e.value
    print("vLLM", PIN, "on a history holding the cut call:", str(e.value)[:200])


def test_reasoning_round_trip_with_preserve_thinking(standin):
    c = standin.client(preserve_thinking=True)
    tools = python_tool(4096)
    standin.script(out("The board is empty; look at it first.", "World model: empty", "print(current_frame.shape)"),
                   out("Now act.", "Plan: right", "action('RIGHT')"))
    r1 = c.chat(MSGS, tools, seed=5)
    msgs2 = MSGS + [r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "(64, 64)"},
                    {"role": "user", "content": "Next turn."}]
    c.chat(msgs2, tools, seed=6)
    p1, p2 = (q["prompt"] for q in standin.log())
    assert p2.startswith(p1)  # the prefix cache keeps everything, the thinking included
    assert "<think>\nThe board is empty; look at it first.\n</think>\n\nWorld model: empty" in p2
    # Without preserve_thinking the template drops that thinking at the new user message.
    standin.script(out("x", "y"))
    standin.client(preserve_thinking=False).chat(msgs2, tools, seed=6)
    assert "The board is empty" not in standin.log()[-1]["prompt"]


def test_a_tool_call_written_before_the_end_of_thinking(standin):
    text = "I will call it now <tool_call>\n<function=python>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>"
    standin.script(text)
    r = standin.client().chat(MSGS, python_tool(4096), seed=7)
    outcome = "call kept" if r.tool_calls else "call lost in the reasoning" if "<tool_call>" in r.reasoning else "?"
    print("a <tool_call> before </think> on vLLM", PIN, ":", outcome)
    assert not r.dropped or all(d["why"] == "invalid" for d in r.dropped)
    _history_ok(standin, MSGS + [r.message()])


def _expand(text: str) -> str:
    return text.replace(IMAGE_PAD, IMAGE_PAD * 64)  # a 256x256 board: 64 merged patches


def test_images_and_several_tool_results_render_as_our_stub_renders_them(standin):
    import numpy as np
    a = image_part(grid_png(np.zeros((64, 64), int)))
    b = image_part(grid_png(np.arange(64 * 64).reshape(64, 64) % 16))
    tools = python_tool(4096)
    msgs = [MSGS[0], {"role": "user", "content": [{"type": "text", "text": "Turn 1."}, a]},
            {"role": "assistant", "content": "Plan: two looks", "reasoning": "Two calls.",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(1)"}'}},
                            {"id": "c2", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(2)"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"}, {"role": "tool", "tool_call_id": "c2", "content": "2"},
            {"role": "user", "content": [{"type": "text", "text": "Turn 2."}, b]}]
    standin.script(out("ok", "seen"))
    r = standin.client().chat(msgs, tools, seed=8)
    got = standin.log()[-1]
    assert got["prompt"].count(IMAGE_PAD) == 128 and r.prompt_tokens == got["prompt_tokens"]
    assert "\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n" in got["prompt"]
    # The stub server's renderer (duck.testing.stub.render) gives vLLM's prompt exactly, byte for byte.
    stub, images = ChatTemplate().render(msgs, tools, True, True)
    assert images == 2 and _expand(stub) == got["prompt"]


def test_a_prompt_over_the_context_is_a_context_overflow(standin):
    standin.script(out("never", "reached"))
    with pytest.raises(ContextOverflow):
        standin.client().chat([MSGS[0], {"role": "user", "content": "x" * 45000}], python_tool(4096))


def test_the_agent_plays_on_through_malformed_calls(standin, tmp_path):
    """The real agent and kernel on a bundled game: calls cut by a tag or by the output cap
    are dropped and explained, the game goes on with the model answering (no HTTP 400, no
    fallback), and every prompt extends the one before it."""
    from duck.agent.loop import AgentPolicy
    from duck.game.source import GameSource
    from duck.play.session import play_game
    from duck.play.record import read_record
    from duck.testing.stub.models import action_code
    from conftest import solutions

    game = next(g for g in solutions() if g.startswith("zb01"))
    level = solutions()[game][0]
    long_code = "\n".join(f"print({i})" for i in range(300))
    standin.script(
        out("Look first.", "World model: a board", "print(current_frame.shape)"),
        out("Tag in code.", "", "s = '</parameter>'\nprint(s)"),
        out("Another tag.", "", "s = '</tool_call>'\nprint(s)"),
        out("Too long.", "", long_code),
        "Forgot to close thinking <tool_call>\n<function=python>\n<parameter=code>\nprint(2)\n</parameter>\n</function>\n</tool_call>",
        out("Play the level.", "Plan: solve", action_code(level)))
    cfg = load_config(overrides=["model.retries=0", f"model.name={NAME}", "model.max_output_tokens=400",
                                 "agent.fallback=null", "agent.failures_before_fallback=1"])
    source = GameSource.offline(ROOT / "tests" / "games")
    policy = AgentPolicy(seed=0, model_url=standin.url, config=cfg)
    res = play_game(source, game, policy, max_actions=len(level), record_path=tmp_path / "r.jsonl")
    rec = read_record(tmp_path / "r.jsonl")
    assert not [e for e in rec.events if e["kind"] == "error"], [e["text"] for e in rec.events if e["kind"] == "error"]
    assert res.actions == len(level) and res.levels == 1
    model = [e["data"] for e in rec.events if e["kind"] == "model"]
    print("dropped calls per request:", [m["dropped_calls"] for m in model])
    assert len(model) == 6 and [m["dropped_calls"] for m in model][3] == ["length"]
    assert [m["tool_calls"] for m in model] == [1, 1, 0, 0, 0, 1]  # (the tag cases as in the test above)
    prompts = [q["prompt"] for q in standin.log()]
    assert len(prompts) == 6 and all(b.startswith(a) for a, b in zip(prompts, prompts[1:]))
    last = prompts[-1]
    assert "output limit inside its tool call" in last and "must not contain the literal text" in last
