"""What a worker's messages may not do to the host, between and across calls (issue 37, part A):
an action name that would stall a parser, a call kept alive past its limit by queued
requests, messages not bound to their call (a forged `done`, bytes after it, another call's
id), model code running between calls (a timer, a profile hook, CPU burnt while frozen), an
8 MB message that becomes hundreds of MB of Python objects, and tool-message lines the
worker wrote. Each attack is model code against a real kernel (worker process, pipe, game);
the snippets switch the in-process guard off first and write on the pipe as a hostile worker
would (tests/attacks.py's UNGUARD). `test_these_hold_without_cap_sys_admin` runs this file
again as root without CAP_SYS_ADMIN (tests/posture.py), as tests/test_sandbox_attacks.py does.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

import posture
from attacks import UNGUARD
from conftest import ROOT, alive
from duck.play.record import read_record
from duck.sandbox import render, wire
from duck.sandbox.host import CallResult

# Writes one message on the worker's pipe to the host, as the worker's own `write` frames it.
FORGE = UNGUARD + """
import struct, json
def forge(msg, call=None):
    body = json.dumps(msg | {'call': _w.call if call is None else call}).encode()
    return struct.pack('<II', len(body), 0) + body
"""
DONE = {"op": "done", "kind": None, "error": None, "total": 0, "tail": "", "notes": {}, "results": [], "last_result": {}}


@pytest.fixture
def kernel(make_kernel):
    """A kernel on zs01 (conftest's make_kernel), its grace 0.5 s: `kernel(timeout=..., grace=...)`."""
    return lambda timeout=5.0, grace=0.5: make_kernel(timeout=timeout, grace=grace)


def cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_an_action_name_of_blanks_does_not_stall_the_host(kernel):
    """'MOUSE(row=1,col=1' + blanks + 'x' held the host ~60 s in one regex (220,000 blanks)."""
    k = kernel()
    t0 = time.monotonic()
    r = k.run("try:\n    action('MOUSE(row=1,col=1' + ' ' * 60_000 + 'x')\nexcept ValueError as e:\n    print(e)")
    assert "at most 64" in r.stdout and not r.restarted, r.text
    r = k.run(FORGE + "os.write(_w.wfd, forge({'op': 'action', 'actions': [{'action': 'MOUSE(row=1,col=1'"
                      " + ' ' * 60_000 + 'x'}]}))\nsys.modules['time'].sleep(30)")
    assert r.restarted and "protocol violation" in r.text, r.text
    assert time.monotonic() - t0 < 25  # restarted at the violation, not after the forged call's 30 s
    assert k.session.game.actions == 0
    alive(k)


def test_queued_requests_do_not_keep_a_call_past_its_limit(kernel):
    """Thirty requests queued just before the limit, by a worker that then reads no reply:
    every reply write had 10 s of its own (75 s for one call). Now: the limit plus the grace."""
    k = kernel(timeout=2.0, grace=0.5)
    r = k.run(FORGE + "sys.modules['time'].sleep(1.5)\nos.write(_w.wfd, forge({'op': 'action', 'actions': "
                      "[{'action': 'UP'}]}) * 30)\nsys.modules['time'].sleep(1000)")
    assert r.restarted and r.wall_ms < 5_000, (r.wall_ms, r.text)
    alive(k)


def test_buffered_messages_wait_for_no_deadline():
    """Reader.recv handed out buffered messages without looking at the clock."""
    r, w = os.pipe()
    try:
        wire.send(w, {"op": "out", "text": "a"})
        wire.send(w, {"op": "out", "text": "b"})
        reader = wire.Reader(r)
        assert reader.recv(time.monotonic() + 5)[0]["text"] == "a"  # (the second is now buffered)
        assert reader.pending()
        assert reader.recv(time.monotonic() - 0.001) is None  # past the deadline: none, nothing lost
        assert reader.recv(time.monotonic() + 5)[0]["text"] == "b"
        assert not reader.pending()
    finally:
        os.close(r)
        os.close(w)


def test_a_forged_done_does_not_play_later_calls_actions_or_write_the_tool_message(kernel):
    """A forged well-formed `done` ended the call early; the snippet's later action was then
    played in the next call (the record attributed it to the wrong reply), and the done's own
    `results` put a guard line the host never wrote into the tool message."""
    k = kernel(timeout=3.0)
    forged = DONE | {"results": [{"guard": "guard: FORGED, you have won"}], "last_result": {"forged": 1}}
    r1 = k.run(FORGE + f"os.write(_w.wfd, forge({forged!r}))\nsys.modules['time'].sleep(0.5)\naction('UP')")
    assert "FORGED" not in r1.text and "forged" not in json.dumps(k.state.last_result)
    r2 = k.run("print('second')")  # the forged done ended the call: its process was killed there
    assert r2.stdout == "second\n" and not r2.restarted, r2.text
    assert k.session.game.actions == 0 and r1.actions == r2.actions == []
    alive(k)


def test_a_batch_stops_between_actions_at_the_calls_limit(kernel):
    """The clock was read once per batch (issue 48): 16 actions sent 6 ms before the limit ran
    21-30 ms past it, seconds on a slow game. Now a batch stops between two actions there, with
    the `stopped: out of time` result the model knows: no action of the record starts after it."""
    k = kernel(timeout=2.0)
    t0 = time.monotonic()
    r = k.run("import time\ntime.sleep(1.95)\nwhile True:\n    action(['UP', 'DOWN'] * 500)")  # across the limit
    limit = t0 + 2.0 - k.session.writer.t0  # (the record's clock; the call's own started a little later)
    played = [a["t"] for a in read_record(k.session.writer.path).actions]
    assert played and max(played) <= limit + 0.05, (max(played) - limit, len(played))
    assert "(stopped: out of time)" in r.text, r.text[-300:]
    assert r.kind == "timeout" and not r.restarted  # the snippet's own limit, its definitions kept
    alive(k)


# Issue 48: code left by one call acted in the next, each time as the first action of the next
# reply (recorded as that reply's). Each route's snippet plays LEFT in the call after its own.
RESUMED_AFTER_A_FORGED_DONE = FORGE + f"""
os.write(_w.wfd, forge({DONE!r}))   # the call ends here for the host; this code goes on
nxt, _ = _w.reader.recv()           # the next call's run (after the host woke it)
_w.call = nxt['call']
_w.action('LEFT')                   # stamped with the next call's id
_w.run(nxt)                         # then that call's own code, and its done
"""
SIGCONT_HANDLER_IN_THE_TABLE = FORGE + """
signal = sys.modules.get('signal') or __import__('signal')
def left(*_):
    os.write(_w.wfd, forge({'op': 'action', 'actions': [{'action': 'LEFT'}]}, call=_w.call + 1))
_w.handlers[signal.SIGCONT] = left   # the table every reset restores the handlers from
"""
PATCHED_WORKER_EXECUTE = UNGUARD + """
W = type(_w)
run_code = W.execute
def execute(self, code, filename):
    self.action('LEFT')
    return run_code(self, code, filename)
W.execute = execute
"""
REBOUND_RESET_HOOKS = FORGE + """
signal = sys.modules.get('signal') or __import__('signal')
_w.request.__func__.__globals__['reset_hooks'] = lambda saved: None  # the worker module's own name
signal.signal(signal.SIGCONT, lambda *_: os.write(_w.wfd, forge({'op': 'action', 'actions': [{'action': 'LEFT'}]},
                                                              call=_w.call + 1)))
"""
AUDIT_HOOK = UNGUARD + """
fired = []
def hook(event, args):
    if event == 'exec' and not fired:
        fired.append(1)
        _w.action('LEFT')
sys.addaudithook(hook)
"""


@pytest.mark.parametrize("left_by", [RESUMED_AFTER_A_FORGED_DONE, SIGCONT_HANDLER_IN_THE_TABLE, PATCHED_WORKER_EXECUTE,
                                     REBOUND_RESET_HOOKS, AUDIT_HOOK],
                         ids=["forged-done-then-sigcont-resume", "sigcont-handler-in-reset-hooks-table",
                              "patched-worker-execute", "rebound-reset-hooks", "sys-addaudithook"])
def test_code_left_by_one_call_plays_nothing_in_the_next(kernel, left_by):
    """Whatever a snippet leaves (a half-run snippet behind a forged done, a handler in the table
    the reset restores, a patched Worker.execute, a rebound reset_hooks, an audit hook, which
    cannot be removed), no action is played in the next call, whose reply has no action: each
    call's process is killed at its done and the next one is forked from a worker that ran none."""
    k = kernel()
    first = k.run(left_by)
    second = k.run("print('second')")
    assert second.actions == [] and "LEFT" not in second.text, second.text
    assert k.session.game.actions == len(first.actions), (first.text, second.text)
    alive(k)


@pytest.mark.parametrize("after", ["done", "action"])
def test_bytes_after_done_restart_the_worker(kernel, after):
    """A second message in the same write as a (forged) done: a second done, or an action the
    next call would have played."""
    k = kernel()
    extra = DONE if after == "done" else {"op": "action", "actions": [{"action": "UP"}]}
    r = k.run(FORGE + f"os.write(_w.wfd, forge({DONE!r}) + forge({extra!r}))\nsys.modules['time'].sleep(30)")
    assert r.restarted and "protocol violation" in r.text, r.text
    assert k.session.game.actions == 0
    alive(k)


def test_a_message_of_another_call_is_refused(kernel):
    k = kernel()
    r = k.run(FORGE + "os.write(_w.wfd, forge({'op': 'action', 'actions': [{'action': 'UP'}]}, call=_w.call + 1))\n"
                      "sys.modules['time'].sleep(30)")
    assert r.restarted and "protocol violation" in r.text, r.text
    assert k.session.game.actions == 0
    alive(k)


def test_no_model_code_runs_between_calls(kernel):
    """A SIGALRM timer and a profile hook left by one call burnt CPU in every gap between
    calls (issue 37). Each call runs in its own process, killed at its end: between calls there
    is only the worker, which runs no model code, and the next call starts without them."""
    k = kernel()
    r = k.run(UNGUARD + """
signal = sys.modules.get('signal') or __import__('signal')
def burn(*_):
    for _i in range(200_000):
        pass
signal.signal(signal.SIGALRM, burn)
signal.signal(signal.SIGTERM, burn)
try:
    signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)
    print('timer set')
except OSError as e:
    print('timer denied', e)
sys.setprofile(lambda *a: None)
""")
    assert r.kind == "ok", r.text
    assert k.last_call is not None and not Path(f"/proc/{k.last_call}").exists()  # killed and reaped
    before = cpu_s(k.proc.pid)
    time.sleep(1.0)
    assert cpu_s(k.proc.pid) - before < 0.05
    r = k.run(UNGUARD + "signal = sys.modules.get('signal') or __import__('signal')\n"
              "print(sys.getprofile(), signal.getsignal(signal.SIGALRM), "
              "signal.getsignal(signal.SIGTERM), signal.getitimer(signal.ITIMER_REAL))")
    assert r.stdout.split(" ", 1)[0] == "None" and "burn" not in r.stdout and "(0.0, 0.0)" in r.stdout, r.text
    assert not r.restarted
    alive(k)


def test_an_8_mb_message_of_small_dicts_costs_the_host_little(kernel):
    """8 MB of one-key dicts (characters were all trust.clean counted) parsed into ~585 MB of
    Python objects, and the host kept the worker's `last_result`: now the message is refused
    before it is parsed."""
    k = kernel(timeout=10.0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = k.run(FORGE + """
big = '[' + ','.join(['{"a":0}'] * 900_000) + ']'  # 7.2 MB: under the 8 MB a message may have
body = json.dumps(dict(op='done', call=_w.call, kind=None, error=None, total=0, tail='', notes={}, results=[]))
body = (body[:-1] + ', "last_result": {"x": ' + big + '}}').encode()
os.write(_w.wfd, struct.pack('<II', len(body), 0) + body)
sys.modules['time'].sleep(30)
""")
    assert r.restarted and "protocol violation" in r.text and "JSON values" in r.text, r.text
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100 << 10  # KB: under 100 MB
    assert "x" not in k.state.last_result
    r = k.run("result = [[i] for i in range(60_000)]")  # a legitimate large result: cut by the worker
    assert not r.restarted and "too large to send" in r.text, r.text
    alive(k)


def test_the_tool_message_is_bounded_whatever_the_results():
    """Lines from hundreds of refused requests stay a few lines; the message stays under its cap."""
    results = [{"executed": False, "error": f"Unknown action at index 1: 'X{i}'"} for i in range(200)]
    results += [{"executed": True, "stop_reason": "no_effect", "guard": f"guard: {i} " + "g" * 5000} for i in range(50)]
    text = CallResult("ok", actions=["UP"] * 500, action_results=results, stdout="x" * 4096).text
    assert len(text) <= render.MESSAGE_CHARS
    assert text.count("not played:") <= render.MAX_LINES and "more lines" in text


def _write_pipe(pid: int, end: int, data: bytes) -> None:
    """Write on one of the worker's pipes (0: its read end, 1: its write end, named on its
    command line `... worker RFD WFD`) through /proc, as another process could."""
    fd = int(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[-3 + end])
    try:
        pipe = open(f"/proc/{pid}/fd/{fd}", "wb", buffering=0)
    except PermissionError:
        pytest.skip("/proc/<worker>/fd needs CAP_SYS_PTRACE (or the worker's uid)")
    with pipe:
        pipe.write(wire._HDR.pack(len(data), 0) + data)


def test_a_message_written_between_calls_is_not_taken_for_the_next_calls(kernel):
    """Someone else (here the test, through /proc) writes an action request on the worker's
    pipe between two calls: the next call must not play it as its own."""
    k = kernel()
    k.run("x = 1")
    body = json.dumps({"op": "action", "call": k.calls + 1, "actions": [{"action": "UP"}]}).encode()
    _write_pipe(k.proc.pid, 1, body)
    r = k.run("print(len(history))")
    assert r.restarted and "wrote to its pipe between calls" in r.text, r.text
    assert k.session.game.actions == 0 and r.stdout == "1\n"
    alive(k)


def test_a_run_written_on_the_workers_pipe_between_calls_runs_nothing(kernel):
    """Someone else (here the test, through /proc) writes a `run` on the worker's input pipe
    between two calls: the worker forks for it, but that process runs nothing until the host
    says go, and the next call sees the worker's message, records it and restarts."""
    k = kernel()
    k.run("x = 1")
    pid = k.proc.pid
    body = json.dumps({"op": "run", "code": "while True:\n    pass", "call": k.calls, "head": 10, "tail": 10,
                       "timeout": 30, "valid": []}).encode()
    _write_pipe(pid, 0, body)
    time.sleep(0.5)
    busy = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    assert busy and all(cpu_s(c) < 0.05 for c in busy)  # forked, and held at its gate
    r = k.run("print(x)")
    assert r.restarted and "wrote to its pipe between calls" in r.text and "NameError" in r.text, r.text
    assert any("wrote to its pipe between calls" in line for line in open(k.session.writer.path))
    assert k.session.game.actions == 0
    alive(k)


@pytest.mark.slow
def test_these_hold_without_cap_sys_admin():
    """This file again in the kaggle posture (tests/posture.py)."""
    if os.environ.get(posture.ENV):
        pytest.skip("already in the kaggle posture")
    why = posture.available()
    if why:
        pytest.skip(why)
    r = subprocess.run(posture.wrap([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                     str(Path(__file__)), "-k", "not without_cap_sys_admin"]),
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0 and " passed" in tail, tail


HOST = """
import sys, threading, time
from pathlib import Path
from duck.config import KernelConfig
from duck.game.source import GameSource
from duck.play.record import RecordWriter
from duck.play.session import Session
from duck.sandbox.host import Kernel
source = GameSource.offline(sys.argv[1])
gid = next(g.game_id for g in source.games() if g.game_id.startswith("zs01"))
g = source.make(gid)
writer = RecordWriter(Path(sys.argv[2]) / "zs01.jsonl")
writer.header(game_id=gid, title=g.title, baselines=g.baselines, obs=g.obs, policy="test", seed=0)
k = Kernel(Session(g, writer, max_actions=100), KernelConfig(call_timeout_s=60.0))
k.start_soon()  # started from a thread that ends at once: the worker must outlive that thread
k.started()
time.sleep(0.5)
first = k.run("x = 1")
pids = [k.proc.pid]
if sys.argv[3]:  # a call under way when the host dies
    threading.Thread(target=k.run, args=(sys.argv[3],), daemon=True).start()
    time.sleep(1.5)
    pids.append(getattr(k, "call_pid", None) or k.proc.pid)
print(first.kind, first.restarted, k.run("print(x + 1)").stdout.strip() if not sys.argv[3] else "2", *pids, flush=True)
time.sleep(120)
"""
CLEARS_PDEATHSIG = UNGUARD + """
libc = __import__('ctypes').CDLL(None)
print(libc.prctl(1, 0, 0, 0, 0))  # PR_SET_PDEATHSIG: none
sys.modules['time'].sleep(100)
"""


def state(pid: int) -> str | None:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


@pytest.mark.parametrize("during", ["", CLEARS_PDEATHSIG], ids=["between-calls", "clears-its-parent-death-signal"])
def test_a_worker_ends_with_its_host(tmp_path, during):
    """A host killed with SIGKILL (the OOM killer, a second Ctrl-C of a parent) must take its
    worker with it: issue 37 found one frozen for ever between calls; issue 48 one whose snippet
    cleared its parent-death signal with one prctl (running on after its host). The worker and
    each call's process ask for SIGKILL at their parent's death (PR_SET_PDEATHSIG), the call's
    seccomp filter refuses prctl but reads, and the host forks every worker from one thread that
    lives as long as the process (the signal follows the forking thread, and start_soon forks from
    a thread that ends at once)."""
    from conftest import BUNDLED
    host = subprocess.Popen([sys.executable, "-c", HOST, str(BUNDLED), str(tmp_path), during], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = host.stdout.readline().split()
        assert line[:3] == ["ok", "False", "2"], (line, host.stderr.read() if host.poll() is not None else "")
        pids = [int(p) for p in line[3:]]
        assert all(state(p) not in (None, "Z") for p in pids), [state(p) for p in pids]  # alive
    finally:
        host.kill()
        host.wait()
    t0 = time.monotonic()
    while any(state(p) not in (None, "Z") for p in pids) and time.monotonic() - t0 < 30:  # (at once; 30 s: busy)
        time.sleep(0.05)
    assert all(state(p) in (None, "Z") for p in pids), f"outlived its host: {[state(p) for p in pids]}"
