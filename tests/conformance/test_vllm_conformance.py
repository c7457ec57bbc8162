"""Our client and agent against the pinned vLLM's own protocol layer (opt-in: pytest -m vllm).

The server is tests/conformance/vllm_standin.py, run by the pinned vLLM's venv (0.33.0:
`bash scripts/vllm-venv.sh`; `DUCK_VLLM_VENV` names another): vLLM's argument parser on
`duck serve`'s flags for the default profile (Flash-Next), its request validation, message
parsing, the Qwen3.8 chat template (../shared/qwen3.8/, served with --chat-template as
`duck serve` does for a model folder without one), multimodal processing with the
`max_pixels` cap, `qwen3_coder` tool parser, `qwen3` reasoning parser and streaming
generator, over HTTP, on a Flash-Next-shaped model folder (`Qwen4ExpForConditionalGeneration`,
tests/conformance/qwen_tiny.py) whose tokenizer's merges are trained on the Duck traces;
only the engine is scripted, and it hands out the deltas vLLM's engine would at the
configured stream interval and with MTP's multi-token steps. Our side is the real thing in
this process: duck.llm.client.ModelClient, the agent on a bundled game with the real kernel.

The stream-interval cases run 400 real model-written snippets (the Duck traces,
tests/conformance/snippets.py) through it; with vLLM 0.19's venv beside it (`bash
scripts/vllm-venv.sh 0.19.0`) the same snippets go through 0.19's parser too, which at
interval 16 loses calls as `{}` (vllm#31501): the check that fails there is the one that
passes at the configured interval. Skipped, with the reason, when a venv is absent; never
part of CI.

Issue 35's cases (at the end): what 0.33 sends when a request fails inside the engine (an
error chunk) and what a client reads when the connection breaks mid-reply, the prefix
cache's hits as `cached_tokens`, `/tokenize` against `usage`, the image limit.
test_vllm_engine_config.py resolves 0.33's own engine config for every profile and rung.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from collections import Counter

from duck.config import ModelConfig, load_config, with_values
from duck.agent.turn import image_part, python_tool
from duck.game.frames import grid_png
from duck.llm.client import ContextOverflow, ModelClient, ModelError, empty_call
from duck.llm.serve import MAX_PIXELS, command, pick_chat_template
from duck.paths import SHARED
from duck.llm.render import IMAGE_PAD, ChatTemplate

from snippets import TRACES, corpus, reply, snippets

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PIN = next(r for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
           ["serve"] if r.startswith("vllm"))
CACHE = Path.home() / ".cache" / "duck-arc3"
VENV = Path(os.environ.get("DUCK_VLLM_VENV") or CACHE / f"vllm-{PIN.split('==')[1]}")
PY = VENV / "bin" / "python"
OLD = CACHE / "vllm-0.19.0" / "bin" / "python"  # the old pin's venv, for its parser (optional)
CFG = load_config()  # the default profile, Flash-Next, as `duck serve` runs it
NAME = CFG.model.name
TAGS = ["</parameter>", "<parameter=", "</function>", "<function=", "</tool_call>"]
N_SNIPPETS = 400

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not PY.exists(), reason=f"no vLLM venv at {VENV} (bash scripts/vllm-venv.sh)")]


def out(reasoning: str, content: str = "", code: str | None = None) -> str:
    """What Qwen3.8 writes after the prompt's `<think>\\n`, in its own format."""
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

    def script(self, *outputs: str, **stream: int) -> dict:
        """Queue outputs; `stream_interval=` / `mtp_tokens=` emulate other settings of those flags."""
        return self._call("/script", {"outputs": list(outputs), **stream})

    def log(self) -> list[dict]:
        return self._call("/log")["requests"]

    def client(self, **sampling) -> ModelClient:
        return ModelClient(self.url, ModelConfig(**{"name": NAME, "retries": 0, "timeout_s": 60, **sampling}))


def _start(py: Path, model_dir: Path, argv: list[str], env: dict[str, str], extra: list[str]) -> subprocess.Popen:
    log = open(model_dir.parent / f"standin-{model_dir.name}.log", "w")
    return subprocess.Popen([str(py), str(HERE / "vllm_standin.py"), "--model-dir", str(model_dir), *extra, *argv[3:]],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, **env), cwd=str(model_dir.parent))


def _wait(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s  # (vLLM's imports and the multimodal warm-up: minutes on 2 busy cores)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the stand-in exited: {log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    """The tokenizer's training texts (other passes of the traces than the measured snippets)."""
    if not (TRACES / "turns").is_dir():
        return None
    f = tmp_path_factory.mktemp("corpus") / "corpus.json"
    f.write_text(json.dumps(corpus()))
    return f


def _launch(tmp_path_factory, py: Path, corpus_file, shape: str = "flash-next"):
    """A stand-in started with exactly the flags `duck serve` builds for the default profile
    and a model folder without a chat template (so the Qwen3.8 copy is passed with --chat-template)."""
    model_dir = tmp_path_factory.mktemp(f"tiny-{shape}")
    port = _free_port()
    serve = load_config(overrides=[f"model.serve.model_path={model_dir}"]).model.serve
    template, why = pick_chat_template(serve)
    argv, env = command(serve, NAME, port, template)
    assert argv[1:3] == ["serve", str(model_dir)]
    extra = ["--shape", shape] + (["--tokenizer-corpus", str(corpus_file)] if corpus_file else [])
    if shape == "qwen3.6" and "--engram-config" in argv:  # (a flag 0.19 does not have; it changes no output)
        i = argv.index("--engram-config")
        argv = argv[:i] + argv[i + 2:]
    proc = _start(py, model_dir, argv, env, extra)
    url = f"http://127.0.0.1:{port}"
    _wait(proc, url, model_dir.parent / f"standin-{model_dir.name}.log")
    return proc, Standin(url, argv, template, why)


@pytest.fixture(scope="module")
def standin(tmp_path_factory, corpus_file):
    proc, s = _launch(tmp_path_factory, PY, corpus_file)
    try:
        yield s
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def old_standin(tmp_path_factory, corpus_file):
    """vLLM 0.19.0's own layer on the same outputs (its venv: bash scripts/vllm-venv.sh 0.19.0).
    0.19 has no Qwen4Exp: the folder is Qwen3.6-shaped; the template, tokenizer and argv are the same."""
    if not OLD.exists():
        pytest.skip(f"no vLLM 0.19.0 venv at {OLD.parent.parent} (bash scripts/vllm-venv.sh 0.19.0)")
    proc, s = _launch(tmp_path_factory, OLD, corpus_file, shape="qwen3.6")
    try:
        yield s
    finally:
        _stop(proc)


def test_the_pinned_vllm_is_installed():
    got = subprocess.run([str(PY), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True)
    assert got.stdout.strip() == PIN.split("==")[1], got.stderr[-2000:]


def _argcheck(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(PY), str(HERE / "vllm_argcheck.py")], input=json.dumps(argv), capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("profile", ["flash-next", "qwen3.8-27b", "qwen3.6-27b"])
def test_duck_serve_flags_parse_with_the_pinned_vllm(tmp_path, profile):
    """Each profile's exact argv through `vllm serve`'s own parser and validation."""
    cfg = with_values(CFG, {"model.profile": profile})
    (tmp_path / "t.jinja").write_text("{{ messages }}")  # (vLLM checks that the file exists)
    argv, _ = command(cfg.model.serve, cfg.model.name, chat_template=str(tmp_path / "t.jinja"))
    r = _argcheck(argv)
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
    assert got["mm_processor_kwargs"] == {"max_pixels": MAX_PIXELS}
    assert got["default_chat_template_kwargs"] == {"preserve_thinking": True}
    # vLLM's own CUDA-graph default (nothing passed); PIECEWISE is rung 2 of the restart ladder
    # (test_vllm_engine_config.py resolves every rung).
    assert "--compilation-config" not in argv and got["cudagraph_mode"] == "None"
    assert got["chat_template"] == str(tmp_path / "t.jinja")
    assert got["kv_cache_dtype"] == ("fp8" if s.kv_cache_dtype == "fp8" else "auto")
    assert got["speculative_config"] == ({"method": "mtp", "num_speculative_tokens": 3} if s.mtp_tokens else None)
    assert got["engram_config"] == ({"cpu_offload": True} if s.engram_offload else None)
    assert got["linear_backend"] == (s.linear_backend or "auto")
    print(profile, "parsed by vLLM", PIN, ":", {k: got[k] for k in ("kv_cache_dtype", "speculative_config",
                                                                   "engram_config", "linear_backend")})


def test_the_flags_duck_serve_may_add_parse_too(tmp_path):
    """The switches that are off by default: a prefix-match unit, an attention backend."""
    c = with_values(CFG, {"model.serve.prefix_match_unit": 64, "model.serve.attention_backend": "TRITON_ATTN"})
    argv, _ = command(c.model.serve, c.model.name)
    r = _argcheck(argv)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["prefix_match_unit"] == 64 and "TRITON_ATTN" in str(got["attention_backend"]).upper()
    # A flag vLLM does not know exits 2 before anything loads, with argparse's line.
    r = _argcheck(argv + ["--no-such-flag"])
    assert r.returncode == 2 and "unrecognized arguments: --no-such-flag" in r.stderr


def test_the_template_copy_is_served_when_the_model_folder_has_none(standin):
    assert standin.template == str(SHARED / "qwen3.8" / "chat_template.jinja")
    assert "preserve_thinking" in Path(standin.template).read_text() and "has no chat template" in standin.why


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
    tools = python_tool()
    for name, code in CODES.items():
        standin.script(out("I will run it.", "Plan: run", code))
        r = c.chat(MSGS, tools, seed=1)
        assert [json.loads(t.arguments) for t in r.tool_calls] == [{"code": code}], name
        assert r.reasoning == "I will run it.\n" and r.cut is None and not r.dropped, name


def _outcome(r, code: str) -> str:
    """What became of one streamed call: intact, empty (`{}`: the arguments lost), broken
    (unreadable JSON, dropped by the client), lost (no call at all) or changed."""
    args = [t.arguments for t in r.tool_calls]
    if len(args) == 1 and json.loads(args[0]) == {"code": code}:
        return "intact"
    if any(empty_call(a) for a in args):
        return "empty"
    return "broken" if r.dropped else "lost" if not args else "changed"


def stream_snippets(standin, n: int = N_SNIPPETS, **stream: int) -> Counter:
    """The traces' snippets as the model's replies, streamed through the stand-in's vLLM to
    our client (50 at a time), with `stream_interval=`/`mtp_tokens=` as given (else the
    server's own flags): how many arrived intact, and how the others did not."""
    pairs = snippets(n)
    c, got = standin.client(timeout_s=120), Counter()
    for k in range(0, len(pairs), 50):
        part = pairs[k:k + 50]
        standin.script(*(reply(text, code) for text, code in part), **stream)
        for _, code in part:
            got[_outcome(c.chat(MSGS, python_tool(), seed=11), code)] += 1
    return got


needs_traces = pytest.mark.skipif(not (TRACES / "turns").is_dir(), reason="no ../shared/duck-traces")


@needs_traces
def test_real_snippets_stream_intact_at_the_configured_interval(standin):
    """400 model-written snippets through 0.33's parsers at `duck serve`'s own stream interval
    (1) and with MTP's multi-token deltas (3 drafted): every call arrives as written."""
    st = standin.script()
    assert (st["stream_interval"], st["mtp_tokens"]) == (CFG.model.serve.stream_interval, CFG.model.serve.mtp_tokens)
    got = stream_snippets(standin)
    print("vLLM", PIN, "at the configured interval", st, dict(got))
    assert got == Counter(intact=N_SNIPPETS)


@needs_traces
def test_at_interval_16_vllm_033_keeps_every_call(standin):
    """The measurement behind ServeConfig.stream_interval: 0.33's parser at 16 (with and
    without MTP) on the same snippets (experiments/LOG.md)."""
    for mtp in (0, 3):
        got = stream_snippets(standin, stream_interval=16, mtp_tokens=mtp)
        print("vLLM", PIN, "at interval 16, MTP", mtp, dict(got))
        assert got == Counter(intact=N_SNIPPETS)


@needs_traces
def test_the_interval_check_fails_the_way_0_19_does(old_standin):
    """The same check on vLLM 0.19's parser: at interval 16 it loses calls as `{}`
    (vllm#31501; an outside review counted 83 of 400 intact with its chunking), so the check
    above fails there; at interval 1 it passes, so the chunking is the cause."""
    at16 = stream_snippets(old_standin, stream_interval=16, mtp_tokens=0)
    at1 = stream_snippets(old_standin, stream_interval=1, mtp_tokens=0)
    print("vLLM 0.19.0 at interval 16:", dict(at16), "at 1:", dict(at1))
    assert at16["empty"] > N_SNIPPETS // 10 and at16["intact"] < N_SNIPPETS
    with pytest.raises(AssertionError):
        assert at16 == Counter(intact=N_SNIPPETS)  # the check of the configured interval, failing
    assert at1 == Counter(intact=N_SNIPPETS)


def test_reasoning_efforts_the_template_accepts(standin):
    """Qwen3.8's template takes xhigh (its default), medium and low in chat_template_kwargs
    and raises on anything else; the config refuses such an effort before any request."""
    prompts = {}
    for effort in ("xhigh", "medium", "low"):
        standin.script(out("ok", "fine"))
        r = standin.client(reasoning_effort=effort).chat(MSGS, python_tool(), seed=12)
        assert r.content.strip() == "fine", effort
        prompts[effort] = standin.log()[-1]["prompt"]
    standin.script(out("ok", "fine"))
    standin.client().chat(MSGS, python_tool(), seed=12)
    assert standin.log()[-1]["prompt"] == prompts["xhigh"]  # none sent: the template's default
    assert len({prompts["xhigh"], prompts["medium"], prompts["low"]}) == 3  # each changes the system turn
    cfg = ModelConfig(name=NAME, retries=0, timeout_s=60)
    object.__setattr__(cfg, "reasoning_effort", "high")  # (past the config's check, as a bad client would send it)
    c = ModelClient(standin.url, cfg)
    standin.script(out("never", "reached"))
    with pytest.raises(ModelError) as e:
        c.chat(MSGS, python_tool())
    print("vLLM", PIN, "on reasoning_effort 'high':", str(e.value)[:200])
    assert e.value.status in (400, 500)
    with pytest.raises(Exception, match="reasoning_effort"):
        load_config(overrides=["model.reasoning_effort=high"])


def _history_ok(standin, messages: list[dict]) -> None:
    """The next request with this history is accepted (vLLM 0.19 answers 400 otherwise)."""
    standin.script(out("ok", "fine"))
    r = standin.client().chat(messages + [{"role": "user", "content": "Go on."}], python_tool(), seed=2)
    assert r.content.strip() == "fine"  # (vLLM keeps the blank line after </think> in content)


def test_tag_strings_in_code_never_leave_an_unreadable_call(standin):
    c = standin.client()
    outcomes = {}
    for tag in TAGS:
        code = f"s = '{tag}'\nprint(s)"
        standin.script(out("Write the tag.", "", code))
        r = c.chat(MSGS, python_tool(), seed=3)
        for t in r.tool_calls:
            assert isinstance(json.loads(t.arguments), dict)
        kept = [json.loads(t.arguments).get("code") for t in r.tool_calls]
        outcomes[tag] = ("intact" if kept == [code] else "dropped" if r.dropped and not kept
                         else f"changed: {kept!r}" + (" + dropped" if r.dropped else ""))
        assert all(d["why"] == "invalid" for d in r.dropped)
        _history_ok(standin, MSGS + [r.message()])
    print("tag outcomes on vLLM", PIN, json.dumps(outcomes))
    assert any(v != "intact" for v in outcomes.values())  # the format's known limit, seen here


CUT_CALL_IN_HISTORY = "accepted"  # 0.33 (0.19: "HTTP 400": the client never sends one either way)


def test_a_reply_cut_by_the_output_cap_inside_a_tool_call(standin):
    code = "\n".join(f"print({i} * {i})" for i in range(200))
    standin.script(out("short", "", code))
    r = standin.client(max_output_tokens=300).chat(MSGS, python_tool(), seed=4)
    assert standin.log()[-1]["finish"] == "length"
    assert r.cut == "length" and not r.tool_calls and r.dropped and r.dropped[0]["why"] == "length"
    print("vLLM", PIN, "on a length cut inside a call: finish_reason", r.finish_reason, "; the call's streamed "
          "arguments", repr(r.dropped[0]["arguments"][:80]), "...", repr(r.dropped[0]["arguments"][-40:]))
    _history_ok(standin, MSGS + [r.message()])
    # What the client refuses to send: the cut call as it came (0.19 answered such a history with 400).
    bad = dict(r.message(), tool_calls=[{"id": "call_x", "type": "function",
                                         "function": {"name": "python", "arguments": r.dropped[0]["arguments"]}}])
    standin.script(out("seen", "fine"))
    try:
        standin.client().chat(MSGS + [bad, {"role": "tool", "tool_call_id": "call_x", "content": "cut"}],
                              python_tool())
        rendered = standin.log()[-1]["prompt"]
        outcome = "accepted, the cut call rendered as " + ("no parameters" if "<parameter=" not in
                                                          rendered.split("<tool_call>")[-1] else "its text")
    except ModelError as e:
        outcome = f"HTTP {e.status}: {str(e)[:160]}"
    print("vLLM", PIN, "on a history holding the cut call:", outcome)
    assert outcome.startswith(CUT_CALL_IN_HISTORY), outcome


def test_reasoning_round_trip_with_preserve_thinking(standin):
    c = standin.client(preserve_thinking=True)
    tools = python_tool()
    standin.script(out("The board is empty; look at it first.", "World model: empty", "print(current_frame.shape)"),
                   out("Now act.", "Plan: right", "action('RIGHT')"))
    r1 = c.chat(MSGS, tools, seed=5)
    msgs2 = MSGS + [r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "(64, 64)"},
                    {"role": "user", "content": "Next turn."}]
    c.chat(msgs2, tools, seed=6)
    p1, p2 = (q["prompt"] for q in standin.log())
    assert p2.startswith(p1)  # the prefix cache keeps everything, the thinking included
    assert "<think>\nThe board is empty; look at it first.\n</think>\n\nWorld model: empty" in p2
    # Without preserve_thinking the template drops that thinking at the new user message;
    # Qwen3.8's keeps it when the kwarg is not sent at all (its default is on, and the
    # server's --default-chat-template-kwargs says so too).
    standin.script(out("x", "y"), out("x", "y"))
    standin.client(preserve_thinking=False).chat(msgs2, tools, seed=6)
    assert "The board is empty" not in standin.log()[-1]["prompt"]
    standin.client(preserve_thinking=None).chat(msgs2, tools, seed=6)
    assert "<think>\nThe board is empty; look at it first.\n</think>" in standin.log()[-1]["prompt"]
    # The template reads past thinking only from `reasoning_content`; vLLM copies the `reasoning`
    # field onto it, so a message with either renders its thinking.
    only = [dict(m) for m in msgs2]
    only[2].pop("reasoning_content")
    standin.script(out("x", "y"))
    standin.client(preserve_thinking=True).chat(only, tools, seed=6)
    kept = "The board is empty" in standin.log()[-1]["prompt"]
    print("vLLM", PIN, "renders past thinking sent only as `reasoning`:", kept)
    assert kept


def test_a_tool_call_written_before_the_end_of_thinking(standin):
    text = "I will call it now <tool_call>\n<function=python>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>"
    standin.script(text)
    r = standin.client().chat(MSGS, python_tool(), seed=7)
    outcome = "call kept" if r.tool_calls else "call lost in the reasoning" if "<tool_call>" in r.reasoning else "?"
    print("a <tool_call> before </think> on vLLM", PIN, ":", outcome)
    assert not r.dropped or all(d["why"] == "invalid" for d in r.dropped)
    _history_ok(standin, MSGS + [r.message()])


def _expand(text: str) -> str:
    return text.replace(IMAGE_PAD, IMAGE_PAD * 64)  # a 256x256 board: 64 merged patches


def test_image_tokens_and_the_max_pixels_cap(standin):
    """A board at 10x (640 x 640, Franzen's) is 20 x 20 merged patches: 400 pads + the two
    vision markers = 402 tokens; anything larger is scaled down to `max_pixels` (409,600:
    a 1280 x 1280 board costs no more), and a 4x board (256 x 256) is 64 pads."""
    import numpy as np
    grid = np.arange(64 * 64).reshape(64, 64) % 16
    pads = {}
    for scale in (4, 10, 20):
        standin.script(out("ok", "seen"))
        standin.client().chat([MSGS[0], {"role": "user", "content": [{"type": "text", "text": "Board."},
                                                                     image_part(grid_png(grid, scale))]}])
        pads[scale] = standin.log()[-1]["prompt"].count(IMAGE_PAD)
    print("image pads by scale on vLLM", PIN, pads)
    assert pads[4] == 64 and pads[10] == 400 and pads[20] <= 400


def test_images_and_several_tool_results_render_as_our_stub_renders_them(standin):
    import numpy as np
    a = image_part(grid_png(np.zeros((64, 64), int)))
    b = image_part(grid_png(np.arange(64 * 64).reshape(64, 64) % 16))
    tools = python_tool()
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
    # The stub server's renderer (duck.llm.render) with the same template gives vLLM's
    # prompt exactly, byte for byte.
    stub, images = ChatTemplate(standin.template).render(msgs, tools, True, True)
    mine, theirs = _expand(stub), got["prompt"]
    at = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y), min(len(mine), len(theirs)))
    assert images == 2 and mine == theirs, (at, mine[max(0, at - 120):at + 80], theirs[max(0, at - 120):at + 80])


def test_a_prompt_over_the_context_is_a_context_overflow(standin):
    standin.script(out("never", "reached"))
    with pytest.raises(ContextOverflow):
        # (over the 131,072-token window with any merges: at least one token per number)
        standin.client().chat([MSGS[0], {"role": "user", "content": " ".join(map(str, range(140_000)))}],
                              python_tool())


def test_the_agent_plays_on_through_malformed_calls(standin, tmp_path):
    """The real agent and kernel on a bundled game: calls cut by a tag or by the output cap
    are dropped and explained, the game goes on with the model answering (no HTTP 400, no
    fallback), and every prompt extends the one before it."""
    from duck.agent.loop import AgentPolicy
    from duck.game.source import GameSource
    from duck.play.session import play_game
    from duck.play.record import read_record
    from devkit.stub.models import action_code
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
    # (0.33: `</parameter>` in code is a call with its code cut there, `</tool_call>` is kept
    # intact, and a call written before </think> is kept: the tag cases as in the test above)
    assert [m["tool_calls"] for m in model] == [1, 1, 1, 0, 1, 1]
    prompts = [q["prompt"] for q in standin.log()]
    assert len(prompts) == 6 and all(b.startswith(a) for a, b in zip(prompts, prompts[1:]))
    last = prompts[-1]
    assert "output limit inside its tool call" in last


# -- What a failing server sends, what the cache reports, what /tokenize counts (issue 35) ------

def _sse(standin, messages: list[dict]) -> tuple[list[dict | str], str]:
    """One streamed chat at the HTTP level: its `data:` payloads (JSON, or the text `[DONE]`)
    and how the body ended ("complete", or "IncompleteRead": a chunked body without its end;
    read whole, since iterating a urllib response's lines takes such a body for a complete one)."""
    body = {"model": NAME, "messages": messages, "stream": True, "max_tokens": 400}
    req = urllib.request.Request(standin.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw, ended = r.read(), "complete"
    except http.client.IncompleteRead as e:
        raw, ended = e.partial, "IncompleteRead"
    events: list[dict | str] = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            events.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return events, ended


def _finishes(events: list) -> list:
    return [c.get("finish_reason") for e in events if isinstance(e, dict) for c in e.get("choices") or []]


LONG = out("The board shows a wall on the left and a door at the top; I will look closer first.",
           "Plan: look", "print(current_frame.shape)")


def test_an_engine_error_mid_reply_is_an_error_chunk(standin):
    """0.33 on a request that fails inside the engine after some tokens went out: the deltas,
    then one `{"error": ...}` event (500, InternalServerError) and `[DONE]`; no finish reason."""
    standin.script({"text": LONG, "error_after": 4})
    events, ended = _sse(standin, MSGS)
    errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
    print("vLLM", PIN, "on an engine error after 4 deltas:", ended, events[-3:])
    assert ended == "complete" and events[-1] == "[DONE]"
    assert len(errors) == 1 and errors[0]["code"] == 500 and errors[0]["type"] == "InternalServerError"
    assert not any(_finishes(events)) and sum(1 for e in events if isinstance(e, dict) and e.get("choices")) >= 4


def test_a_dropped_connection_mid_reply_ends_without_a_finish(standin):
    """The stand-in breaks the connection after 4 deltas: the client reads a chunked body
    without its end, no error event, no finish reason, no `[DONE]`."""
    standin.script({"text": LONG, "drop_after": 4})
    events, ended = _sse(standin, MSGS)
    print("vLLM", PIN, "on a dropped connection after 4 deltas:", ended, len(events), "events")
    assert ended == "IncompleteRead" and "[DONE]" not in events and not any(_finishes(events))
    assert not any(isinstance(e, dict) and "error" in e for e in events) and len(events) >= 4
    standin.script(out("ok", "fine"))  # the server itself is still up
    assert standin.client().chat(MSGS, python_tool()).content.strip() == "fine"


def _client_outcome(standin, item: dict) -> str:
    standin.script(item)
    try:
        r = standin.client().chat(MSGS, python_tool(), seed=21)
    except ModelError as e:
        return f"ModelError: {e}"[:200]
    return f"cut={r.cut} content={r.content!r} calls={len(r.tool_calls)}"


@pytest.mark.parametrize("fault", ["error_after", "drop_after"])
def test_the_client_never_keeps_a_reply_that_failed_mid_stream(standin, fault):
    """Issue 35: an error chunk or a dropped connection after the first tokens is a failure
    (cut "error", the partial reply not kept, or the request's ModelError), never a reply cut
    at "the time limit" (the cut that tells the model to think less)."""
    got = _client_outcome(standin, {"text": LONG, fault: 4})
    print("our client on", fault, ":", got)
    assert got.startswith("ModelError") or got.startswith("cut=error content='' calls=0"), got


def test_cached_tokens_reach_the_client(standin):
    """The engine's prefix-cache hit (num_cached_tokens) comes back through 0.33's serving layer
    as usage.prompt_tokens_details.cached_tokens, which the client records; a turn that
    extends the last one finds at least the last prompt's whole blocks cached."""
    c = standin.client(preserve_thinking=True)
    standin.script(out("Look first.", "World model: a board", "print(current_frame.shape)"), out("Go.", "Plan: go"))
    first = [MSGS[0], {"role": "user", "content": f"A prompt no other test sent: {time.time()}."}]
    r1 = c.chat(first, python_tool(), seed=22)
    second = first + [r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "(64, 64)"},
                      {"role": "user", "content": "Next turn."}]
    r2 = c.chat(second, python_tool(), seed=23)
    log = standin.log()
    print("vLLM", PIN, "cached tokens:", [(q["prompt_tokens"], q["cached_tokens"]) for q in log],
          "client:", r1.cached_tokens, r2.cached_tokens)
    assert (r1.cached_tokens, r2.cached_tokens) == (log[0]["cached_tokens"], log[1]["cached_tokens"])
    assert r1.cached_tokens < r1.prompt_tokens and r2.cached_tokens >= r1.prompt_tokens // 16 * 16 > 0
    assert r2.cached_tokens % 16 == 0 and r2.cached_tokens < r2.prompt_tokens


def _board(seed: int, scale: int = 4) -> dict:
    import numpy as np
    return image_part(grid_png(np.random.default_rng(seed).integers(0, 16, (64, 64)), scale))


def test_tokenize_with_tools_kwargs_and_images_sums_to_usage(standin):
    """`/tokenize` (what the context's trim counts with: duck.llm.tokens) through 0.33's own
    renderer, with the tools, the chat-template kwargs (a reasoning effort, preserve_thinking)
    and board images: the whole conversation counts exactly what the chat's usage says, and
    the per-message counts plus the template's overhead come within a few tokens of it."""
    c = standin.client(reasoning_effort="medium", preserve_thinking=True)
    tools = python_tool()
    msgs = [MSGS[0], {"role": "user", "content": [{"type": "text", "text": "Turn 1."}, _board(1)]},
            {"role": "assistant", "content": "Plan: look", "reasoning": "Look at it first.",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "python",
                                                                          "arguments": '{"code": "print(1)"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "user", "content": [{"type": "text", "text": "Turn 2."}, _board(2, 10)]}]
    whole = c.tokenize(msgs, tools, generation=True)
    standin.script(out("ok", "seen"))
    r = c.chat(msgs, tools, seed=24)
    counter = c.counter(tools)
    parts = [counter.count(m) for m in msgs]
    summed = sum(n for n, _ in parts) + counter.overhead()
    print("vLLM", PIN, "/tokenize:", whole, "usage:", r.prompt_tokens, "per message:", [n for n, _ in parts],
          "+ overhead =", summed)
    assert whole == r.prompt_tokens == standin.log()[-1]["prompt_tokens"]
    assert all(exact for _, exact in parts) and abs(summed - r.prompt_tokens) <= 2 * len(msgs)


def _history(images: int) -> list[dict]:
    msgs = [MSGS[0]]
    for i in range(images):
        msgs += [{"role": "user", "content": [{"type": "text", "text": f"Turn {i}."}, _board(i % 7, 1)]},
                 {"role": "assistant", "content": "ok"}]
    return msgs + [{"role": "user", "content": "Go on."}]


def test_a_history_over_the_image_limit_is_refused(standin):
    """`--limit-mm-per-prompt '{"image": 400}'` (ServeConfig.images_per_prompt): 0.33 answers a
    history of 401 images with HTTP 400 naming the limit, and takes one of 400."""
    limit = CFG.model.serve.images_per_prompt
    standin.script(out("never", "reached"))
    with pytest.raises(ModelError) as e:
        standin.client().chat(_history(limit + 1), python_tool())
    print("vLLM", PIN, f"on {limit + 1} images:", e.value.status, str(e.value)[:300])
    assert e.value.status == 400 and str(limit) in str(e.value) and not isinstance(e.value, ContextOverflow)
    standin.script(out("ok", "seen"))
    r = standin.client(timeout_s=600).chat(_history(limit), python_tool())
    assert r.content.strip() == "seen" and standin.log()[-1]["prompt"].count(IMAGE_PAD) == 64 * limit
