"""devkit.replay.replay: recorded Duck snippets re-run through the kernel, and the output comparison."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from duck.cli import build_parser
from devkit.replay.replay import normalise, run_replay, shown
from devkit.replay.caps import RecordedCap, ReplayKernel
from duck.play.record import read_record
from duck.sandbox.actions import TERMINAL_ERROR
from duck.sandbox.host import CallResult
from duck.paths import SHARED

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "tests" / "games"
TRACES = SHARED / "duck-traces"


def _call(i: int, code: str, result: str, actions: list[str], **extra) -> dict:
    return {"call_index": i, "code": code, "result": result, "actions": actions, **extra}


def _turn(i: int, calls: list[dict], end: str = "step_executed", pre: list[str] = ()) -> dict:
    return {"game_id": "zs01-00000001", "pass": 0, "turn_index": i, "calls": calls, "end": end,
            "pre_turn_auto_actions": list(pre)}


def _write_traces(folder: Path, turns: list[dict], levels: int, actions: int) -> Path:
    (folder / "turns").mkdir(parents=True)
    meta = {"game_id": "zs01-00000001", "pass": 0, "levels_completed": levels, "actions": actions,
            "time_limit_seconds": 2700.0, "trailing_auto_actions": []}
    (folder / "runs.jsonl").write_text(json.dumps(meta) + "\n")
    with gzip.open(folder / "turns" / "zs01-00000001.jsonl.gz", "wt") as f:
        for t in turns:
            f.write(json.dumps(t) + "\n")
    return folder


def test_a_small_trace_replays_identically(tmp_path):
    turns = [
        _turn(0, [_call(0, "print(len(history), current_frame.step)", "1 0", []),
                  _call(1, "action('DOWN')", "executed: true", ["DOWN"])]),
        _turn(1, [_call(0, "for a in ['LEFT', 'UP', 'RIGHT', 'DOWN']:\n    action(a)", "x",
                        ["LEFT", "UP", "RIGHT"])]),
        _turn(2, [_call(0, "print(last_action_result['stop_reason'], current_frame.level)\n"
                           "print({'b', 'a', 'c'}, 'timers' in str(last_action_result))",
                        "previous_level_completed 2\n{'c', 'a', 'b'} False", []),
                  _call(1, "print(undefined)", "Traceback (most recent call last):\n"
                        "  File \"<cell-5>\", line 1, in <module>\n    print(undefined)\n"
                        "NameError: name 'undefined' is not defined", []),
                  _call(2, "action('DOWN')\naction('LEFT')", "Tool timed out after 30s", ["DOWN"],
                        timed_out=True)]),
    ]
    traces = _write_traces(tmp_path / "traces", turns, levels=1, actions=5)
    doc = run_replay(str(traces), str(BUNDLED), str(tmp_path / "run"), workers=1, timeout_s=5)
    o = doc["overall"]
    assert (o["snippet_match"], o["run_identical"], o["stdout_match"]) == (1.0, 1.0, 1.0), doc
    assert o["stdout_compared"] == 3 and o["kinds"]["stopped"] == 1
    assert set(o["call_ms"]) == {"p50", "p90", "p99"}
    run = doc["runs"]["zs01-00000001_p0"]
    assert run["run_identical"] and run["levels"] == 1 and run["actions"] == 5
    assert o["timeouts"] == {"recorded": 1, "ours_cut_at_recorded_count": 1, "ours_time_limit": 0}
    rec = read_record(tmp_path / "run" / "records" / "zs01-00000001_p0.jsonl")
    assert len(rec.actions) == 5 and rec.end["reason"] == "replay_done"
    assert json.loads((tmp_path / "run" / "replay.json").read_text())["overall"] == o


def test_a_diverging_snippet_is_counted_and_categorised(tmp_path):
    turns = [_turn(0, [_call(0, "print(current_frame.step + 1)", "5", []),
                       _call(1, "action('UP')", "", ["DOWN"]),
                       _call(2, "print(undefined)", "Traceback (most recent call last):\n  File \"<python_tool>\", "
                             "line 1, in <module>\nNameError: name 'undefined' is not defined", [])])]
    traces = _write_traces(tmp_path / "traces", turns, levels=0, actions=1)
    o = run_replay(str(traces), str(BUNDLED), str(tmp_path / "run"), workers=1)["overall"]
    assert o["snippet_match"] == round(2 / 3, 5) and o["run_identical"] == 0.0 and o["stdout_match"] == 0.0
    # the Duck's traceback format is not ours (one dialect: the text differs, the error does not)
    assert o["stdout_miss_categories"] == {"other": 1, "error_text": 1}


def test_time_up_turns_stop_instead_of_acting(tmp_path):
    turns = [_turn(0, [_call(0, "r = action(['DOWN', 'LEFT'])\nprint(r['error'])",
                             "No action was executed because the current game state is terminal or stopping.",
                             [])], end="yield_stop_requested")]
    traces = _write_traces(tmp_path / "traces", turns, levels=0, actions=0)
    o = run_replay(str(traces), str(BUNDLED), str(tmp_path / "run"), workers=1)["overall"]
    assert o["snippet_match"] == 1.0 and o["run_identical"] == 1.0


def test_recorded_caps_kill_cap_or_stop(make_kernel):
    """The replay's own kernel stops each snippet at its recorded count: "kill" at its next
    action() whatever it asks, "cap" at its next action that would execute, "stop" (the run's
    time was up) with the terminal result for that action and every later one."""
    kill = "action('DOWN')\nprint('after')\naction('LEFT')"
    code = "action('LEFT')\nprint(action('JUMP')['error'])\naction('UP')\nprint('not reached')"
    stop = "r = action(['LEFT', 'UP'])\nprint(r['stop_reason'], r['executed_count'])\nprint(action('UP')['error'])"
    caps = [(kill, RecordedCap(1, "kill")), (code, RecordedCap(1, "cap")), (code, RecordedCap(1, "kill")),
            (stop, RecordedCap(1, "stop"))]
    k = make_kernel(kernel=ReplayKernel, caps=caps)
    r = k.run(kill)
    assert (r.kind, r.actions, r.stdout) == ("stopped", ["DOWN"], "after\n")
    assert r.text.startswith("error: Tool timed out after 5s")  # what the Duck's call met: its 30 s kill
    r = k.run(code)  # "cap" still answers a request that executes nothing
    assert (r.kind, r.actions, r.stdout) == ("stopped", ["LEFT"], "Unknown action at index 1: 'JUMP'\n")
    r = k.run(code)
    assert (r.kind, r.actions, r.stdout) == ("stopped", ["LEFT"], "")
    r = k.run(stop)
    assert r.stdout.splitlines() == ["stopped 1", TERMINAL_ERROR]
    assert k.run("print(action('UP')['error'])").stdout.strip() == TERMINAL_ERROR  # time stays up
    assert k.run("print(len(history), last_action)").stdout == "5 LEFT\n"
    r = make_kernel(kernel=ReplayKernel, caps=[]).run("print(action(['DOWN', 'LEFT', 'UP'])['executed_count'])")
    assert r.actions == ["DOWN", "LEFT", "UP"]  # a snippet without a recorded cap is not capped


def test_the_replay_answers_to_the_ducks_names(make_kernel):
    """The Duck listed ACTION7 but played no name for it, and refused UNDO, CLICK and clicks
    written as text: its recorded code met an error there (lf52 pass 1 tried ACTION7 seven
    times), so the replay's kernel says the same; our own kernel plays them (test_kernel)."""
    k = make_kernel(kernel=ReplayKernel, caps=[])
    r = k.run("print(valid_actions[-1])\nfor a in ['ACTION7', 'UNDO', 'click', 'MOUSE(row=1, col=2)']:\n"
              "    print(action(a)['error'])\nprint(action(['JUMP', 'UNDO'])['error'])\naction('ACTION2')")
    assert r.stdout.splitlines() == ["ACTION7", "Unknown action at index 1: 'ACTION7'", "Unknown action at index 1: 'UNDO'",
                                     "Unknown action at index 1: 'click'",
                                     "Unknown action at index 1: 'MOUSE(row=1, col=2)'", "Unknown action at index 1: 'JUMP'"]
    assert r.actions == ["DOWN"]


def test_normalise_timers_and_sets():
    a = "run_elapsed_seconds: 12.5\n'time_remaining_seconds': 2687.49, {'b', 'a'}"
    b = "run_elapsed_seconds: 1.0\n'time_remaining_seconds': 3, {'a', 'b'}"
    assert normalise(a) == normalise(b)
    assert normalise("{'a': 1}") == "{'a': 1}"


def test_the_text_compared_is_the_output_then_the_error():
    assert shown(CallResult("ok", stdout="\nhi\n")) == "hi"
    assert shown(CallResult("error", stdout="out\n", error="E")) == "out\n\nerror:\nE"
    assert shown(CallResult("error", error="E\n")) == "E"


def test_cli_registers_replay():
    args = build_parser().parse_args(["replay", "traces", "--games", "g", "--out", "o"])
    assert (args.traces_dir, args.games, args.out, args.workers) == ("traces", "g", "o", 2)


@pytest.mark.public
@pytest.mark.slow
@pytest.mark.skipif(not (TRACES / "turns").is_dir(), reason="duck-traces not present")
def test_a_recorded_duck_run_replays_identically(public, tmp_path):
    doc = run_replay(str(TRACES), str(public), str(tmp_path), workers=1, only=["ft09"], passes=[0])
    o = doc["overall"]
    assert o["run_identical"] == 1.0 and o["snippet_match"] == 1.0
    # its printed output as the Duck printed it, but where the text is a format of the Duck's own
    # sandbox (its syntax-error line; action results without our animation summary): 32 of 35
    assert o["stdout_match"] >= 0.9
