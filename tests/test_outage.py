"""A model game waits out an outage of its server (issue 35, "Games wait for the server"):
`duck play --policy llm` against a real stub server subprocess that is stopped mid-game and
started again on the same port; the scheduler's slot gate while a game is parked; the
notebook-side flag that says whether the server is coming back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from conftest import BUNDLED, ROOT
from duck.game.gateway import free_port
from duck.game.source import GameSource
from duck.llm.health import ModelHealth
from duck.play.conversation import read_conversation
from duck.play.record import read_record
from duck.play.session import play_game
from duck.policies import FallbackPolicy, Parking
from scheduler.policy import make_policy as make_scheduler_policy
from scheduler.runner import Runner

OUTAGE_LINE = "The model server restarted after an outage; nothing was played on this game meanwhile"


def _stub(port: int, replies) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "duck.cli", "stub-server", "--port", str(port), "--replies",
                          str(replies), "--loop"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         cwd=ROOT)
    json.loads(p.stdout.readline())  # listening
    return p


def _actions(record) -> int:
    try:
        return sum(1 for line in record.read_text().splitlines() if line.startswith('{"type":"action"'))
    except OSError:
        return 0


def test_duck_play_parks_a_game_while_its_server_is_away_and_resumes_it_with_the_model(tmp_path):
    """The server stops after a few actions and comes back 8 s later: the game plays no action
    meanwhile, is not handed to the explorer, and its next request carries the whole history
    and the one outage line."""
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([{"content": "step", "code": "action('RIGHT')"}]))
    port = free_port()
    server = _stub(port, replies)
    out = tmp_path / "run"
    play = subprocess.Popen([sys.executable, "-m", "duck.cli", "play", "--games", str(BUNDLED), "--only", "zs01",
                             "--policy", "llm", "--model-url", f"http://127.0.0.1:{port}", "--max-actions", "12",
                             "--out", str(out), "--json", "--set", "model.retries=0", "model.backoff_s=0.1",
                             "model.timeout_s=5", "agent.failures_before_fallback=1", "play.model_fallback=true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    record = out / "records" / "zs01-00000001.jsonl"
    try:
        deadline = time.monotonic() + 90
        while _actions(record) < 4 and time.monotonic() < deadline and play.poll() is None:
            time.sleep(0.1)
        server.kill()
        server.wait()
        time.sleep(1)  # a reply already received when the server went may still play its action
        before = _actions(record)
        time.sleep(7)
        during = _actions(record) - before
        server = _stub(port, replies)
        stdout, stderr = play.communicate(timeout=120)
    finally:
        server.kill()
        play.kill()
    assert play.returncode == 0, stderr[-3000:]
    rec = read_record(record)
    assert 4 <= before < 12 and during == 0 and len(rec.actions) == 12
    assert not any(e["kind"] == "fallback" for e in rec.events)
    parked = next(e["t"] for e in rec.events if e["kind"] == "parked")
    resumed = next(e["t"] for e in rec.events if e["kind"] == "resumed")
    assert resumed - parked >= 5 and not any(parked < a["t"] < resumed for a in rec.actions)
    conv = read_conversation(out / "conversations" / "zs01-00000001.jsonl.gz")
    line = [i for i, m in conv.messages.items() if OUTAGE_LINE in json.dumps(m)]
    assert len(line) == 1  # one line, and every later request sends the history up to it and past it
    later = [r for r in conv.requests if r["t"] > resumed]
    assert later and all(r["ids"][0][0] == 0 and r["ids"][-1][1] >= line[0] for r in later)


def test_a_game_waits_for_the_server_only_while_it_is_coming_back(tmp_path):
    """The flag's two states: coming back (the game parks, and resumes when the flag clears),
    gone (the explorer takes it at once)."""
    health = ModelHealth(tmp_path / "down")
    health.mark_down("restarting", coming_back=True)
    assert health.down() and health.coming_back() and health.down_for_s() < 5
    health.mark_down("no restart left")
    assert health.down() and not health.coming_back()
    health.mark_up()
    assert not health.down() and not health.coming_back() and health.down_for_s() == 0

    source = GameSource.offline(BUNDLED)
    waited: list[bool] = []

    class Waits:
        """A model policy whose only request meets a down server."""
        name = "llm"

        def __init__(self, parking):
            self.parking = parking

        def play(self, session):
            waited.append(self.parking.wait(session, "test outage"))
            from duck.game.actions import Action
            session.step(Action(1))

    class Steps:
        name = "explorer"

        def play(self, session):
            from duck.game.actions import Action
            session.step(Action(2))

    health.mark_down("restarting", coming_back=True)
    threading.Timer(1.5, health.mark_up).start()
    parking = Parking(health, poll_s=0.1)
    res = play_game(source, "zb01-00000001", FallbackPolicy(lambda: Waits(parking), Steps, health),
                    max_actions=5, record_path=tmp_path / "a.jsonl")
    rec = read_record(tmp_path / "a.jsonl")
    assert waited == [True] and res.actions == 1 and [e["kind"] for e in rec.events].count("resumed") == 1
    health.mark_down("no restart left")
    res = play_game(source, "zb01-00000001", FallbackPolicy(lambda: Waits(parking), Steps, health),
                    max_actions=5, record_path=tmp_path / "b.jsonl")
    assert res.actions == 1 and read_record(tmp_path / "b.jsonl").actions[0]["action"] != \
        read_record(tmp_path / "a.jsonl").actions[0]["action"]  # the explorer's action, not the model's


def test_a_parked_game_frees_its_slot_and_gets_one_only_when_it_unparks(tmp_path):
    """Three games, two slots: the first parks (its server down) and frees its slot; the
    second plays on; the third, queued, does not start while a game is parked (it would only
    start its kernel to park too), and starts once the first unparks."""
    health = ModelHealth(tmp_path / "down")
    order: list[str] = []
    up_at: list[float] = []

    def mark_up():
        up_at.append(time.monotonic())
        health.mark_up()

    class Parked:  # the real session; says when its slot was given up for the outage
        def __init__(self, session):
            self.session = session

        def __getattr__(self, name):
            return getattr(self.session, name)

        def yield_slot(self, why):
            self.session.yield_slot(why)
            if why == "parked":
                order.append("a parked")

    class Parks:
        name = "llm"

        def play(self, session):
            from duck.game.actions import Action
            session.step(Action(1))
            order.append("a parks")
            health.mark_down("test", coming_back=True)
            threading.Timer(1.5, mark_up).start()
            assert Parking(health, poll_s=0.05).wait(Parked(session), "test")
            order.append("a resumes")
            session.step(Action(1))

    class Plays:
        name = "llm"

        def __init__(self, who):
            self.who, self.at = who, None

        def play(self, session):
            from duck.game.actions import Action
            while "a parked" not in order:  # (b holds its slot until a's is given up: else the
                # slot b frees at its end could go to c in the moment before a parks)
                time.sleep(0.01)
            self.at = time.monotonic()
            order.append(f"{self.who} plays")
            session.step(Action(1))

    third = Plays("c")
    policies = {"zb01-00000001": Parks(), "zc01-00000001": Plays("b"), "zs01-00000001": third}
    runner = Runner(make_scheduler_policy("field"), source=GameSource.offline(BUNDLED), slots=2, budget_s=60,
                    play_policy=policies.get, records_dir=tmp_path / "records", max_actions=5)
    result = runner.run(list(policies))
    assert order.index("a parks") < order.index("a resumes") and "b plays" in order and "c plays" in order
    assert third.at > up_at[0], (order, third.at, up_at)  # the third game waited for the server
    releases = [(g, why) for _, g, kind, why in result.timeline if kind == "release"]
    assert ("zb01-00000001", "parked") in releases
    assert all(r.error is None for r in result.games.values())


def test_the_health_probe_gives_up_on_a_wedged_server_within_its_time_out(tmp_path):
    """A server that accepts the chat and sends nothing (the stand-in's hang): the probe says
    no within its time-out, not after the client's 60 s stall limit (the notebook's monitor
    sat in one probe so, and never marked the server down)."""
    import os

    from duck.llm.health import probe_model
    from devkit.rehearse.layout import write_standin
    port = free_port()
    p = subprocess.Popen([str(write_standin(tmp_path / "vllm")), "serve", "m", "--port", str(port),
                          "--served-model-name", "stub"], env=dict(os.environ, DUCK_STANDIN_HANG_AFTER_S="0.01"),
                         stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()  # serving
        time.sleep(0.1)
        t = time.monotonic()
        assert probe_model(f"http://127.0.0.1:{port}", 2.0) is False
        assert time.monotonic() - t < 30  # its 2 s, not the client's 60 s stall limit
    finally:
        p.kill()


def test_a_server_that_refuses_is_up_and_one_that_is_gone_is_down(tmp_path):
    """The probe that decides whether a game parks: a server answering 410 (the stub's replies
    used up) is up (the game's failures are its own: no outage, no 15-minute wait in
    `duck play`); the same port with nothing listening is down."""
    from duck.llm.health import probe_model

    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([{"content": "one", "code": "action('RIGHT')"}]))
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "duck.cli", "stub-server", "--port", str(port), "--replies",
                          str(replies)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        json.loads(p.stdout.readline())
        assert probe_model(url, 5.0)  # the one reply
        assert probe_model(url, 5.0)  # 410 Gone: refused, but up
    finally:
        p.terminate()
        p.wait(10)
    assert not probe_model(url, 5.0)
