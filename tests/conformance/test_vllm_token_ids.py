"""The sampled token ids through the pinned vLLM's own protocol layer (opt-in: pytest -m vllm).

Our client asks for `return_token_ids` on a vLLM profile; 0.33's streaming generator sends the
ids per chunk, also in the chunks whose text its tool-call and reasoning parsers withhold. The
stand-in engine (vllm_standin.py) emits the scripted output's tokens, `<|im_end|>` (the EOS a
real engine stops on) included. Checked: the reply's ids are exactly the generated ones at
`duck serve`'s stream interval and with MTP's multi-token steps; the reply line packs them; and
`duck export-sft --tokenizer` (the model folder's tokenizer.json) finds the reply whose
re-rendered text is what was sampled and reports the one whose is not (a reasoning with
trailing spaces, which the template trims). Needs the train extra (`tokenizers`) on our side.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from duck.agent.loop import _conversation_start
from duck.agent.turn import python_tool
from duck.cli import main
from duck.play.conversation import ConversationWriter
from duck.play.record import unpack_ids
from duck.train.tokens import load
import test_vllm_conformance as conformance
from test_vllm_conformance import CFG, MSGS, PIN, out

pytestmark = [pytest.mark.vllm, pytest.mark.train,
              pytest.mark.skipif(not conformance.PY.exists(), reason=f"no vLLM venv at {conformance.VENV}")]
FAITHFUL = out("I look first.", "Plan: look", "print(current_frame.shape)") + "<|im_end|>"
TRIMMED = out("I act now.   ", "Plan: act", "action('RIGHT')") + "<|im_end|>"  # the template trims the spaces


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in as tests/conformance/test_vllm_conformance.py starts it (a byte-level tokenizer)."""
    proc, s = conformance._launch(tmp_path_factory, conformance.PY, None)
    try:
        yield s
    finally:
        conformance._stop(proc)


def _tok(standin):
    return load(str(Path(standin.argv[2])))  # the stand-in's model folder: its tokenizer.json


@pytest.mark.parametrize("stream", [{}, {"mtp_tokens": 3}, {"stream_interval": 16}],
                         ids=["interval 1", "MTP 3", "interval 16"])
def test_the_reply_carries_every_sampled_token(standin, stream):
    tok = _tok(standin)
    standin.script(FAITHFUL, **stream)
    r = standin.client().chat(MSGS, python_tool(), seed=31)
    print("vLLM", PIN, stream or "configured", "sampled ids:", len(r.token_ids or []), "of",
          len(tok.encode(FAITHFUL)))
    assert r.token_ids == tok.encode(FAITHFUL) and tok.decode(r.token_ids) == FAITHFUL
    assert [json.loads(t.arguments) for t in r.tool_calls] == [{"code": "print(current_frame.shape)"}]


def test_the_export_compares_the_sampled_text_with_the_re_rendered_one(standin, tmp_path, capsys):
    tok = _tok(standin)
    tools = python_tool()
    client = standin.client()
    run = tmp_path / "run"
    writer = ConversationWriter(run / "conversations" / "g001-0000000a.jsonl",
                                start={"game_id": "g001-0000000a", "pass": 0, "policy": "llm"})
    writer.begin(**_conversation_start(CFG, [standin.url], tools))
    ids = [writer.message(m) for m in MSGS]
    messages = list(MSGS)
    for k, text in enumerate((FAITHFUL, TRIMMED)):
        standin.script(text)
        n = writer.request(ids, turn=0, call=k)
        r = client.chat(messages, tools, seed=40 + k)
        assert r.token_ids == tok.encode(text)
        ids.append(writer.message(r.message()))
        writer.reply(n, ids[-1], r)
        result = {"role": "tool", "tool_call_id": r.tool_calls[0].id, "content": "ok"}
        ids.append(writer.message(result))
        messages += [r.message(), result]
    writer.close("done")
    finished = writer.path.with_name(writer.path.name + ".gz")
    line = next(json.loads(x) for x in gzip.open(finished, "rt") if '"type":"reply"' in x)
    assert unpack_ids(line["token_ids"]) == tok.encode(FAITHFUL)
    data = tmp_path / "data"
    code = main(["export-sft", str(run), "--out", str(data), "--tokenizer", str(Path(standin.argv[2])),
                 "--format", "tokens"])
    assert code == 0
    manifest = json.loads((data / "manifest.json").read_text())
    print("vLLM", PIN, "export of two sampled replies:", manifest["sampled"])
    assert manifest["sampled"] == {"replies_with_ids": 2, "compared": True,
                                   "mismatched": ["g001-0000000a:p0:r0:s0-1#1"]}
    assert main(["export-check", str(data), "--tokenizer", str(Path(standin.argv[2]))]) == 0
