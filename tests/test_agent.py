"""The agent loop over real HTTP against the stub server, on the bundled games.

These use a stand-in kernel (FakeKernel below: in-process, with the result shape of
duck.sandbox.host) so they test the loop, not the sandbox; tests/test_agent_kernel.py runs the
same loop on the real kernel."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from duck.agent.loop import AgentPolicy
from duck.agent.turn import count_images
from duck.config import load_config
from duck.game.actions import MODEL_NAMES, Action, display
from duck.game.source import GameSource
from duck.play.session import play_game
from duck.policies import make_policy
from duck.sandbox.batch_guards import Guards
from duck.sandbox.host import CallResult, Kernel
from duck.play.conversation import read_conversation
from duck.play.record import read_record
from devkit.stub.models import FixedModel, SolutionModel, action_code
from devkit.stub.server import StubServer

BUNDLED = Path(__file__).resolve().parent / "games"

def _action(a: Any) -> Action:
    if isinstance(a, dict):
        return Action.at(a["row"], a["col"])
    return Action(MODEL_NAMES.id(a))


class FakeKernel:
    """The surface of duck.sandbox.host.Kernel the agent uses: run (a real CallResult), notes,
    act, start_soon, close, install_guards (it has no action host: its actions go straight to the
    session, so it takes no guards). test_the_fake_kernel_has_the_real_kernels_surface keeps it honest."""

    def __init__(self, session: Any, cfg: Any = None) -> None:
        self.session = session
        self.ns: dict[str, Any] = {"notes": {}}
        self.notes: dict[str, Any] = {}
        self.closed = 0
        self.calls: list[dict[str, Any]] = []

    def run(self, code: str, *, timeout_s: float | None = None, info: dict | None = None) -> CallResult:
        executed: list[str] = []
        results: list[dict] = []
        session = self.session

        def action(actions: Any) -> dict:
            before_grid = session.obs.grid
            for a in actions if isinstance(actions, list) else [actions]:
                before = session.obs
                obs = session.step(_action(a), info)
                executed.append(display(_action(a)))
                if obs.levels_completed != before.levels_completed or obs.state != "NOT_FINISHED":
                    break
            res = {"executed": bool(executed), "state": session.obs.state,
                   "board_changed": bool((before_grid != session.obs.grid).any()),
                   "animation": f"{len(executed)} actions played"}
            results.append(res)
            return res

        self.ns.update(action=action, current_frame=SimpleNamespace(level=session.obs.levels_completed + 1,
                                                                   grid=session.obs.grid),
                       valid_actions=list(session.obs.available_actions))
        buf, error = io.StringIO(), None
        with contextlib.redirect_stdout(buf):
            try:
                exec(code, self.ns)
            except Exception as e:  # noqa: BLE001 - shown to the model like a traceback
                error = f"{type(e).__name__}: {e}"
        self.calls.append({"code": code, "kw": {"info": info}, "actions": executed})
        self.notes = dict(self.ns["notes"])
        return CallResult("error" if error else "ok", stdout=buf.getvalue(), error=error, actions=executed,
                          action_results=results)

    def act(self, action: Action, info: dict | None = None) -> None:
        self.session.step(action, info)

    def install_guards(self, guards: Guards) -> bool:
        return False

    def start_soon(self) -> None:
        pass

    def close(self) -> None:
        self.closed += 1



def test_the_fake_kernel_has_the_real_kernels_surface():
    """What the agent calls on FakeKernel is on duck.sandbox.host.Kernel, with the same parameters."""
    for name in ("run", "act", "install_guards", "start_soon", "close"):
        fake, real = inspect.signature(getattr(FakeKernel, name)), inspect.signature(getattr(Kernel, name))
        assert list(fake.parameters) == list(real.parameters), name
    assert isinstance(Kernel.notes, property)


def _config(**agent):
    cfg = load_config(overrides=["model.retries=0", "model.backoff_s=0.01", "model.name=stub"])
    for k, v in agent.items():
        setattr(cfg.agent, k, v)
    return cfg


def _capture(replies, loop=False):
    model = FixedModel(replies, loop=loop)
    return model, model.requests


def _play(tmp_path, game, model, max_actions=60, kernel=FakeKernel, **agent):
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith(game))
    agent.setdefault("fallback", None)
    agent.setdefault("failures_before_fallback", 1)
    with StubServer(model) as url:
        policy = AgentPolicy(seed=0, model_url=url, config=_config(**agent), kernel_factory=kernel)
        res = play_game(source, game_id, policy, max_actions=max_actions, record_path=tmp_path / f"{game}.jsonl")
    return res, read_record(tmp_path / f"{game}.jsonl")


def _texts(message) -> str:
    c = message["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)


def test_scripted_model_wins_every_bundled_game(tmp_path):
    source = GameSource.offline(BUNDLED)
    with StubServer(SolutionModel(BUNDLED)) as url:
        for g in source.games():
            policy = AgentPolicy(seed=0, model_url=url, config=_config(), kernel_factory=FakeKernel)
            res = play_game(source, g.game_id, policy, max_actions=100, record_path=tmp_path / f"{g.game_id}.jsonl")
            rec = read_record(tmp_path / f"{g.game_id}.jsonl")
            assert res.state == "WIN" and res.score == 100.0, res
            kinds = [e["kind"] for e in rec.events]
            assert kinds.count("notes") == res.levels + 1  # one per level, one at the end
            model = [e["data"] for e in rec.events if e["kind"] == "model"]
            assert all(m["prompt_tokens"] and m["latency_s"] >= 0 and m["seed"] is not None for m in model)
            assert all(a["info"]["turn"] >= 0 and "seed" in a["info"] for a in rec.actions)


def test_corrective_messages_for_broken_replies(tmp_path):
    model, seen = _capture([
        {"content": "I think I should move."},  # no tool call
        {"tool_calls": [{"name": "python", "arguments": "{not json"}]},
        {"tool_calls": [{"name": "python", "arguments": '{"code": "   "}'}]},
        {"tool_calls": [{"name": "bash", "arguments": '{"code": "ls"}'}]},
        {"reasoning": "long " * 50, "finish_reason": "length"},  # hit the output cap, no call
        {"content": "Plan: move", "code": "action('RIGHT')"},
    ])
    res, rec = _play(tmp_path, "zb01", model)
    assert res.actions == 1
    last = seen[-1]["messages"]
    corrections = [_texts(m) for m in last if m["role"] in ("user", "tool") and isinstance(m["content"], str)]
    assert len(corrections) == 5
    # A readable but wrong call is answered as its own tool result; a reply without a call, or
    # whose only call was unreadable (and so dropped by the client), by a user message.
    assert [m["role"] for m in last if isinstance(m.get("content"), str) and m["role"] != "system"
            and m["role"] != "assistant"] == ["user", "user", "tool", "tool", "user"]
    assert "no tool call" in corrections[0]
    assert "could not be read" in corrections[1] and "</parameter>" in corrections[1]
    assert all(json.loads(c["function"]["arguments"]) is not None
               for m in last for c in m.get("tool_calls") or [])  # no unreadable call in the history
    assert "had no code" in corrections[2]
    assert "no tool named `bash`" in corrections[3]
    assert "output limit" in corrections[4]
    # The broken replies stay in the history as they were generated (nothing is rewritten).
    assert [m["role"] for m in last[:3]] == ["system", "user", "assistant"]


def test_code_under_another_single_argument_name_still_runs(tmp_path):
    model, seen = _capture([{"tool_calls": [{"name": "python", "arguments": '{"colour": "action(\'UP\')"}'}]}])
    res, _ = _play(tmp_path, "zb01", model)
    assert res.actions == 1


def test_a_cut_reply_is_kept_and_corrected(tmp_path):
    model, seen = _capture([{"reasoning": "partial " * 40, "stall_s": 2.5, "code": "x = 1"},
                            {"content": "ok", "code": "action('RIGHT')"}])
    res, rec = _play(tmp_path, "zb01", model, max_actions=1)
    cfg_timeout = [e for e in rec.events if e["kind"] == "timeout"]
    assert cfg_timeout  # the cut is in the record
    last = seen[-1]["messages"]
    cut = [m for m in last if m["role"] == "assistant" and m.get("reasoning", "").startswith("partial")]
    assert cut and "time limit" in _texts(last[last.index(cut[0]) + 1])
    assert res.actions == 1


@pytest.fixture(autouse=True)
def _short_model_timeout(monkeypatch):
    """The cut test needs a short request limit (model.timeout_s, model.stall_s, read by
    load_config from the environment); the others do not care."""
    monkeypatch.setenv("DUCK_MODEL__TIMEOUT_S", "1.0")
    monkeypatch.setenv("DUCK_MODEL__STALL_S", "1.0")


def test_second_call_of_a_reply_is_skipped_after_an_action(tmp_path):
    model, seen = _capture([
        {"tool_calls": [{"name": "python", "arguments": json.dumps({"code": "action('RIGHT')"})},
                        {"name": "python", "arguments": json.dumps({"code": "action('RIGHT')"})}]},
        {"content": "done", "code": "print(1)"}])
    res, _ = _play(tmp_path, "zb01", model)
    assert res.actions == 1
    tools = [m for m in seen[-1]["messages"] if m["role"] == "tool"]
    assert "Not run" in tools[1]["content"]


def test_the_models_notes_dict_is_the_memory_the_record_keeps(tmp_path):
    """No notes are parsed from the model's text and none are pushed into the turn (structured
    notes lost in the field's A/Bs): the memory is the kernel's `notes` dict, which the record
    keeps at the end of each level and of play, and the conversation wherever it changed."""
    solution = json.loads(next(BUNDLED.glob("zb01/*/solution.json")).read_text())["levels"]
    model, seen = _capture([
        {"content": "World model: a maze.\nPlan: bump the wall.", "code": "notes['goal'] = 'green'\naction(['UP'] * 18)"},
        {"content": "Trying the path now.", "code": action_code(solution[0])},
        {"content": "Looking.", "code": "print(1)"},
    ])
    res, rec = _play(tmp_path, "zb01", model)
    assert [a["action"] for a in rec.actions][18] == [0]  # the automatic RESET after GAME_OVER
    assert rec.actions[18]["info"] == {"auto": "reset after GAME_OVER"}
    after_game_over = _texts(seen[1]["messages"][-1])
    assert "Outcome: GAME_OVER. Level restarted: one RESET was played for you" in after_game_over
    assert not any(w in json.dumps(seen[2]["messages"][-1]) for w in ("World model", "a maze", "green"))
    notes = [(e["message"], e["data"]) for e in rec.events if e["kind"] == "notes"]
    assert notes == [("end of level 1", {"goal": "green"}), ("end of play (NOT_FINISHED, 1 levels)", {"goal": "green"})]
    conv = read_conversation(next((tmp_path / "conversations").glob("zb01*")))
    assert [(ln["turn"], ln["sections"]) for ln in conv.lines if ln["type"] == "notes"] == [
        (0, {"set": {"goal": "green"}, "unset": []})]


def test_requests_are_prefix_stable_across_turns(tmp_path):
    replies = [{"content": f"Plan: step {i}", "reasoning": "r" * 300,
                "code": "action('RIGHT')" if i % 2 else "print(current_frame.level)"} for i in range(16)]
    model, seen = _capture(replies)
    with StubServer(model) as url:
        source = GameSource.offline(BUNDLED)
        game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
        policy = AgentPolicy(seed=0, model_url=url, config=_config(fallback=None, failures_before_fallback=1),
                             kernel_factory=FakeKernel)
        play_game(source, game_id, policy, max_actions=100, record_path=tmp_path / "r.jsonl")
    for prev, now in zip(seen, seen[1:]):
        assert now["messages"][:len(prev["messages"])] == prev["messages"]


def test_a_history_at_the_image_cap_is_trimmed_before_the_next_turn_not_refused(tmp_path):
    """Issue 35: the board went in even when the history already held `images_per_prompt`
    images, and the server (here the stub, refusing like vLLM 0.33's --limit-mm-per-prompt)
    answered HTTP 400 until the model's play ended. Now the turn trims first: requests reach
    the cap and never pass it, and no request fails."""
    cap = 6
    model, seen = _capture([{"content": "Plan: go", "code": "action('RIGHT')"}], loop=True)
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
    cfg = _config(fallback=None, failures_before_fallback=1)
    cfg.model.serve.images_per_prompt = cap
    with StubServer(model, max_images=cap) as url:
        policy = AgentPolicy(seed=0, model_url=url, config=cfg, kernel_factory=FakeKernel)
        res = play_game(source, game_id, policy, max_actions=20, record_path=tmp_path / "r.jsonl")
    rec = read_record(tmp_path / "r.jsonl")
    images = [count_images(body["messages"]) for body in seen]
    assert not [e for e in rec.events if e["kind"] == "error"] and res.actions == 20, images
    assert max(images) == cap and policy.ctx.evictions >= 2, images  # at the cap, then trimmed


def test_a_cut_reply_enters_the_history_with_its_thinking_tail_and_the_record_keeps_all(tmp_path):
    from duck.play.conversation import find_conversation, read_conversation
    thought = "".join(f"idea {k}: try the left door.\n" for k in range(400))
    model, seen = _capture([{"reasoning": thought, "content": "", "finish_reason": "length"},
                            {"content": "Plan", "code": "action('RIGHT')"}])
    res, rec = _play(tmp_path, "zs01", model, max_actions=1)
    assert res.actions == 1
    past = [m for m in seen[1]["messages"] if m["role"] == "assistant"][0]
    assert past["reasoning"].startswith("[") and "cut at the output token limit" in past["reasoning"].split("\n")[0]
    assert thought.endswith(past["reasoning"].split("\n", 1)[1]) and len(past["reasoning"]) < 4200
    conv = read_conversation(find_conversation(tmp_path / "zs01.jsonl"))
    replies = [ln for ln in conv.lines if ln.get("type") == "reply"]
    assert replies[0]["thinking_dropped"] > 6000 and replies[0]["reasoning"] == thought
    assert conv.reply_of(0)["reasoning"] == thought  # a replay serves what the model wrote


@pytest.mark.parametrize("fallback", [None, "explorer"])
def test_a_context_no_turn_fits_ends_model_play_with_a_clear_event(tmp_path, fallback):
    """The bug: with a budget no turn fits, the loop dropped turn after turn without acting,
    forever. Now model play ends at once: the fallback plays on, or the game ends on the error."""
    model = FixedModel([{"content": "Plan", "code": "action('RIGHT')"}], loop=True)
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
    cfg = _config(fallback=fallback, failures_before_fallback=1, context_tokens=1200)
    cfg.model.max_output_tokens = 1000  # 200 tokens left for a prompt: not even the system prompt fits
    server = StubServer(model)
    with server as url:
        policy = make_policy("llm", 0, config=cfg, model_url=url, kernel_factory=FakeKernel)
        res = play_game(source, game_id, policy, max_actions=5, record_path=tmp_path / "r.jsonl")
    rec = read_record(tmp_path / "r.jsonl")
    assert server.requests == []  # nothing too long was ever sent
    errors = [e["message"] for e in rec.events if e["kind"] == "error"]
    if fallback is None:
        assert res.actions == 0 and "ContextTooSmall" in res.error and "outgrow the context budget" in res.error
    else:
        assert res.actions == 5  # the explorer plays on
        assert any("ContextTooSmall" in e["message"] for e in rec.events if e["kind"] == "fallback")
    assert sum("context:" in m for m in errors) == 1  # one turn tried, not turn after turn


def test_turns_that_keep_outgrowing_the_budget_without_acting_end_model_play(tmp_path):
    big = {"content": "Look", "reasoning": "r" * 200, "code": "print('x' * 5000)"}
    model = FixedModel([big], loop=True)

    class Loud(FakeKernel):
        def run(self, code, **kw):
            r = super().run(code, **kw)
            r.stdout = "ab" * 3000  # every call's output is large: a turn outgrows the budget
            return r

    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
    cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.context_tokens=12000",
                                 "agent.fallback=null", "agent.failures_before_fallback=1"])
    assert cfg.model.max_output_tokens == 3000  # the plan's quarter of the budget
    with StubServer(model) as url:
        policy = AgentPolicy(seed=0, model_url=url, config=cfg, kernel_factory=Loud)
        res = play_game(source, game_id, policy, max_actions=5, record_path=tmp_path / "r.jsonl")
    rec = read_record(tmp_path / "r.jsonl")
    assert res.actions == 0 and "ContextTooSmall" in res.error and "3 turns in a row" in res.error
    assert sum(e["kind"] == "error" and "context:" in e["message"] for e in rec.events) == 3


def test_eviction_in_the_loop_keeps_most_requests_cached(tmp_path):
    replies = [{"content": f"Plan: step {i}", "reasoning": "r" * 1500, "code": "action('RIGHT')"}
               for i in range(40)]
    model = FixedModel(replies)
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
    server = StubServer(model)
    cfg = _config(fallback=None, failures_before_fallback=1, context_tokens=8000)
    cfg.model.max_output_tokens = 1000
    with server as url:
        policy = AgentPolicy(seed=0, model_url=url, kernel_factory=FakeKernel, config=cfg)
        play_game(source, game_id, policy, max_actions=40, record_path=tmp_path / "r.jsonl")
    stats = server.stats()
    assert policy.ctx.evictions >= 2
    assert max(r["prompt_tokens"] for r in server.requests) <= 8000
    assert stats["prefix_share_mean"] > 0.8


def test_repeated_server_failure_hands_the_game_to_the_explorer(tmp_path):
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zc01"))
    with StubServer(FixedModel([{"status": 503}], loop=True)) as url:
        policy = make_policy("llm", 0, config=_config(fallback="explorer", failures_before_fallback=2),
                             model_url=url, kernel_factory=FakeKernel)
        res = play_game(source, game_id, policy, max_actions=12, record_path=tmp_path / "zc01.jsonl")
    rec = read_record(tmp_path / "zc01.jsonl")
    assert res.actions == 12 and res.end_reason == "max_actions"
    assert sum("model request failed" in e["message"] for e in rec.events if e["kind"] == "error") == 2
    fallback = [e["message"] for e in rec.events if e["kind"] == "fallback"]
    assert len(fallback) == 1 and "ModelDown" in fallback[0] and "explorer takes over" in fallback[0]


@pytest.mark.parametrize("fail", ["error", "drop", "end"])
def test_replies_that_break_mid_stream_count_as_failures_and_are_never_kept(tmp_path, fail):
    """Issue 35: a server that breaks every reply after its first tokens (an error chunk, a
    reset, a body without a finish reason) fails the requests: no partial reply enters the
    history, the model never reads "time limit" nor "no tool call", and after
    `failures_before_fallback` failed requests the explorer takes over (ModelDown)."""
    model, seen = _capture([{"reasoning": "partial " * 40, "content": "x", "code": "action('RIGHT')", "fail": fail}],
                           loop=True)
    source = GameSource.offline(BUNDLED)
    game_id = next(g.game_id for g in source.games() if g.game_id.startswith("zc01"))
    with StubServer(model) as url:
        policy = make_policy("llm", 0, config=_config(fallback="explorer", failures_before_fallback=2),
                             model_url=url, kernel_factory=FakeKernel)
        res = play_game(source, game_id, policy, max_actions=5, record_path=tmp_path / "zc01.jsonl",
                        deadline=time.monotonic() + 20)  # (a kept broken reply never acts: the deadline ends it)
    rec = read_record(tmp_path / "zc01.jsonl")
    failed = [e["message"] for e in rec.events if e["kind"] == "error"]
    assert len(failed) == 2 and all("mid-reply" in m and "not kept" in m for m in failed)
    assert not [e for e in rec.events if e["kind"] in ("model", "timeout")]  # no reply was kept
    assert len(seen) == 2 and all(m["role"] != "assistant" for m in seen[-1]["messages"])
    fallback = [e["message"] for e in rec.events if e["kind"] == "fallback"]
    assert len(fallback) == 1 and "ModelDown" in fallback[0] and res.actions == 5


def test_turns_without_actions_get_a_nudge_then_a_fresh_turn(tmp_path):
    model, seen = _capture([{"content": "hmm", "code": "print(1)"}] * 16 + [{"content": "go", "code": "action('UP')"}])
    res, rec = _play(tmp_path, "zb01", model)
    msgs = seen[-1]["messages"]
    users = [_texts(m) for m in msgs if m["role"] == "user"]
    assert sum("6 calls in this turn without playing an action" in u for u in users) == 1
    assert "Your previous turn made 16 calls without playing an action" in users[-1]
    assert res.actions == 1


def test_a_live_models_extra_arguments_cannot_cap_its_calls(tmp_path):
    """Trace replays cap calls at the recorded action counts (devkit.replay.caps.ReplayKernel,
    a kernel of their own); a live model sending such arguments is not obeyed: its call runs
    uncapped and plays every action it asked for."""
    kernels: list[FakeKernel] = []

    def kernel(session, cfg):
        kernels.append(FakeKernel(session, cfg))
        return kernels[-1]

    args = json.dumps({"code": "action(['RIGHT', 'LEFT'])", "max_actions": 1, "on_cap": "stop"})
    model = FixedModel([{"tool_calls": [{"name": "python", "arguments": args}]}], loop=True)
    res, _ = _play(tmp_path, "zs01", model, max_actions=2, kernel=kernel)
    call = kernels[0].calls[0]
    assert set(call["kw"]) == {"info"} and len(call["actions"]) == 2
