"""Conversation files (duck.play.conversation, issue 13): written by real stub-server runs of
the agent on the bundled games with the real kernel, read back, rebuilt request by request
against what the server received, killed mid-game, and replayed through the stub server."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import BUNDLED, ROOT
from duck.agent.loop import AgentPolicy
from duck.config import load_config
from duck.game.frames import grid_png
from duck.game.source import GameSource
from duck.play.conversation import (ConversationWriter, conversation_path, find_conversation, read_conversation,
                                    record_of)
from duck.play.record import read_record
from duck.play.session import play_game
from duck.run import play_folder
from devkit.stub.models import ConversationModel, FixedModel, SolutionModel, comparable
from devkit.stub.server import StubServer


def _config(url: str | None = None, *more: str):
    over = ["model.retries=0", "model.backoff_s=0.01", "model.name=stub", "agent.fallback=null"]
    if url:
        over.append(f'model.urls=["{url}"]')
    return load_config(overrides=over + list(more))


def _game_id(prefix: str) -> str:
    return next(g.game_id for g in GameSource.offline(BUNDLED).games() if g.game_id.startswith(prefix))


def _by_conversation(prompts: list[dict]) -> dict[str, list[list[dict]]]:
    out: dict[str, list[list[dict]]] = {}
    for p in prompts:
        out.setdefault(p["conversation"].rsplit(":", 1)[0], []).append(p["messages"])
    return out


def _rebuilt(conv_file: Path, replied_only: bool = False) -> list[list[dict]]:
    conv = read_conversation(conv_file)
    grids = dict(read_record(record_of(conv_file)).grids())
    return [conv.request_messages(n, grids) for n in range(len(conv.requests))
            if not replied_only or n not in conv.errors]


def test_a_stub_run_of_the_bundled_games_keeps_every_message_of_every_request(tmp_path):
    """`duck play`'s path (play_folder, the real kernel, the default config) with a prompt
    budget small enough to evict: each request's message list, rebuilt from the file and the
    record (images bit for bit), equals what the server received."""
    server = StubServer(SolutionModel(BUNDLED), keep_prompts=True)
    with server as url:
        # (4,200: a level-up turn also shows the board that completed the level, 402 tokens more)
        cfg = _config(url, "play.policy=llm", "agent.context_tokens=4200", "model.max_output_tokens=400")
        doc = play_folder(BUNDLED, tmp_path / "run", cfg)
    assert doc["score"] == 100.0
    received = _by_conversation(server.prompts)
    convs = {c.game_id: c for c in map(read_conversation, sorted(tmp_path.glob("run/conversations/*.jsonl.gz")))}
    assert sorted(convs) == sorted(received) and len(convs) == 3
    evictions = 0
    for game_id, conv in convs.items():
        assert conv.path.name == f"{game_id}.jsonl.gz" and conv.end["reason"] == "won" and not conv.torn
        assert _rebuilt(conv.path) == received[game_id]
        images = [p for ms in received[game_id] for m in ms if isinstance(m["content"], list)
                  for p in m["content"] if p["type"] == "image_url"]
        assert images and all("board" in (conv.messages[i]["message"]["content"][0]["image_url"])
                              for i, ln in conv.messages.items() if ln.get("level"))  # stored by reference
        evictions += sum(1 for ln in conv.lines if ln.get("kind") == "evict")
        replies = [conv.reply_of(n) for n in range(len(conv.requests))]
        assert all(r["prompt_tokens"] and r["latency_s"] >= 0 and r["seed"] is not None for r in replies)
        assert [ln["actions"] for ln in conv.lines if ln.get("kind") == "turn_end"] != []
    assert evictions >= 1, "the budget was meant to force an eviction"


BROKEN = [
    {"content": "World model: a maze.\nI think I should move."},  # no tool call
    {"tool_calls": [{"name": "python", "arguments": '{"code": "print(1)'}]},  # not JSON: dropped
    {"status": 503},  # a failed request
    {"reasoning": "long " * 40, "finish_reason": "length", "completion_tokens": 99999},  # cut by the cap
    {"content": "Plan: look", "code": "notes['Plan'] = 'go right'\nprint(current_frame.level)"},
    {"content": "Goal model: the green cell", "code": "action('RIGHT')"},
    {"code": "action(['RIGHT', 'DOWN'])"},
]


def test_corrections_dropped_calls_and_failures_are_kept(tmp_path):
    server = StubServer(FixedModel(BROKEN), keep_prompts=True)
    game_id = _game_id("zb01")
    with server as url:
        cfg = _config(None, "agent.failures_before_fallback=2")
        res = play_game(GameSource.offline(BUNDLED), game_id, AgentPolicy(0, cfg, model_url=url), max_actions=3,
                        record_path=tmp_path / "records" / f"{game_id}.jsonl")
    assert res.actions == 3 and res.end_reason == "max_actions"
    path = find_conversation(tmp_path / "records" / f"{game_id}.jsonl")
    conv = read_conversation(path)
    assert [conv.errors[n]["error"] for n in conv.errors] == ["ModelError"]
    # The failed request never reached the scripted model's prompt log; every other did.
    assert _rebuilt(path, replied_only=True) == _by_conversation(server.prompts)[game_id]
    dropped = [d for r in conv.replies.values() for d in r["dropped"]]
    assert dropped == [{"name": "python", "why": "invalid", "arguments": '{"code": "print(1)'}]
    assert [r["cut"] for r in conv.replies.values()].count("length") == 1
    corrections = [ln["correction"] for ln in conv.messages.values() if ln.get("correction")]
    assert len(corrections) == 3 and "dropped_call" in corrections[1]
    notes = [ln for ln in conv.lines if ln["type"] == "notes"]
    assert any("Plan" in ln["sections"]["set"] for ln in notes)


def test_sigkill_mid_game_leaves_a_readable_conversation(tmp_path):
    """A real `duck play --policy llm` process killed with SIGKILL while it plays."""
    replies = [{"content": f"Plan: move {i}", "reasoning": "think " * 50,
                "code": "print(valid_actions)" if i % 2 else "action('RIGHT')", "delay_s": 0.05} for i in range(4)]
    out = tmp_path / "run"
    with StubServer(FixedModel(replies, loop=True)) as url:
        proc = subprocess.Popen([sys.executable, "-m", "duck.cli", "play", "--games", str(BUNDLED), "--only", "zs01",
                                 "--policy", "llm", "--model-url", url, "--max-actions", "500", "--out", str(out),
                                 "--set", "agent.fallback=null", "model.retries=0"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        live = out / "conversations" / f"{_game_id('zs01')}.jsonl"
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                if live.exists() and live.read_text().count('"type":"request"') >= 6:
                    break
                time.sleep(0.02)
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    assert live.exists() and not live.with_name(live.name + ".gz").exists()
    conv = read_conversation(live)
    assert conv.end is None and len(conv.requests) >= 6 and conv.start["policy"] == "llm"
    grids = dict(read_record(record_of(live)).grids())
    for n in range(len(conv.requests)):  # every request is whole, images included
        msgs = conv.request_messages(n, grids)
        assert msgs[0]["role"] == "system" and msgs[1]["content"][0]["image_url"]["url"].startswith("data:image/png")


def _cli_stub(args: list[str]):
    p = subprocess.Popen([sys.executable, "-m", "duck.cli", "stub-server", "--port", "0", *args], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, json.loads(p.stdout.readline())["url"]


LOOP = [{"content": "World model: walls are black.", "reasoning": "look " * 300, "code": "print(valid_actions)"},
        {"content": "Plan: right", "code": "action('RIGHT')"},
        {"tool_calls": [{"name": "python", "arguments": '{"code": "action(\'UP\')'}]},
        {"code": "notes['Open questions'] = 'what is yellow?'\naction(['DOWN', 'DOWN'])"},
        {"content": "no call this time"},
        {"code": "for a in ['LEFT', 'UP']:\n    r = action(a)\nprint(r['state'])"}]


def test_replaying_a_saved_conversation_plays_the_same_actions(tmp_path):
    """Record a run, replay its conversation through `duck stub-server --conversation --strict`
    and the agent on the same game: the same requests (the server refuses any other) and the
    same actions. Then the check bites: a changed prompt is refused at its first request."""
    game_id = _game_id("zs01")
    extra = ("agent.context_tokens=5000", "model.max_output_tokens=600")
    first = tmp_path / "first" / "records" / f"{game_id}.jsonl"
    with StubServer(FixedModel(LOOP, loop=True)) as url:
        play_game(GameSource.offline(BUNDLED), game_id, AgentPolicy(0, _config(None, *extra), model_url=url),
                  max_actions=40, record_path=first)
    saved = find_conversation(first)
    assert any(ln.get("kind") == "evict" for ln in read_conversation(saved).lines)

    proc, url = _cli_stub(["--conversation", str(saved), "--strict"])
    try:
        again = tmp_path / "again" / "records" / f"{game_id}.jsonl"
        res = play_game(GameSource.offline(BUNDLED), game_id, AgentPolicy(0, _config(None, *extra), model_url=url),
                        max_actions=40, record_path=again)
    finally:
        proc.terminate()
        proc.wait(10)
    assert res.error is None and res.end_reason == "max_actions"
    assert [a["action"] for a in read_record(again).actions] == [a["action"] for a in read_record(first).actions]
    a, b = _rebuilt(saved), _rebuilt(find_conversation(again))
    assert [comparable(x) for x in a] == [comparable(x) for x in b]

    model = ConversationModel(read_conversation(saved), strict=True)
    with StubServer(model) as url:
        cfg = _config(None, *extra, "agent.guards=false", "agent.failures_before_fallback=1")
        res = play_game(GameSource.offline(BUNDLED), game_id, AgentPolicy(0, cfg, model_url=url), max_actions=40,
                        record_path=tmp_path / "changed" / "records" / f"{game_id}.jsonl")
    assert res.actions == 0 and "409" in (res.error or "")
    assert model.mismatches[0]["request"] == 0 and model.mismatches[0]["message"] == 0  # the system prompt


def test_a_policy_without_a_model_writes_none_and_the_switch_turns_them_off(tmp_path):
    play_folder(BUNDLED, tmp_path / "explorer", _config(None, "play.policy=explorer", "play.max_actions=20"))
    assert not (tmp_path / "explorer" / "conversations").exists()
    with StubServer(SolutionModel(BUNDLED)) as url:
        p = subprocess.run([sys.executable, "-m", "duck.cli", "play", "--games", str(BUNDLED), "--only", "zb01",
                            "--model-url", url, "--no-conversations", "--out", str(tmp_path / "off"),
                            "--set", "agent.fallback=null"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["games"][_game_id("zb01")]["score"] == 100.0
    assert (tmp_path / "off" / "records").is_dir() and not (tmp_path / "off" / "conversations").exists()


def test_the_writer_references_only_the_board_the_record_has(tmp_path):
    grid = np.zeros((64, 64), dtype=np.int8)
    grid[3, 5] = 9
    other = grid.copy()
    other[0, 0] = 2

    def part(g, scale):
        png = grid_png(g, scale)
        return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}

    w = ConversationWriter(tmp_path / "c.jsonl", board=lambda: (7, grid), start={"game_id": "g"})
    sent = [{"role": "user", "content": [{"type": "text", "text": "board"}, part(grid, 4), part(other, 4), part(grid, 2)]},
            {"role": "assistant", "content": "a lone \ud800 surrogate, é", "reasoning": "r", "reasoning_content": "r"}]
    ids = [w.message(m, turn=0) for m in sent]
    w.request(ids, turn=0, call=0)
    assert w.close("done") == tmp_path / "c.jsonl.gz"
    conv = read_conversation(tmp_path / "c.jsonl.gz")
    stored = conv.messages[0]["message"]["content"]
    assert stored[1]["image_url"] == {"board": {"step": 7, "scale": 4}} and stored[3]["image_url"]["board"]["scale"] == 2
    assert stored[2] == sent[0]["content"][2]  # not the record's board: kept as it was
    assert conv.messages[1]["rc"] == 1 and "reasoning_content" not in conv.messages[1]["message"]
    assert conv.request_messages(0, {7: grid}) == sent


def test_the_reader_takes_a_torn_line_and_prefers_the_finished_file(tmp_path):
    record = tmp_path / "records" / "g.jsonl"
    path = conversation_path(record)
    assert path == tmp_path / "conversations" / "g.jsonl" and record_of(path) == record
    w = ConversationWriter(path, start={"game_id": "g"})
    w.begin(model="m")
    w.message({"role": "system", "content": "s"}, kind="system")
    w.request([0], turn=0, call=0)
    with open(path, "a") as f:
        f.write('{"type":"message","id":1,"mess')  # the kill came mid-line
    conv = read_conversation(path)
    assert conv.torn and conv.start["model"] == "m" and len(conv.requests) == 1 and conv.end is None
    assert find_conversation(record) == path
    path.write_text(path.read_text().rsplit("\n", 1)[0] + "\n")
    w.close("stopped")
    assert find_conversation(record) == path.with_name("g.jsonl.gz") and not path.exists()
    assert read_conversation(find_conversation(record)).end["reason"] == "stopped"
    with pytest.raises(ValueError, match="not a conversation"):
        (tmp_path / "x.jsonl").write_text('{"type":"header"}\n')
        read_conversation(tmp_path / "x.jsonl")
    assert os.listdir(tmp_path / "conversations") == ["g.jsonl.gz"]


def test_duck_ab_writes_conversations_and_the_merge_keeps_them(tmp_path):
    from duck.cli import main
    with StubServer(SolutionModel(BUNDLED)) as url:
        arms = []
        for name, actions in (("a", 30), ("b", 40)):
            arms.append(tmp_path / f"{name}.toml")
            arms[-1].write_text(f'[play]\npolicy = "llm"\nmax_actions = {actions}\n[model]\nurls = ["{url}"]\n'
                                'name = "stub"\nretries = 0\n[agent]\nfallback = "explorer"\n')
        for i in (1, 2):
            assert main(["ab", "--a", str(arms[0]), "--b", str(arms[1]), "--games", str(BUNDLED), "--passes", "1",
                         "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"), "--boot", "200"]) == 0
    assert main(["ab-merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"),
                 "--boot", "200"]) == 0
    for arm in ("a", "b"):
        convs = {c.game_id: c for c in map(read_conversation, tmp_path.glob(f"m/{arm}/p000/conversations/*.jsonl*"))}
        assert sorted(convs) == sorted(g.game_id for g in GameSource.offline(BUNDLED).games())
        # (both arms talk to one SolutionModel, which plays each game once: B's calls then fail)
        assert all(c.end is not None and c.requests for c in convs.values())
