"""The model-driven agent: one game, one kernel, one conversation (DESIGN §4).

A turn is one user message (what the last action did, the action counts, the valid
actions, the carried notes, the board as a PNG) followed by model calls until the model's
Python plays an action. Control flow is by exceptions that carry their message:
`Correction` (a reply without a usable tool call: the message goes back to the model),
`TurnStalled` (too many calls without an action: a fresh turn starts), `ContextFull` (the
turn alone outgrew the budget), `ModelDown` (the server keeps failing: the explorer takes
over), and the session's `PlayStopped` (budget, deadline, stop, win) which ends play.
"""

from __future__ import annotations

import json
import time
from typing import Any

from duck.config import Config, load_config
from duck.context import Context, ContextFull, outcome, python_tool, render, turn_message, without_animation
from duck.games import RESET
from duck.model import ContextOverflow, ModelClient, ModelError, join_urls, pick_url, request_seed
from duck.notes import Notes
from duck.play import PlayStopped, Session

REPLAY = {"max_actions": int, "on_cap": str}  # extra tool arguments a trace replay sends (the recorded caps)


class Correction(Exception):
    """A reply the loop cannot run; `message` is the short corrective sent back."""

    def __init__(self, reason: str, detail: Any = "") -> None:
        super().__init__(f"{reason}: {detail}")
        self.message = render("correct.j2", reason=reason, detail=detail)


class TurnStalled(Exception):
    """The turn made `calls` model calls without an action."""

    def __init__(self, calls: int) -> None:
        super().__init__(f"{calls} calls without an action")
        self.calls = calls


class ModelDown(Exception):
    """The model server failed `failures_before_fallback` requests in a row."""


def tool_calls(reply: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(call id, code, replay options) per tool call of a reply; raises Correction."""
    if getattr(reply, "dropped", None):  # the client dropped an unreadable call: say why, run none
        raise Correction("dropped_call", reply.dropped[0]["why"])
    if not reply.tool_calls:
        raise Correction(f"cut_{reply.cut}" if reply.cut else "no_tool_call")
    out = []
    for c in reply.tool_calls:
        if c.name != "python":
            raise Correction("wrong_tool", c.name)
        try:
            args = json.loads(c.arguments or "{}")
        except ValueError as e:
            raise Correction("bad_arguments", f"invalid JSON: {e}") from e
        if not isinstance(args, dict):
            raise Correction("bad_arguments", "the arguments are not an object")
        strings = [v for k, v in args.items() if isinstance(v, str) and k not in REPLAY]
        code = args.get("code", strings[0] if len(strings) == 1 else None)
        if not isinstance(code, str) or not code.strip():
            raise Correction("empty_code")
        out.append((c.id, code.rstrip(), {k: args[k] for k in REPLAY if isinstance(args.get(k), REPLAY[k])}))
    return out


class AgentPolicy:
    name = "llm"

    def __init__(self, seed: int = 0, model_url: str | list[str] | None = None, config: Config | None = None,
                 pass_: int = 0, url_index: int | None = None, kernel_factory: Any = None,
                 **options: Any) -> None:
        self.cfg = (config or load_config()).model_copy(deep=True)  # a shared config stays untouched
        for key, value in options.items():  # agent.* fields given by name (e.g. fallback=None)
            setattr(self.cfg.agent, key, value)
        self.urls = join_urls(model_url) or self.cfg.model.urls
        self.seed, self.pass_, self.url_index = seed, pass_, url_index
        self.kernel_factory = kernel_factory or _default_kernel

    def play(self, session: Session) -> None:
        a, game_id = self.cfg.agent, session.game.game_id
        self.client = ModelClient.from_config(self.cfg.model, self.urls, session=f"{game_id}:{self.pass_}",
                                              start=pick_url(self.urls, game_id, self.url_index))
        self.notes = Notes(limit=a.notes_chars)
        self.ctx = self._new_context()
        self.tools = python_tool(self.cfg.kernel.output_chars)
        kernel = self.kernel_factory(session, self.cfg)
        try:
            self._loop(session, kernel)
        except ModelDown as e:
            session.event("error", f"model server down ({e}); {a.fallback or 'nobody'} takes over")
            if a.fallback:
                kernel.close()
                from duck.policies import make_policy
                make_policy(a.fallback, self.seed).play(session)
        finally:
            kernel.close()
            session.event("notes", f"end of play ({session.obs.state}, {session.obs.levels_completed} levels)",
                          self.notes.as_dict())

    def _new_context(self) -> Context:
        a = self.cfg.agent
        return Context(render("system.j2", call_timeout_s=self.cfg.kernel.call_timeout_s,
                              output_chars=self.cfg.kernel.output_chars),
                       a.context_tokens, self.cfg.model.max_output_tokens, evict_to=a.evict_to)

    def _loop(self, session: Session, kernel: Any) -> None:
        a, last, stalled, self.level_start = self.cfg.agent, None, 0, 0
        for turn in range(10**9):
            if reason := session.stop_reason():
                raise PlayStopped(reason)
            if session.fresh is not None and session.fresh.is_set():
                # The scheduler's fresh start: a new conversation on the same board; the
                # notes (what was learnt) carry over, the stuck line of thought does not.
                self.ctx, last, stalled = self._new_context(), None, 0
                session.fresh.clear()
                session.event("fresh_start", f"fresh model context at turn {turn}", self.notes.as_dict())
            levels = session.obs.levels_completed
            kernel.new_turn()
            self.ctx.begin_turn(turn_message(session, a, self.notes, last, stalled, turn == 0, self.level_start),
                                index=turn, level=levels + 1, actions_before=session.game.actions)
            try:
                last, stalled = self._turn(session, kernel, turn), 0
                self.ctx.current.notes = "\n".join(f"{n['name']}: {n['text']}" for n in self.notes.view())
            except TurnStalled as e:
                last, stalled = None, e.calls
            except ContextFull as e:
                session.event("error", f"context: {e}")
                self.ctx.drop_current()
                last, stalled = None, 0
            if session.obs.levels_completed > levels:
                session.event("notes", f"end of level {levels + 1}", self.notes.as_dict())
                self.notes.new_level(session.obs.levels_completed + 1)
                self.level_start = session.game.actions
                if not a.carry_notes_across_levels:
                    self.notes.clear()  # the Duck's rule, for the A/B baseline
            if session.obs.state == "GAME_OVER":
                if not a.keep_notes_on_game_over:
                    self.notes.clear()
                if a.auto_reset_on_game_over:
                    kernel.act(RESET, {"auto": "reset after GAME_OVER"})
                    if last is not None:
                        last["auto_reset"] = True

    def _turn(self, session: Session, kernel: Any, turn: int) -> dict[str, Any]:
        a, t0, failures, nudged = self.cfg.agent, time.monotonic(), 0, False
        for call in range(a.max_calls_per_turn + 1):
            if call == a.max_calls_per_turn:
                raise TurnStalled(call)
            if call and not nudged and (call >= a.nudge_after_calls or time.monotonic() - t0 > a.turn_time_s):
                nudged = True
                self.ctx.add({"role": "user", "content": render("correct.j2", reason="act_now", detail=call)})
            if reason := session.stop_reason():
                raise PlayStopped(reason)
            try:
                reply = self._ask(session, turn, call)
                failures = 0
            except ModelError as e:
                failures += 1
                session.event("error", f"model request failed: {e}", {"turn": turn, "call": call})
                if failures >= a.failures_before_fallback:
                    raise ModelDown(str(e)) from e
                continue
            try:
                calls = tool_calls(reply)
            except Correction as c:  # to a broken call as its tool result, else as a user message
                self.ctx.add_all([{"role": "tool", "tool_call_id": t.id, "content": c.message}
                                  for t in reply.tool_calls] or [{"role": "user", "content": c.message}])
                continue
            for k, (call_id, code, replay) in enumerate(calls):
                r = kernel.run(code, info={"turn": turn, "call": call, "seed": reply.seed},
                               **(replay if a.trace_replay else {}))
                self.ctx.add({"role": "tool", "tool_call_id": call_id,
                              "content": r.text if a.animation_summaries else without_animation(r.message)})
                self.notes.from_kernel(kernel.notes)
                if r.kind in ("timeout", "crash"):
                    session.event("timeout", f"kernel call {r.kind} (turn {turn}, call {call})",
                                  {"restarted": r.restarted})
                if r.actions:
                    for skipped_id, _, _ in calls[k + 1:]:
                        self.ctx.add({"role": "tool", "tool_call_id": skipped_id,
                                      "content": render("correct.j2", reason="skipped", detail="")})
                    last = outcome(r, session, self.ctx.current.level - 1, a.animation_summaries)
                    self.ctx.current.actions, self.ctx.current.outcome = list(r.actions), last["text"]
                    return last
                if reason := session.stop_reason():
                    raise PlayStopped(reason)
        raise TurnStalled(a.max_calls_per_turn)

    def _ask(self, session: Session, turn: int, call: int) -> Any:
        self.ctx.fit()  # may drop old turns, or raise ContextFull
        seed = (request_seed(self.seed, session.game.game_id, self.pass_, turn, call)
                if self.cfg.agent.seeded_sampling else None)
        messages = self.ctx.messages()
        try:
            reply = self.client.chat(messages, self.tools, seed=seed, deadline=session.deadline)
        except ContextOverflow:
            self.ctx.budget = int(self.ctx.budget * 0.8)  # the server knows better: shrink and retry
            raise
        self.ctx.add(reply.message(self.cfg.agent.reasoning_history_chars))
        self.ctx.observe(len(messages), reply.prompt_tokens, reply.completion_tokens)
        self.notes.from_reply(reply.content, reply.reasoning)
        session.event("model", f"turn {turn} call {call}",
                      reply.stats() | {"turn": turn, "call": call, "seed": seed, "estimate": self.ctx.estimate()})
        if reply.cut == "timeout":
            session.event("timeout", f"model reply cut at {self.client.timeout_s:.0f} s (kept what arrived)")
        return reply


def _default_kernel(session: Session, cfg: Config) -> Any:
    from duck.kernel import Kernel
    return Kernel(session, cfg.kernel, compat=cfg.agent.kernel_compat, fresh=cfg.agent.kernel_fresh)
