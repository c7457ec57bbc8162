"""The model-driven agent: one game, one kernel, one conversation (DESIGN §4).

A turn is one user message (duck.agent.turn) followed by model calls until the model's Python
plays an action. Per solved level the memory (duck.agent.memory) goes into the first turn of
every later level and, after a trim, right after the system prompt; the host's guards
(duck.sandbox.batch_guards) are installed on the kernel. Control flow is by exceptions that
carry their message: `Correction` (a reply without a usable tool call: back to the model),
`TurnStalled` (too many calls without an action: a fresh turn), `ContextFull` (the turn alone
outgrew the budget: dropped, a fresh turn), `ContextTooSmall` (no turn can fit) and `ModelDown`
(the server keeps failing and cannot come back in time), both raised to duck.policies, which
hands the game to the fallback, and the session's `PlayStopped`. An outage (`outage`,
duck.policies.Parking) parks the game, its slot freed and all else kept; when the server is
back the turn goes on, its history sent again with one line saying so (prompts/correct.j2).
Everything the model sees and writes goes to the conversation file (duck.play.conversation).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from duck.agent.context import Context, ContextFull
from duck.agent.memory import LevelMemory
from duck.agent.turn import (CallFacts, Correction, call_facts, count_images, python_tool, render, system_prompt, tool_calls,
                             turn_images, turn_message)
from duck.config import Config, KernelConfig
from duck.game.actions import RESET
from duck.llm.client import ContextOverflow, ModelClient, ModelError, join_urls, pick_url, request_seed
from duck.llm.reply import Reply
from duck.play.conversation import NULL
from duck.play.session import PlayStopped, Session
from duck.sandbox import batch_guards
from duck.sandbox.host import Kernel


class Outage(Protocol):
    """How a game waits out its server's outage (duck.policies.Parking)."""

    def down(self) -> bool: ...

    def wait(self, session: Session, why: str) -> bool: ...


class TurnStalled(Exception):
    """The turn made `calls` model calls without an action."""

    def __init__(self, calls: int) -> None:
        super().__init__(f"{calls} calls without an action")
        self.calls = calls


class ModelDown(Exception):
    """The server failed `failures_before_fallback` requests in a row and cannot come back in time."""


class ContextTooSmall(Exception):
    """No turn fits the context budget: model play cannot go on (the fallback takes over, or
    the game ends with this error), instead of starting turn after turn that acts never."""


FULL_TURNS_IN_A_ROW = 3  # turns dropped as too long, none acting, before the model's play ends
NUDGE_AFTER_CALLS = 6  # calls in a turn without an action before "act now"
MAX_CALLS_PER_TURN = 16  # then the turn ends and a fresh one starts


class AgentPolicy:
    """Plays one game (one instance per game). `kernel_factory(session, kernel_config)` makes
    the sandbox (default: duck.sandbox.host.Kernel; the replay tooling passes its own);
    `outage` waits out a server that is down (the module docstring)."""

    name = "llm"

    def __init__(self, seed: int, config: Config, *, model_url: str | list[str] | None = None,
                 url_index: int | None = None, pass_: int = 0,
                 kernel_factory: Callable[[Session, KernelConfig], Kernel] | None = None,
                 outage: Outage | None = None) -> None:
        self.cfg = config.model_copy(deep=True)  # a shared config stays untouched
        self.outage = outage  # duck.policies.Parking (None: a failing server ends the model's play)
        self.seed, self.pass_, self.url_index = seed, pass_, url_index
        self.urls = join_urls(model_url) or self.cfg.model.urls
        self.kernel_factory = kernel_factory or Kernel
        self.memory = LevelMemory()  # the solved levels, and where the current one began
        self.tools = python_tool()
        self.conv = NULL  # the session's conversation file, from play()
        self._notes_logged: dict[str, Any] = {}
        self.client: ModelClient | None = None  # made in play(): it is named after the game
        self.ctx = self._new_context()

    def play(self, session: Session) -> None:
        game_id = session.game.game_id
        self.client = ModelClient(self.urls, self.cfg.model, session=f"{game_id}:{self.pass_}",
                                  start=pick_url(self.urls, game_id, self.url_index))
        self.conv = session.conversation
        self.conv.begin(**_conversation_start(self.cfg, self.urls, self.tools))
        self.ctx = self._new_context()  # its system prompt is the file's first message
        kernel = self.kernel_factory(session, self.cfg.kernel)
        kernel.install_guards(batch_guards.from_config(self.cfg.agent))
        kernel.start_soon()  # the worker starts while the first request is out
        try:
            self._loop(session, kernel)
        finally:
            kernel.close()
            session.event("notes", f"end of play ({session.obs.state}, {session.obs.levels_completed} levels)",
                          kernel.notes)

    def _new_context(self) -> Context:
        # Counts from the server's /tokenize where it has one; the level memory carried past trims.
        counter = self.client.counter(self.tools) if self.client is not None else None
        return Context(system_prompt(self.cfg), self.cfg.agent.context_tokens, self.cfg.model.max_output_tokens,
                       evict_to=self.cfg.agent.evict_to, counter=counter, log=self.conv, carry=self.memory.carry,
                       max_images=self.cfg.model.serve.images_per_prompt)

    def _loop(self, session: Session, kernel: Kernel) -> None:
        last, stalled, turn, full = None, 0, 0, 0
        while True:
            if reason := session.stop_reason():
                raise PlayStopped(reason)
            levels = session.obs.levels_completed
            cap = self.cfg.model.serve.images_per_prompt
            if self.ctx.fit(images=len(turn_images(session, last, cap))):  # room for the turn's images first
                session.yield_slot("trim")
            self.ctx.begin_turn(turn_message(
                session, last, stalled, turn == 0, self.memory.start,
                memory=self.memory.block() if last and last.level_completed else "", ask_rule=self.memory.asking,
                conv=self.conv, room=cap - count_images(self.ctx.messages())),
                index=turn, level=levels + 1, actions_before=session.game.actions)
            try:
                last, stalled, full = self._turn(session, kernel, turn, levels), 0, 0
                ended = last.text
            except TurnStalled as e:
                last, stalled, ended = None, e.calls, f"stalled after {e.calls} calls"
            except ContextFull as e:
                session.event("error", f"context: {e}")
                self.ctx.drop_current()  # (it played no action: an acting call ends the turn)
                full += 1
                if e.fresh or full >= FULL_TURNS_IN_A_ROW:
                    why = ("the system prompt and one turn message" if e.fresh
                           else f"{full} turns in a row, none acting,")
                    raise ContextTooSmall(f"{why} outgrow the context budget: {e}") from e
                last, stalled, ended = None, 0, f"context full: {e}"
            self.conv.event("turn_end", turn=turn, actions=last.actions if last else [], outcome=ended)
            self.memory.end_turn()  # the rule is asked for once
            if last is not None:
                self.memory.played(last.actions)
            if session.obs.levels_completed > levels:
                session.event("notes", f"end of level {levels + 1}", kernel.notes)
                solved = self.memory.level_done(levels + 1, session.game.actions)
                self.conv.event("level_memory", level=levels + 1, actions=solved.actions, tail=solved.tail)
                session.yield_slot("level")  # the scheduler's point to hand the server slot on
            if session.obs.state == "GAME_OVER":  # only RESET does anything now: play it for the model
                self.memory.game_over()
                kernel.act(RESET, {"auto": "reset after GAME_OVER"})
                if last is not None:
                    last.auto_reset = True
            turn += 1

    def _turn(self, session: Session, kernel: Kernel, turn: int, levels: int) -> CallFacts:
        failures = 0
        for call in range(MAX_CALLS_PER_TURN):
            if call == NUDGE_AFTER_CALLS:
                self.ctx.add({"role": "user", "content": render("correct.j2", reason="act_now", detail=call)},
                             call=call, correction="act_now")
            if reason := session.stop_reason():
                raise PlayStopped(reason)
            if self.outage is not None and self.outage.down():
                self._wait_out(session, "the server is marked down", call)
            try:
                reply = self._ask(session, turn, call)
                failures = 0
            except ModelError as e:
                failures += 1
                session.event("error", f"model request failed: {e}", {"turn": turn, "call": call})
                if failures >= self.cfg.agent.failures_before_fallback:
                    if self.outage is None:
                        raise ModelDown(str(e)) from e
                    self._wait_out(session, str(e), call)
                    failures = 0
                continue
            try:
                calls = tool_calls(reply)
            except Correction as c:  # to a broken call as its tool result, else as a user message
                for m in ([{"role": "tool", "tool_call_id": t.id, "content": c.message} for t in reply.tool_calls]
                          or [{"role": "user", "content": c.message}]):
                    self.ctx.add(m, call=call, correction=str(c))
                continue
            for k, (call_id, code) in enumerate(calls):
                before = session.obs.grid
                r = kernel.run(code, info={"turn": turn, "call": call, "seed": reply.seed})
                self.ctx.add({"role": "tool", "tool_call_id": call_id, "content": r.text},
                             call=call, result={"kind": r.kind, "actions": list(r.actions)})
                self._log_notes(turn, kernel.notes)
                if r.kind in ("timeout", "crash"):
                    session.event("timeout", f"kernel call {r.kind} (turn {turn}, call {call})",
                                  {"restarted": r.restarted})
                if r.actions:
                    for skipped_id, _ in calls[k + 1:]:
                        self.ctx.add({"role": "tool", "tool_call_id": skipped_id,
                                      "content": render("correct.j2", reason="skipped", detail="")},
                                     call=call, correction="skipped")
                    return call_facts(r, session, levels, before, session.game.actions - self.memory.start)
                if reason := session.stop_reason():
                    raise PlayStopped(reason)
        raise TurnStalled(MAX_CALLS_PER_TURN)

    def _wait_out(self, session: Session, why: str, call: int) -> None:
        """Park until the server is back, then tell the model in one line; ModelDown when it
        cannot come back in time."""
        if not self.outage.wait(session, why):
            raise ModelDown(f"the model server cannot come back in time ({why})")
        self.ctx.add({"role": "user", "content": render("correct.j2", reason="outage", detail="")},
                     call=call, correction="outage")

    def _log_notes(self, turn: int, notes: dict[str, Any]) -> None:
        """A `notes` line whenever the model's `notes` dict changed (what changed: duck.play.conversation)."""
        if notes != self._notes_logged:
            self.conv.notes(turn, notes, self._notes_logged)
            self._notes_logged = dict(notes)

    def _ask(self, session: Session, turn: int, call: int) -> Reply:
        trimmed = self.ctx.fit()  # may drop old turns, or raise ContextFull
        # A trim loses the cached prefix anyway: the scheduler's point to hand the server slot
        # on; before any other request the game yields only if the scheduler preempted it.
        session.yield_slot("trim" if trimmed else None)
        seed = request_seed(self.seed, session.game.game_id, self.pass_, turn, call)
        messages = self.ctx.messages()
        n = self.conv.request(self.ctx.message_ids(), turn=turn, call=call, seed=seed, estimate=self.ctx.estimate())
        try:
            reply = self.client.chat(messages, self.tools, seed=seed, deadline=session.deadline)
        except ModelError as e:
            self.conv.error(n, e)
            if isinstance(e, ContextOverflow):
                self.ctx.budget = int(self.ctx.budget * 0.8)  # the server knows better: shrink and retry
            raise
        marker = render("thinking_cut.j2", cut=reply.cut, dropped=reply.thinking_dropped) if reply.thinking_dropped else ""
        self.conv.reply(n, self.ctx.add(reply.message(marker), call=call, cut=reply.cut), reply)
        self.ctx.observe(len(messages), reply.prompt_tokens, reply.completion_tokens)
        if self.memory.from_reply(reply.content, reply.reasoning):
            self.conv.event("level_rule", level=self.memory.solved[-1].level, rule=self.memory.solved[-1].rule)
        session.event("model", f"turn {turn} call {call}",
                      reply.stats() | {"turn": turn, "call": call, "seed": seed, "estimate": self.ctx.estimate()})
        if reply.cut == "timeout":
            session.event("timeout", f"model reply cut at {self.client.cfg.timeout_s:.0f} s (kept what arrived)")
        return reply


def _conversation_start(cfg: Config, urls: list[str], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """What the conversation file's `start` line records of the agent's setup."""
    m, a = cfg.model, cfg.agent
    return {"model": m.name, "urls": urls, "tools": tools, "max_tokens": m.max_output_tokens,
            "sampling": {"temperature": m.temperature, "top_p": m.top_p, "top_k": m.top_k, "thinking": m.thinking,
                         "preserve_thinking": m.preserve_thinking},
            "context_tokens": a.context_tokens, "evict_to": a.evict_to, "cut_thinking_chars": m.cut_thinking_chars}
