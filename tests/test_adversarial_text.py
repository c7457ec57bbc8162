"""Every parser of text the model or the worker controls, fed 1 MB adversarial lines (issue 37:
one action name of 220,000 blanks held the host 60 s in a backtracking regex, with the GIL, so
every game of the process stopped). Each parse runs in a forked child that the test kills at
its limit, so a parser that backtracks fails here in a second instead of hanging the suite.

The parsers: action names (`MODEL_NAMES`, `duck.sandbox.actions.parse`, the worker's
`normalize_actions`, `trust.check`), display strings, the `Rule:` block of a reply
(duck.agent.memory), a reply's tool calls and their arguments (duck.agent.turn,
duck.llm.reply), the wire (`wire.Reader`), `trust.clean`/`trust.text` and the tool message
(duck.sandbox.render).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from duck.agent.memory import parse_rule
from duck.agent.turn import Correction, cut_in_string, tool_calls
from duck.game.actions import MODEL_NAMES, parse_display
from duck.llm.reply import Reply, ToolCall, empty_call, json_object
from duck.sandbox import render, trust, wire
from duck.sandbox.actions import parse
from duck.sandbox.host import CallResult
from duck.sandbox.views import normalize_actions

MB = 1 << 20
LIMIT_S = 1.0

LINES = {
    "click-blanks": "MOUSE(row=1,col=1" + " " * MB + "x",
    "click-commas": "MOUSE(" + "row=1," * (MB // 6) + "x",
    "click-parens": "MOUSE" + "(" * MB,
    "blanks": " " * MB + "x",
    "tabs-newlines": "\t\n " * (MB // 3) + "x",
    "rule-blanks": "Rule" + " " * MB + "x",
    "rule-marks": "- " * (MB // 2) + "rule" + "x" * 30,
    "rules": "rule:\n" * (MB // 6),
    "brackets": "[" * MB,
    "braces": '{"a":' * (MB // 5),
    "digits": "1" * MB,
    "surrogates": "\ud800" * MB,
}


def cpu_s(pid: int) -> float:
    """The CPU seconds a live child has used (user + system, /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def within(fn, *args) -> None:
    """fn(*args) finishes within LIMIT_S seconds of CPU (an exception counts as finishing). CPU
    time, not the clock: a machine busy with other work slows the clock time of a linear parse
    several-fold but not its CPU time, while a backtracking one needs minutes of CPU either way."""
    pid = os.fork()
    if pid == 0:  # the child: run it, then leave without pytest's clean-up
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 - a refusal is an answer; only the time matters
            pass
        os._exit(0)
    used, t0 = 0.0, time.monotonic()
    while used <= LIMIT_S and time.monotonic() - t0 < 60 * LIMIT_S:  # (the clock: only a backstop)
        done, _, usage = os.wait4(pid, os.WNOHANG)
        if done:
            used = usage.ru_utime + usage.ru_stime
            break
        try:
            used = cpu_s(pid)
        except OSError:  # ended between the two calls: wait4 says how long it took
            continue
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if used > LIMIT_S or not done:
        pytest.fail(f"{getattr(fn, '__name__', fn)} took more than {LIMIT_S} s of CPU on a 1 MB line")


def _action_names(line: str) -> None:
    MODEL_NAMES.click_text(line)
    MODEL_NAMES.id(line)
    parse([{"action": line}, {"action": "MOUSE", "row": line, "col": line}])
    try:
        parse_display(line)
    except ValueError:
        pass


def _reply(line: str) -> None:
    parse_rule(line)
    for args in (line, '{"code": ' + line + "}", '{"code": "' + line + '"}'):
        json_object(args)
        empty_call(args)
        try:
            tool_calls(Reply(content=line, reasoning=line, tool_calls=[ToolCall("c1", "python", args)]))
        except Correction:
            pass
    cut_in_string(line)
    Reply(reasoning=line, cut="length", keep_thinking=1000).thinking()


def _worker_message(line: str) -> None:
    msg = {"op": "action", "call": 1, "actions": [{"action": line}]}
    try:
        trust.check(msg, ("action",))
    except trust.Misbehaved:
        pass
    trust.clean({"a": [line] * 3, line[:1000]: line})
    trust.text(line)
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        import threading

        threading.Thread(target=wire.send, args=(w, msg), kwargs={"deadline": time.monotonic() + 5},
                         daemon=True).start()
        wire.Reader(r).recv(time.monotonic() + 5)
    finally:
        os.close(r)
    res = CallResult("error", stdout=line, error=line, result={"r": line}, action_results=[
        {"executed": False, "error": line, "stop_reason": line}, {"guard": line}], notes_error=line)
    assert len(res.text) < 4 * render.MESSAGE_CHARS


@pytest.mark.parametrize("name", sorted(LINES))
def test_every_parser_of_model_or_worker_text_stays_linear(name):
    line = LINES[name]
    within(_action_names, line)
    within(_reply, line)
    within(_worker_message, line)
    try:
        normalize_actions([line, {"action": "MOUSE", "row": line, "col": 1}])
    except (TypeError, ValueError) as e:
        assert len(str(e)) < 200  # a clear one-line error, not the name back
        assert "\n" not in str(e)


def test_a_long_action_name_is_refused_before_it_is_parsed():
    """The worker says what is wrong; a forged request with one is a protocol violation."""
    with pytest.raises(ValueError, match="at most 64"):
        normalize_actions(["UP" + "x" * 100])
    with pytest.raises(trust.Misbehaved, match="action name of 100"):
        trust.check({"op": "action", "actions": [{"action": "U" * 100}]}, ("action",))
    with pytest.raises(trust.Misbehaved):
        trust.check({"op": "action", "actions": [{"action": "MOUSE", "row": "1" * 100, "col": 1}]}, ("action",))
    assert normalize_actions(["MOUSE(row=63, col=63)"]) == [{"action": "MOUSE(row=63, col=63)"}]


@pytest.mark.parametrize("text, cell", [("MOUSE(row=20, col=21)", (20, 21)), ("click( col = 3 , row = -4 ,)", (-4, 3)),
                                         ("ACTION6(row=1,col=2)", (1, 2)), ("MOUSE (row=1, col=2 , )", (1, 2)),
                                         ("MOUSE(row=1)", None), ("MOUSE(row=1, row=2)", None),
                                         ("MOUSE(row=1, col=2, x=3)", None), ("MOUSE(row=1,, col=2)", None),
                                         ("MOUSE(row=1 2, col=3)", None), ("MOUSE(row=1, col=2))", None),
                                         ("MOUSE(row=+1, col=2)", None), ("UP", None)])
def test_clicks_written_as_text_parse_as_before(text, cell):
    assert MODEL_NAMES.click_text(text) == cell


def test_unreadable_arguments_are_a_correction_not_a_crash():
    """'[' * 10**6 as a tool call's arguments raised RecursionError (not a ValueError) out of
    the client's and the loop's json.loads."""
    deep = "[" * MB
    assert json_object(deep) is False and empty_call(deep) is False
    with pytest.raises(Correction, match="bad_arguments|invalid JSON"):
        tool_calls(Reply(tool_calls=[ToolCall("c1", "python", deep)]))
