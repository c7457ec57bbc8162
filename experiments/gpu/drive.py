"""Drive a booted vLLM with our client: what only a GPU shows (experiments/gpu/boot-dummy.sh).

    python experiments/gpu/drive.py URL MODEL_NAME OUT.json

1. streamed tool calls: real snippets from the Duck traces forced as the reply (structured
   outputs, a regex of the exact text, since dummy weights write noise) and streamed through
   0.33's qwen3_coder parser at the server's stream interval, with MTP's real steps: intact?
2. prefix-cache hits across turns: one conversation of 6 turns, each request the last one
   plus the reply and a tool result; `cached_tokens` per turn and /metrics' hit rate;
3. 10 concurrent streams of 512 tokens: aggregate decode tokens/s, MTP acceptance from
   /metrics (meaningless with dummy weights, but it shows the counters move).
Each part's error is recorded, not raised: the JSON says what held and what failed.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "conformance")]

from duck.agent.turn import python_tool  # noqa: E402
from duck.config import ModelConfig  # noqa: E402
from duck.llm import metrics as vllm_metrics  # noqa: E402
from duck.llm.client import ModelClient, empty_call  # noqa: E402

MSGS = [{"role": "system", "content": "You play a game."}, {"role": "user", "content": "Look at the board."}]


def forced(client: ModelClient, text: str) -> dict:
    """`text` forced as the model's output (vLLM's structured outputs, a regex of it)."""
    body = client.body()
    body["structured_outputs"] = {"regex": re.escape(text)}
    client.body = lambda: body  # (this script only: the agent never forces output)
    return body


def tool_calls(url: str, name: str, n: int) -> dict:
    from snippets import THINKING, snippets
    c = ModelClient(url, ModelConfig(name=name, retries=0, timeout_s=300, max_output_tokens=4096))
    got: dict[str, int] = {}
    for text, code in snippets(n):
        out = f"{THINKING}\n</think>\n\n{text}\n\n<tool_call>\n<function=python>\n<parameter=code>\n{code}\n</parameter>\n</function>\n</tool_call>"
        forced(c, out)
        r = c.chat(MSGS, python_tool(4096), seed=1)
        args = [t.arguments for t in r.tool_calls]
        k = ("intact" if len(args) == 1 and json.loads(args[0]) == {"code": code} else
             "empty" if any(empty_call(a) for a in args) else "broken" if r.dropped else "lost" if not args else "changed")
        got[k] = got.get(k, 0) + 1
    return got


def prefix_hits(url: str, name: str, turns: int = 6) -> dict:
    c = ModelClient(url, ModelConfig(name=name, retries=0, timeout_s=300, max_output_tokens=256))
    msgs = [MSGS[0], {"role": "user", "content": "Board: " + " ".join(str(i % 16) for i in range(3000))}]
    before = vllm_metrics.fetch(url)
    rows = []
    for t in range(turns):
        r = c.chat(msgs, python_tool(4096), seed=t)
        rows.append({"prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens, "first_token_s": r.first_token_s})
        msgs = msgs + [r.message(), {"role": "user", "content": f"Turn {t + 2}: " + "x " * 200}]
    d = vllm_metrics.delta(before, vllm_metrics.fetch(url))
    return {"turns": rows, "hit_rate": round(d["prefix_cache_hits"] / d["prefix_cache_queries"], 4)
            if d.get("prefix_cache_queries") else None}


def streams(url: str, name: str, n: int = 10, tokens: int = 512) -> dict:
    clients = [ModelClient(url, ModelConfig(name=name, retries=0, timeout_s=600, max_output_tokens=tokens),
                           session=f"s{i}") for i in range(n)]
    out: list = [None] * n
    gate = threading.Barrier(n)
    before = vllm_metrics.fetch(url)

    def one(i: int) -> None:
        gate.wait()
        r = clients[i].chat([MSGS[0], {"role": "user", "content": f"Stream {i}: think at length."}], seed=i)
        out[i] = r.completion_tokens

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    wall = time.monotonic() - t0
    d = vllm_metrics.delta(before, vllm_metrics.fetch(url))
    return {"streams": n, "completion_tokens": out, "wall_s": round(wall, 2),
            "decode_tokens_per_s": round(sum(x or 0 for x in out) / wall, 1), "mtp": vllm_metrics.mtp(d)}


def main() -> int:
    url, name, dest = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    doc: dict = {"url": url, "model": name}
    for key, fn in (("tool_calls", lambda: tool_calls(url, name, 40)), ("prefix_hits", lambda: prefix_hits(url, name)),
                    ("streams", lambda: streams(url, name))):
        t0 = time.monotonic()
        try:
            doc[key] = fn()
        except Exception as e:  # a finding, not a crash
            doc[key] = {"error": f"{type(e).__name__}: {e}"[:2000], "trace": traceback.format_exc(limit=4)[-2000:]}
        doc[key + "_s"] = round(time.monotonic() - t0, 1)
        dest.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc)[:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
