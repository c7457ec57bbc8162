"""`duck export-sft` and `duck export-check` (duck.train) on games played by the real agent and
kernel against the stub server: segments, requests, the loss rule, the filters, ms-swift's
format, and the export of a conversation with a cut reply, a dropped tool call, a trim, thinking
off and images, pinned. No tokenizer here (tests/test_train_tokens.py has those)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from duck.game.frames import grid_png
from duck.llm.render import IMAGE_PAD, ChatTemplate
from duck.play.conversation import read_conversation, unranges
from duck.play.record import read_record
from duck.train.samples import reply_off
from train_runs import NEEDS_TEMPLATE, duck, manifest, play_pinned, play_player, play_script, samples

pytestmark = NEEDS_TEMPLATE

PREFIX_OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def pinned(tmp_path_factory) -> Path:
    return play_pinned(tmp_path_factory.mktemp("pinned") / "run")


@pytest.fixture(scope="module")
def player(tmp_path_factory) -> Path:
    return play_player(tmp_path_factory.mktemp("player") / "run")


def _eligible(run: Path) -> set[tuple[str, int]]:
    """(game, request) of every reply received whole, read from the conversations."""
    out = set()
    for f in sorted(run.glob("conversations/*.jsonl.gz")):
        conv = read_conversation(f)
        out |= {(conv.game_id, n) for n, r in conv.replies.items() if reply_off(r) is None}
    return out


def _content(m: dict) -> list:
    return m["content"] if isinstance(m.get("content"), list) else []


def _supervised(rows: list[dict]) -> list[tuple[str, int]]:
    return [(s["game_id"], t["n"]) for s in rows for t in s["turns"] if t["span"] is not None]


def test_a_played_run_exports_as_segments_and_requests_each_reply_supervised_once(player, tmp_path, capsys):
    eligible = _eligible(player)
    assert len(eligible) > 20
    for unit in ("segment", "request"):
        data = tmp_path / unit
        code, out, err = duck(capsys, "export-sft", str(player), "--out", str(data), "--unit", unit,
                              "--format", "ms-swift")
        assert code == 0, err
        rows = samples(data)
        supervised = _supervised(rows)
        assert sorted(supervised) == sorted(eligible)  # each whole reply on the loss, once
        assert all(s["unit"] == unit and s["loss"] == sorted(s["loss"]) for s in rows)
        if unit == "request":
            assert all(len(s["loss"]) == 1 for s in rows)
        else:
            assert len(rows) == 3  # no trim at this length: one segment a game
        m = manifest(data)
        assert m["counts"]["spans"] == len(eligible) and 0 < m["counts"]["loss_share"] < 1
        assert m["template"]["sha256"] == ChatTemplate().sha256 and m["runs"][0]["commit"]
        code, out, err = duck(capsys, "export-check", str(data))
        assert code == 0 and json.loads(out.splitlines()[-1])["ok"], out
    # The loss starts where the request's own rendering ends (thinking on: after `<think>\n`).
    s = samples(tmp_path / "segment")[0]
    a, b = s["loss"][0]
    assert s["text"][:a].endswith("<|im_start|>assistant\n<think>\n") and s["text"][b - 10:b] == "<|im_end|>"


def test_the_pinned_conversation(pinned, tmp_path, capsys):
    """A cut reply, a dropped tool call, a trim, thinking off and images, exported and checked."""
    data = tmp_path / "data"
    code, _, err = duck(capsys, "export-sft", str(pinned), "--out", str(data), "--format", "ms-swift")
    assert code == 0, err
    first, second = samples(data)
    assert [first["id"], second["id"]] == ["zb01-00000001:p0:r0:s0-5", "zb01-00000001:p0:r0:s6-9"]  # the trim
    assert [t["n"] for t in first["turns"]] == [0, 1, 2, 3, 4, 5]
    off = {t["n"]: t.get("off") for t in first["turns"] if t["span"] is None}
    assert off == {1: "tool calls dropped", 2: "cut"}
    assert [t["span"] for t in second["turns"]] == [0, 1, 2, 3]
    assert first["template_kwargs"] == {"preserve_thinking": True, "enable_thinking": False}
    for s in (first, second):
        text = s["text"]
        for (a, b), t in zip(s["loss"], [t for t in s["turns"] if t["span"] is not None]):
            assert text[:a].endswith(PREFIX_OFF) and a == t["at"]  # thinking off: computed, not searched
            assert text[b - 10:b] == "<|im_end|>" and "<|im_end|>" not in text[a:b - 10]
    a, b = first["loss"][0]
    assert first["text"][a:b] == ("Look first.\n\n<tool_call>\n<function=python>\n<parameter=code>\n"
                                  "print(current_frame.level)\n</parameter>\n</function>\n</tool_call>"
                                  "<|im_end|>")
    # After the trim: the system prompt, the carried trim line, then turn 3's message.
    assert [m["role"] for m in second["messages"][:3]] == ["system", "user", "user"]
    assert "To fit the context" in second["messages"][1]["content"]
    # Images: one file per content; a board is bit for bit the record's board at its step.
    grids = dict(read_record(pinned / "records" / "zb01-00000001.jsonl").grids())
    conv = read_conversation(next(pinned.glob("conversations/*.jsonl.gz")))
    stored = [p["image_url"] for i in unranges(conv.requests[5]["ids"]) + [conv.replies[5]["message"]]
              for p in _content(conv.messages[i]["message"]) if p["type"] == "image_url"]
    parts = [p for m in first["messages"] for p in _content(m) if p["type"] == "image_url"]
    assert len(parts) == len(stored) == first["text"].count(IMAGE_PAD) >= 3
    boards = 0
    for part, how in zip(parts, stored):
        png = (data / part["image_url"]["url"]).read_bytes()
        assert part["image_url"]["url"] == f"images/{hashlib.sha256(png).hexdigest()}.png"
        if "board" in how:
            boards += 1
            assert png == grid_png(grids[how["board"]["step"]], how["board"]["scale"])
    assert boards == 3
    swift = [json.loads(line) for line in (data / "ms-swift.jsonl").read_text().splitlines()]
    flags = [m["loss"] for m in swift[0]["messages"] if m["role"] == "assistant"]
    assert flags == [True, False, False, True, True, True] and len(swift[0]["images"]) == len(parts)
    assert swift[0]["messages"][1]["content"].startswith("<image>No action played yet.")
    assert swift[0]["messages"][2] == {"role": "assistant", "content": "<think>\n\n</think>\n\nLook first.",
                                       "loss": True}
    call = json.loads(swift[0]["messages"][3]["content"])
    assert call == {"name": "python", "arguments": {"code": "print(current_frame.level)"}}
    code, out, _ = duck(capsys, "export-check", str(data))
    assert code == 0, out
    m = manifest(data)
    assert m["counts"]["off"] == {"tool calls dropped": 1, "cut": 1} and m["counts"]["images"] == 8
    # One sample per request: the dropped and the cut reply carry no loss, so they make none.
    code, _, _ = duck(capsys, "export-sft", str(pinned), "--out", str(tmp_path / "req"), "--unit", "request")
    assert [s["id"].rsplit(":", 1)[1] for s in samples(tmp_path / "req")] == [
        f"q{n}-{n}" for n in (0, 3, 4, 5, 6, 7, 8, 9)]
    assert manifest(tmp_path / "req")["counts"]["skipped"] == {"samples without a reply on the loss": 2}


def test_filters_duplicates_teachers_and_held_out_games(pinned, player, tmp_path, capsys):
    code, _, _ = duck(capsys, "export-sft", str(pinned), str(pinned), "--out", str(tmp_path / "twice"))
    m = manifest(tmp_path / "twice")
    assert code == 0 and m["counts"]["samples"] == 2
    assert m["counts"]["off"]["duplicate"] == 8  # the second copy
    import shutil  # a `duck ab` folder: one run folder per arm and pass, found at any depth
    for arm in ("a", "b"):
        shutil.copytree(pinned, tmp_path / "ab" / arm / "p000")
    code, _, _ = duck(capsys, "export-sft", str(tmp_path / "ab"), "--out", str(tmp_path / "abdata"))
    m = manifest(tmp_path / "abdata")
    assert m["runs"][0]["conversations"] == 2 and m["counts"]["off"]["duplicate"] == 8
    ids = [s["id"] for s in samples(tmp_path / "abdata")]
    assert ids == [f"zb01-00000001:p0:r0/a/p000:s{r}" for r in ("0-5", "6-9")]
    duck(capsys, "export-sft", str(pinned), "--out", str(tmp_path / "levels"), "--keep", "levels")
    m = manifest(tmp_path / "levels")
    assert m["counts"]["samples"] == 0 and m["counts"]["off"]["level not completed"] == 8
    duck(capsys, "export-sft", str(pinned), "--out", str(tmp_path / "games"), "--keep", "games")
    skipped = manifest(tmp_path / "games")["counts"]["skipped"]
    assert skipped == {"games without a completed level (--keep games)": 1}
    duck(capsys, "export-sft", str(pinned), "--out", str(tmp_path / "cap"), "--max-per-game", "1")
    assert manifest(tmp_path / "cap")["counts"]["samples"] == 1
    # A student profile makes the run's model a teacher rendered with the student's variables.
    code, _, err = duck(capsys, "export-sft", str(pinned), "--out", str(tmp_path / "student"),
                        "--student-profile", "qwen3.8-27b")
    s = samples(tmp_path / "student")[0]
    assert code == 0 and s["source"]["teacher"] == "Qwen3.8-Flash-Next", err
    assert s["template_kwargs"]["enable_thinking"] is True and "Reasoning effort is set to xhigh" in s["text"]
    assert duck(capsys, "export-check", str(tmp_path / "student"))[0] == 0
    duck(capsys, "export-sft", str(pinned), "--out", str(tmp_path / "nt"), "--student-profile", "qwen3.8-27b",
         "--exclude-teacher", "Qwen3.8-Flash-Next")
    assert manifest(tmp_path / "nt")["counts"]["skipped"] == {"games of an excluded teacher": 1}
    # --reasoning-loss off: each span starts after the reply's thinking.
    duck(capsys, "export-sft", str(player), "--out", str(tmp_path / "noreason"), "--reasoning-loss", "off")
    for s in samples(tmp_path / "noreason"):
        assert all(s["text"][:a].endswith("\n</think>\n\n") for a, _ in s["loss"])
    assert duck(capsys, "export-check", str(tmp_path / "noreason"))[0] == 0
    # Held-out games: by name without the version; one no run holds is a warning.
    names = tmp_path / "eval.txt"
    names.write_text("zb01  # held out\nzz99-0000000a\n")
    code, _, err = duck(capsys, "export-sft", str(player), "--out", str(tmp_path / "split"),
                        "--eval-games", str(names))
    assert code == 0 and "warning: eval game zz99 is in no run" in err
    assert {s["game_id"] for s in samples(tmp_path / "split", "eval.jsonl")} == {"zb01-00000001"}
    train = {s["game_id"] for s in samples(tmp_path / "split", "train.jsonl")}
    assert train == {"zc01-00000001", "zs01-00000001"}
    assert not (tmp_path / "split" / "samples.jsonl").exists()
    assert manifest(tmp_path / "split")["eval_missing"] == ["zz99"]
    assert duck(capsys, "export-check", str(tmp_path / "split"))[0] == 0


def test_without_preserved_thinking_every_user_turn_starts_a_new_sample(tmp_path, capsys):
    """`preserve_thinking: false`: the template drops past thinking at each new user turn, so no
    request's rendering is a prefix across one: segments hold one turn's requests each."""
    script = [{"content": "Look.", "reasoning": "First I look.", "code": "print(1)"},
              {"content": "Go.", "reasoning": "Now right.", "code": "action('RIGHT')"},
              {"content": "Down.", "reasoning": "Then down.", "code": "action('DOWN')"}]
    run = play_script(tmp_path / "run", script, "model.preserve_thinking=false", max_actions=2)
    duck(capsys, "export-sft", str(run), "--out", str(tmp_path / "data"))
    rows = samples(tmp_path / "data")
    assert [[t["n"] for t in s["turns"]] for s in rows] == [[0, 1], [2]]
    assert rows[0]["template_kwargs"]["preserve_thinking"] is False and "First I look." not in rows[1]["text"]
    assert duck(capsys, "export-check", str(tmp_path / "data"))[0] == 0


def test_a_hosted_teachers_game_is_rendered_with_the_students_variables(tmp_path, capsys):
    """A game a hosted provider played (the stub as a strict provider): its source names the
    provider and the teacher, its samples carry the student profile's template variables."""
    from devkit.stub.hosted import Hosted
    script = [{"content": "Look.", "reasoning": "I look.", "code": "print(1)"},
              {"content": "Go.", "reasoning": "Right.", "code": "action('RIGHT')"}]
    run = play_script(tmp_path / "run", script, "model.profile=hosted", "model.api_key_env=",
                      "model.name=teacher/big", max_actions=1, hosted=Hosted())
    (run / "run.json").write_text('{"git": null}')  # a run played outside a git checkout
    code, _, err = duck(capsys, "export-sft", str(run), "--out", str(tmp_path / "data"))
    assert code == 0, err
    s = samples(tmp_path / "data")[0]
    assert s["source"] == {
        "model": "teacher/big", "profile": "hosted", "policy": "llm", "commit": None, "provider": "127.0.0.1",
        "teacher": "teacher/big", "reasoning_kind": "full"}
    assert s["template_kwargs"] == {"preserve_thinking": True, "enable_thinking": True}
    terms = manifest(tmp_path / "data")["sources"]["teacher/big@127.0.0.1"]["terms"]
    assert terms.startswith("provider terms: 127.0.0.1")
    assert duck(capsys, "export-check", str(tmp_path / "data"))[0] == 0
    duck(capsys, "export-sft", str(run), "--out", str(tmp_path / "none"), "--exclude-teacher", "teacher/big")
    assert manifest(tmp_path / "none")["counts"]["samples"] == 0


def _no_output(out: Path) -> bool:
    return not out.exists() and not list(out.parent.glob(f".{out.name}.*"))


def _rewrite_start(run: Path, **fields) -> None:
    """Rewrite a run's conversations' start lines (a live .jsonl replaces the .gz)."""
    import gzip
    for f in run.glob("conversations/*.jsonl.gz"):
        lines = gzip.open(f, "rt").read().splitlines()
        start = json.loads(lines[0])
        for k, v in fields.items():
            if v is None:
                start.pop(k, None)
            else:
                start[k] = v
        f.unlink()
        f.with_suffix("").write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n")


def test_every_bad_input_is_one_line_exit_2_and_nothing_written(pinned, tmp_path, capsys):
    import shutil

    def refused(*args: str, says: str) -> None:
        code, out, err = duck(capsys, *args)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (code, err)

    empty = tmp_path / "empty"
    (empty / "records").mkdir(parents=True)
    out = tmp_path / "out"
    refused("export-sft", str(empty), "--out", str(out), says="no conversations")
    assert _no_output(out)
    other = tmp_path / "other"
    shutil.copytree(pinned, other)
    _rewrite_start(other, template_sha256="0" * 64)
    refused("export-sft", str(other), "--out", str(out),
            says="played with the chat template sha256 000000000000")
    assert _no_output(out)
    template = str(ChatTemplate().path)
    code, _, _ = duck(capsys, "export-sft", str(other), "--out", str(out), "--template", template)
    assert code == 0 and manifest(out)["counts"]["skipped"] == {
        "conversations played with another template (rendered with --template)": 1}
    old = tmp_path / "old"  # no template variables recorded, thinking on, no run.json
    shutil.copytree(pinned, old)
    _rewrite_start(old, chat_template_kwargs=None, server_template_kwargs=None, template_sha256=None,
                   sampling={"thinking": True, "preserve_thinking": True})
    refused("export-sft", str(old), "--out", str(tmp_path / "o2"), says="system prompt cannot be rebuilt")
    assert _no_output(tmp_path / "o2")
    before = (out / "samples.jsonl").read_bytes()
    refused("export-sft", str(pinned), "--out", str(out), says="already holds a data set")
    assert (out / "samples.jsonl").read_bytes() == before
    assert duck(capsys, "export-sft", str(pinned), "--out", str(out), "--force")[0] == 0
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    refused("export-sft", str(pinned), "--out", str(tmp_path / "full"), says="not empty")
    refused("export-sft", str(pinned), "--out", str(tmp_path / "o3"), "--max-tokens", "100",
            says="needs --tokenizer")
    refused("export-sft", str(pinned), "--out", str(tmp_path / "o3"), "--student-profile", "hosted",
            says="not a served profile")
    refused("export-sft", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o3"),
            says="no such file or folder")
    assert _no_output(tmp_path / "o3")
    refused("export-check", str(empty), says="no manifest.json")


def test_a_torn_conversation_exports_up_to_its_tear(pinned, tmp_path, capsys):
    import gzip
    import shutil
    torn = tmp_path / "torn"
    shutil.copytree(pinned, torn)
    f = next(torn.glob("conversations/*.jsonl.gz"))
    text = gzip.open(f, "rt").read()
    f.unlink()
    cut = text.index('"type":"request","n":7')  # a SIGKILL mid-line, after request 6's reply
    f.with_suffix("").write_text(text[:cut + 10])
    code, _, err = duck(capsys, "export-sft", str(torn), "--out", str(tmp_path / "data"))
    assert code == 0, err
    m = manifest(tmp_path / "data")
    assert m["counts"]["skipped"] == {"conversations with a torn last line (its tail skipped)": 1}
    assert [s["id"][-4:] for s in samples(tmp_path / "data")] == ["s0-5", "s6-6"]


def test_export_check_finds_a_tampered_sample(pinned, tmp_path, capsys):
    data = tmp_path / "data"
    duck(capsys, "export-sft", str(pinned), "--out", str(data))
    rows = (data / "samples.jsonl").read_text().splitlines()
    s = json.loads(rows[1])
    s["loss"][0][0] -= 3  # the span now starts inside the prompt
    (data / "samples.jsonl").write_text("\n".join([rows[0], json.dumps(s)]) + "\n")
    img = next((data / "images").iterdir())
    img.write_bytes(img.read_bytes() + b"x")
    code, out, _ = duck(capsys, "export-check", str(data))
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3, out
    assert "s6-9 request 6: span starts at" in lines[0] or "s6-9 request 6: span starts at" in out
    assert "does not hash to its name" in out


def test_without_a_tokenizer_nothing_of_the_train_extra_is_imported(pinned, tmp_path):
    """The stub answering a chat, export-sft and export-check, in a fresh interpreter."""
    probe = f"""
import json, sys, urllib.request
sys.path.insert(0, {str(ROOT / 'tests')!r})
from devkit.stub.models import FixedModel
from devkit.stub.server import StubServer
from duck.cli import main
with StubServer(FixedModel([{{"content": "hi", "code": "print(1)"}}])) as url:
    body = {{"model": "stub", "messages": [{{"role": "user", "content": "hello"}}], "return_token_ids": True}}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={{"Content-Type": "application/json"}})
    answer = json.loads(urllib.request.urlopen(req).read())
assert main(["export-sft", {str(pinned)!r}, "--out", {str(tmp_path / 'd')!r}, "--format", "ms-swift"]) == 0
assert main(["export-check", {str(tmp_path / 'd')!r}]) == 0
from train_runs import imported_extra
print(json.dumps({{"extra": imported_extra(), "ids": "token_ids" in answer["choices"][0]}}))
"""
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"extra": [], "ids": False}


def test_the_stub_and_duck_play_end_to_end_through_the_command_line(tmp_path):
    """README's "Try the model agent" without a key: `duck stub-server --player` and `duck play
    --policy llm`, then `duck export-sft` and `duck export-check`, each its own process."""
    exe = str(Path(sys.executable).parent / "duck")
    stub = subprocess.Popen([exe, "stub-server", "--player", "--port", "0"], stdout=subprocess.PIPE,
                            text=True)
    try:
        url = json.loads(stub.stdout.readline())["url"]
        run = tmp_path / "run"
        r = subprocess.run([exe, "play", "--games", str(ROOT / "tests" / "games"), "--policy", "llm",
                            "--model-url", url, "--max-actions", "8", "--out", str(run)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    finally:
        stub.terminate()
        stub.wait(timeout=30)
    t0 = time.monotonic()
    r = subprocess.run([exe, "export-sft", str(run), "--out", str(tmp_path / "data"), "--format", "ms-swift"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["samples"] == 3 and summary["spans"] >= 9 and time.monotonic() - t0 < 120
    r = subprocess.run([exe, "export-check", str(tmp_path / "data")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"], r.stdout
    first = samples(tmp_path / "data")[0]
    url = first["messages"][1]["content"][0]["image_url"]["url"]
    assert (tmp_path / "data" / url).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the board, a file of DATA
