"""A local OpenAI-compatible chat server driven by a scripted model, for tests and rehearsals.

It speaks the part of vLLM's API the agent uses (`GET /v1/models`, `POST
/v1/chat/completions`, streamed or not, with `usage` and `prompt_tokens_details`), renders
each prompt the way the Qwen3.6 chat template would (thinking kept or dropped per
`preserve_thinking`, tool results wrapped in `<tool_response>`, one placeholder per image)
to count tokens, and emulates the prefix cache so that what the agent sends can be
measured: `stats()` gives, per conversation, the share of each prompt that is a prefix of
the previous one.

Scripted models (`reply(request) -> dict`):

* `FixedModel(replies)`: the given replies in order (then 410 Gone, or a loop). A reply is a
  dict: `content`, `reasoning`, `code` (one `python` call) or `tool_calls`
  ([{"name", "arguments"}]), `finish_reason`, and test knobs: `status` (answer with that
  HTTP error), `delay_s` (before the first byte), `stall_s` (mid-stream, after the
  reasoning), or a callable `request -> dict`.
* `TraceModel(turns)`: replays one Duck run from ../shared/duck-traces: each recorded model
  response in order, its visible text as content, reasoning of the recorded length (the
  text itself was not recorded), and its Python snippet as the tool call, with
  `max_actions` set to the number of actions the snippet executed in the record (the
  Duck's slow sandbox cut many action loops at 30 s; the cap says where).

`duck stub-server --port P --traces DIR --game G --pass N` serves a trace model;
`duck stub-server --replay-check --traces DIR --games DIR` plays the longest run of each
game through the full agent loop against it and compares the actions with the record.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3.6
IMAGE_TOKENS = 66


def approx_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


# ---------------------------------------------------------------------------------------
# Rendering like the Qwen3.6 chat template (the parts that decide tokens and prefixes)

def _text_of(content: Any) -> tuple[str, int]:
    """Rendered text of a message's content, and the number of images in it."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    out, images = [], 0
    for part in content:
        if part.get("type") == "text":
            out.append(part.get("text", ""))
        elif part.get("type") in ("image_url", "image"):
            url = (part.get("image_url") or {}).get("url", "") if isinstance(part.get("image_url"), dict) else ""
            out.append(f"<|vision_start|><img {hashlib.sha1(url.encode()).hexdigest()[:12]}><|vision_end|>")
            images += 1
    return "".join(out), images


def render(messages: list[dict[str, Any]], tools: list[dict] | None = None,
           preserve_thinking: bool | None = None, thinking: bool = True) -> tuple[str, int]:
    """The prompt text and its image count, as the Qwen3.6 template lays it out."""
    last_query = len(messages) - 1
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user":
            last_query = i
            break
    out, images = [], 0
    for i, m in enumerate(messages):
        role = m.get("role")
        text, n = _text_of(m.get("content"))
        images += n
        if role == "system":
            out.append(f"<|im_start|>system\n{text}")
            if tools:
                out.append("\n\n# Tools\n" + "\n".join(json.dumps(t, sort_keys=True) for t in tools))
            out.append("<|im_end|>\n")
        elif role == "user":
            out.append(f"<|im_start|>user\n{text}<|im_end|>\n")
        elif role == "assistant":
            reasoning = m.get("reasoning_content") or m.get("reasoning") or ""
            keep = bool(preserve_thinking) or i > last_query
            body = f"<think>\n{reasoning.strip()}\n</think>\n\n" if keep else ""
            body += text.strip()
            for c in m.get("tool_calls") or []:
                f = c.get("function", {})
                try:
                    args = json.loads(f.get("arguments") or "{}")
                except ValueError:
                    args = {"_raw": f.get("arguments")}
                params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in
                                 (args.items() if isinstance(args, dict) else []))
                body += f"\n\n<tool_call>\n<function={f.get('name')}>\n{params}</function>\n</tool_call>"
            out.append(f"<|im_start|>assistant\n{body}<|im_end|>\n")
        elif role == "tool":
            first = i == 0 or messages[i - 1].get("role") != "tool"
            last = i + 1 == len(messages) or messages[i + 1].get("role") != "tool"
            out.append(("<|im_start|>user" if first else "") + f"\n<tool_response>\n{text}\n</tool_response>"
                       + ("<|im_end|>\n" if last else ""))
    out.append("<|im_start|>assistant\n" + ("<think>\n" if thinking else "<think>\n\n</think>\n\n"))
    return "".join(out), images


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of two strings (binary search over C-speed compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------------------------------------------------------------------------------------
# Scripted models

class FixedModel:
    """The given replies in order; then `loop` them, or answer 410 Gone."""

    def __init__(self, replies: list[dict[str, Any] | Callable[[dict], dict]], loop: bool = False) -> None:
        self.replies = list(replies)
        self.loop = loop
        self.i = 0
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.i >= len(self.replies):
                if not self.loop or not self.replies:
                    return {"status": 410, "error": "the scripted replies are used up"}
                self.i = 0
            r = self.replies[self.i]
            self.i += 1
        return r(request) if callable(r) else dict(r)


def _filler(n: int, seed: int) -> str:
    """`n` characters of stand-in reasoning (the traces keep only its length)."""
    if n <= 0:
        return ""
    base = f"(reasoning {seed}: not recorded in the trace, only its length) "
    return (base * (n // len(base) + 1))[:n]


def trace_replies(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One reply per recorded model response of a Duck run, in order."""
    out: list[dict[str, Any]] = []
    for t in turns:
        content = t.get("content") or ""
        pos = 0
        responses = t.get("model_responses") or [{}]
        for ri, r in enumerate(responses):
            n = r.get("content_chars") or 0
            text, pos = content[pos:pos + n], pos + n + (2 if n else 0)
            calls = [c for c in t.get("calls", []) if c.get("response_index", 0) == ri]
            tool_calls = []
            for c in calls:
                if c.get("code_missing"):
                    args = dict(c.get("other_arguments") or {})
                else:
                    args = {"code": c["code"], **(c.get("other_arguments") or {})}
                    args["max_actions"] = c.get("n_actions", len(c.get("actions") or []))
                    # How the Duck's call ended decides what the cap does (as duck.replay does):
                    # time up -> terminal results; killed at 30 s -> stop at the next action().
                    time_up = (t.get("end") == "yield_stop_requested"
                               or "terminal or stopping" in (c.get("result") or ""))
                    args["on_cap"] = "stop" if time_up else "kill" if c.get("timed_out") else "cap"
                tool_calls.append({"name": "python", "arguments": json.dumps(args)})
            finish = r.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
            out.append({"content": text, "tool_calls": tool_calls, "finish_reason": finish,
                        "reasoning": _filler(r.get("reasoning_chars") or 0, len(out))})
    return out


def load_trace(traces: str | Path, game: str, pass_: int) -> list[dict[str, Any]]:
    """The turns of one Duck run; `game` is an id or its 4-letter prefix."""
    files = sorted(Path(traces, "turns").glob(f"{game.split('-')[0]}*.jsonl.gz"))
    if not files:
        raise FileNotFoundError(f"no turns file for {game} under {traces}/turns")
    with gzip.open(files[0], "rt") as f:
        turns = [t for t in map(json.loads, f) if t["pass"] == pass_]
    if not turns:
        raise ValueError(f"{game}: no pass {pass_} in {files[0]}")
    return turns


class TraceModel(FixedModel):
    def __init__(self, turns: list[dict[str, Any]]) -> None:
        super().__init__(trace_replies(turns))


def action_code(actions: list[list[int]]) -> str:
    """Python that plays recorded actions ([id] or [6, x, y]) through the kernel's action()."""
    names = {0: "RESET", 1: "UP", 2: "DOWN", 3: "LEFT", 4: "RIGHT", 5: "SPACE", 7: "UNDO"}
    items = [repr({"action": "MOUSE", "row": a[2], "col": a[1]}) if a[0] == 6 else repr(names[a[0]])
             for a in actions]
    return f"result = action([{', '.join(items)}])"


class SolutionModel:
    """Plays the bundled games' solution.json, one conversation per game: each level is one
    turn with a look-around call (notes in the text) and then one call playing the level."""

    def __init__(self, games_dir: str | Path) -> None:
        self.solutions: dict[str, list[list[list[int]]]] = {}
        for meta in Path(games_dir).rglob("metadata.json"):
            sol = meta.parent / "solution.json"
            if sol.exists():
                self.solutions[json.loads(meta.read_text())["game_id"]] = json.loads(sol.read_text())["levels"]
        self.cursor: dict[str, int] = {}
        self.replies: list = []  # (for the command line's banner)
        self.lock = threading.Lock()

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        session = request.get("_session", "")
        game = session.rsplit(":", 1)[0]
        levels = next((v for k, v in self.solutions.items() if k == game or k.split("-")[0] == game), None)
        if levels is None:
            return {"status": 404, "error": f"no solution for conversation {session!r}"}
        with self.lock:
            i = self.cursor.get(session, 0)
            self.cursor[session] = i + 1
        level, step = divmod(i, 2)
        if level >= len(levels):
            return {"status": 410, "error": "the solution is played out"}
        if step == 0:
            return {"content": f"World model: level {level + 1} of {game}.\nPlan: play the known solution.",
                    "reasoning": "Look first.", "code": "print(current_frame.level, valid_actions)"}
        return {"content": f"Goal model: reach the end of level {level + 1}.",
                "code": action_code(levels[level])}


# ---------------------------------------------------------------------------------------
# The server

class StubServer:
    """`with StubServer(model) as url:` serves on 127.0.0.1 (a free port by default)."""

    def __init__(self, model: Any, port: int = 0, host: str = "127.0.0.1",
                 model_name: str = "stub") -> None:
        self.model = model
        self.model_name = model_name
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # per request: conversation, tokens, shares
        self._last: dict[str, str] = {}  # conversation → previous rendered prompt
        self._full: dict[str, str] = {}  # conversation → previous prompt + its generated reply
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="stub-server", daemon=True)
        self.thread.start()
        return self.url

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def account(self, conversation: str, body: dict[str, Any]) -> tuple[int, int]:
        """Prompt tokens and cached tokens of one request; keeps the prefix statistics:
        `prefix_share`, the share of the prompt that is a prefix of the previous request's
        prompt, and `cache_share`, the share that is a prefix of the previous prompt plus
        the reply generated for it (what vLLM's prefix cache holds after that request)."""
        kwargs = body.get("chat_template_kwargs") or {}
        text, images = render(body.get("messages", []), body.get("tools"),
                              kwargs.get("preserve_thinking"), kwargs.get("enable_thinking", True))
        tokens = approx_tokens(text) + images * IMAGE_TOKENS
        with self.lock:
            prev, prev_full = self._last.get(conversation), self._full.get(conversation)
            share = common_prefix(prev, text) / len(text) if prev and text else 0.0
            cache = common_prefix(prev_full, text) / len(text) if prev_full and text else share
            self._last[conversation] = text
            self.requests.append({"conversation": conversation, "prompt_tokens": tokens, "chars": len(text),
                                  "prefix_share": share if prev else None, "cache_share": cache if prev else None})
        return tokens, int(tokens * cache)

    def generated(self, conversation: str, body: dict[str, Any], message: dict[str, Any]) -> None:
        """Remember the prompt plus the reply as the cache would hold it."""
        kwargs = body.get("chat_template_kwargs") or {}
        full, _ = render(body.get("messages", []) + [message], body.get("tools"),
                         kwargs.get("preserve_thinking"), kwargs.get("enable_thinking", True))
        with self.lock:
            self._full[conversation] = full[:full.rindex("<|im_start|>assistant\n")]

    def stats(self) -> dict[str, Any]:
        shares = [r["prefix_share"] for r in self.requests if r["prefix_share"] is not None]
        cache = [r["cache_share"] for r in self.requests if r["cache_share"] is not None]
        return {"requests": len(self.requests),
                "prefix_share_mean": sum(shares) / len(shares) if shares else None,
                "cache_share_mean": sum(cache) / len(cache) if cache else None,
                "prompt_tokens_max": max((r["prompt_tokens"] for r in self.requests), default=0)}


def _handler(server: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("stub: " + fmt, *args)

        def _json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._json(200, {"object": "list", "data": [{"id": server.model_name, "object": "model",
                                                             "owned_by": "duck-stub"}]})
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._json(200, {"status": "ok"})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            except ValueError as e:
                self._json(400, {"error": {"message": f"bad JSON: {e}"}})
                return
            r = server.model.reply(dict(body, _session=self.headers.get("X-Duck-Session") or "default"))
            if r.get("delay_s"):
                time.sleep(r["delay_s"])
            if r.get("status"):
                self._json(r["status"], {"error": {"message": r.get("error", "scripted error"),
                                                   "type": "stub", "code": r["status"]}})
                return
            conversation = self.headers.get("X-Duck-Session") or "default"
            prompt_tokens, cached = server.account(conversation, body)
            calls = r.get("tool_calls") or ([{"name": "python", "arguments": json.dumps({"code": r["code"]})}]
                                            if r.get("code") is not None else [])
            content, reasoning = r.get("content") or "", r.get("reasoning") or ""
            completion = approx_tokens(content + reasoning + "".join(c["arguments"] for c in calls))
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                     "total_tokens": prompt_tokens + completion,
                     "prompt_tokens_details": {"cached_tokens": cached}}
            finish = r.get("finish_reason") or ("tool_calls" if calls else "stop")
            tool_calls = [{"index": k, "id": f"call_{abs(hash((content, k, time.time_ns()))) % 10**10}",
                           "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                          for k, c in enumerate(calls)]
            server.generated(conversation, body, {"role": "assistant", "content": content,
                                                  "reasoning_content": reasoning, "tool_calls": tool_calls})
            if body.get("stream"):
                self._stream(body, content, reasoning, tool_calls, finish, usage, r.get("stall_s"))
            else:
                msg = {"role": "assistant", "content": content or None, "reasoning": reasoning or None,
                       "reasoning_content": reasoning or None, "tool_calls": tool_calls}
                self._json(200, {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
                                 "model": server.model_name, "usage": usage,
                                 "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})

        def _stream(self, body, content, reasoning, tool_calls, finish, usage, stall_s) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": server.model_name}

            def send(delta: dict | None, finish_reason: str | None = None, usage_: dict | None = None) -> None:
                chunk = dict(base, choices=[] if delta is None else
                             [{"index": 0, "delta": delta, "finish_reason": finish_reason}])
                if usage_ is not None:
                    chunk["usage"] = usage_
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()

            try:
                send({"role": "assistant", "content": ""})
                for piece in _pieces(reasoning, 400):
                    send({"reasoning": piece, "reasoning_content": piece})
                if stall_s:
                    time.sleep(stall_s)
                for piece in _pieces(content, 200):
                    send({"content": piece})
                for tc in tool_calls:
                    send({"tool_calls": [{"index": tc["index"], "id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                    for piece in _pieces(tc["function"]["arguments"], 300):
                        send({"tool_calls": [{"index": tc["index"], "function": {"arguments": piece}}]})
                send({}, finish)
                if (body.get("stream_options") or {}).get("include_usage"):
                    send(None, usage_=usage)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a time-out test): nothing to do

    return Handler


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


# ---------------------------------------------------------------------------------------
# Replaying Duck runs through the full loop

DISPLAY = {"UP": 1, "DOWN": 2, "LEFT": 3, "RIGHT": 4, "SPACE": 5, "RESET": 0, "UNDO": 7, "ACTION7": 7}


def display_to_json(display: str) -> list[int]:
    """`MOUSE(row=R, col=C)` → [6, C, R]; `UP` → [1] (the record's action encoding)."""
    m = re.fullmatch(r"MOUSE\(row=(-?\d+), col=(-?\d+)\)", display.strip())
    if m:
        return [6, min(63, max(0, int(m.group(2)))), min(63, max(0, int(m.group(1))))]
    return [DISPLAY[display.strip().upper()]]


def recorded_actions(turns: list[dict[str, Any]], run: dict[str, Any] | None = None,
                     partial: bool = False) -> list[list[int] | None] | None:
    """The run's full action sequence. A call whose list is incomplete (transcript-derived:
    only its first names are known) makes this None, or with `partial`, contributes its
    known names followed by one None per unknown action."""
    out: list[list[int] | None] = []
    for t in turns:
        out += [display_to_json(a) for a in t.get("pre_turn_auto_actions") or []]
        for c in t.get("calls", []):
            known = [display_to_json(a) for a in c.get("actions") or []]
            if c.get("actions_complete") is False:
                if not partial:
                    return None
                known += [None] * (int(c.get("n_actions", len(known))) - len(known))
            out += known
    out += [display_to_json(a) for a in (run or {}).get("trailing_auto_actions") or []]
    return out


def same_actions(got: list[list[int]], expected: list[list[int] | None]) -> int | None:
    """Index of the first difference (None where the record does not know the action), or
    None when the sequences agree everywhere and have the same length."""
    for i, (a, b) in enumerate(zip(got, expected)):
        if b is not None and a != b:
            return i
    return None if len(got) == len(expected) else min(len(got), len(expected))


def replay_check(traces: str | Path, games_dir: str | Path, out: str | Path,
                 only: list[str] | None = None, compat: bool = True) -> dict[str, Any]:
    """Play the longest Duck run of each game (most actions) through the agent against a
    trace model and compare the actions with the record; writes `out/replay_loop.json`.

    Where the record lists only the first names of a call's actions (runs without an events
    file), the unknown positions match anything and `known_share` says how much was checked.
    `compat`: the kernel in the Duck's mode (fresh namespace per call, its builtins and result
    format); False runs the recorded code in our own mode, as the agent plays."""
    from duck.games import GameSource
    from duck.play import play_game
    from duck.policies import make_policy
    from duck.record import read_record

    source = GameSource.offline(games_dir)
    have = {g.game_id for g in source.games()}
    all_runs = [json.loads(line) for line in open(Path(traces, "runs.jsonl"))]
    result: dict[str, Any] = {"games": {}}
    for game_id in sorted({r["game_id"] for r in all_runs}):
        if game_id not in have or (only and game_id not in only and game_id.split("-")[0] not in only):
            continue
        run = min((r for r in all_runs if r["game_id"] == game_id), key=lambda r: (-r["actions"], r["pass"]))
        turns = load_trace(traces, game_id, run["pass"])
        expected = recorded_actions(turns, run, partial=True)
        t0 = time.monotonic()
        record_path = Path(out, "records", f"{game_id}.jsonl")
        record_path.parent.mkdir(parents=True, exist_ok=True)
        if record_path.exists():
            record_path.unlink()
        with StubServer(TraceModel(turns)) as url:
            policy = make_policy("llm", 0, model_url=url, fallback=None, pass_=run["pass"],
                                 kernel_compat=compat, kernel_fresh=compat, trace_replay=True)
            play_game(source, game_id, policy, max_actions=len(expected), record_path=record_path,
                      pass_=run["pass"])
        record = read_record(record_path)
        got = [a["action"] for a in record.actions]
        diff = same_actions(got, expected)
        known = sum(a is not None for a in expected)
        result["games"][game_id] = {"pass": run["pass"], "recorded": len(expected), "played": len(got),
                                    "known_share": round(known / max(1, len(expected)), 4),
                                    "identical": diff is None, "first_difference": diff,
                                    "levels": record.end["levels"] if record.end else None,
                                    "recorded_levels": run["levels_completed"],
                                    "seconds": round(time.monotonic() - t0, 1)}
        log.info("%s pass %d: %s", game_id, run["pass"], result["games"][game_id])
    g = result["games"]
    result["kernel_mode"] = "compat" if compat else "ours"
    result["runs"] = len(g)
    result["identical"] = sum(v["identical"] for v in g.values())
    result["levels_equal"] = sum(v["levels"] == v["recorded_levels"] for v in g.values())
    result["known_share"] = round(sum(v["known_share"] * v["recorded"] for v in g.values())
                                  / max(1, sum(v["recorded"] for v in g.values())), 4)
    result["actions_recorded"] = sum(v["recorded"] for v in g.values())
    result["actions_matched_before_first_difference"] = sum(
        v["recorded"] if v["identical"] else v["first_difference"] for v in g.values())
    Path(out).mkdir(parents=True, exist_ok=True)
    Path(out, "replay_loop.json").write_text(json.dumps(result, indent=1))
    return result


# ---------------------------------------------------------------------------------------
# Command line

def _main(args: argparse.Namespace) -> int:
    if args.replay_check:
        res = replay_check(args.traces, args.games, args.out, args.only, compat=args.kernel_mode == "compat")
        print(json.dumps({k: v for k, v in res.items() if k != "games"} |
                         {"games": {g: {k: v[k] for k in ("pass", "recorded", "played", "known_share", "identical")}
                                    for g, v in res["games"].items()}}, indent=1))
        return 0 if res["identical"] == res["runs"] else 1
    if args.traces:
        if not args.game:
            raise SystemExit("--traces needs --game (and --pass)")
        model: Any = TraceModel(load_trace(args.traces, args.game, args.pass_))
    elif args.solutions:
        model = SolutionModel(args.solutions)
    elif args.replies:
        model = FixedModel(json.loads(Path(args.replies).read_text()), loop=args.loop)
    else:
        model = FixedModel([{"content": "ok", "code": "print(valid_actions)"}], loop=True)
    server = StubServer(model, port=args.port, host=args.host, model_name=args.model_name)
    print(json.dumps({"url": server.url, "replies": len(model.replies)}), flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
        log.info("stub server stats: %s", server.stats())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stub-server", help="a local OpenAI-compatible server driven by a scripted model")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model-name", default="stub")
    p.add_argument("--traces", default=None, help="a duck-traces folder: replay one Duck run")
    p.add_argument("--game", default=None, help="game id or 4-letter prefix (with --traces)")
    p.add_argument("--pass", dest="pass_", type=int, default=0)
    p.add_argument("--replies", default=None, help="a JSON file with a list of fixed replies")
    p.add_argument("--loop", action="store_true", help="repeat the fixed replies forever")
    p.add_argument("--solutions", default=None,
                   help="a games folder with solution.json files: play them (one conversation per game)")
    p.add_argument("--replay-check", action="store_true",
                   help="play the longest run of each game through the agent and compare actions")
    p.add_argument("--games", default="environment_files", help="environments folder (--replay-check)")
    p.add_argument("--kernel-mode", choices=["compat", "ours"], default="compat",
                   help="--replay-check: the Duck's sandbox rules, or our agent's own kernel mode")
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--out", default="runs/replay_loop")
    p.set_defaults(func=_main)

