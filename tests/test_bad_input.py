"""Bad input loses nothing (issue 14): each case is a one-line error (exit 2) or a reported,
skipped line, and nothing recorded before is lost."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import BUNDLED
from smalldisk import small_tmpfs
from duck.game.actions import Action
from duck.game.source import GameSource, Observation
from duck.play.record import RecordWriter, read_record, read_records
from duck.play.scoring import write_score

DUCK = str(Path(sys.executable).parent / "duck")


def duck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([DUCK, *args], capture_output=True, text=True, timeout=300)


def one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert all(w in lines[0] for w in words), lines[0]


def _obs(v: int, levels: int = 0) -> Observation:
    return Observation([np.full((64, 64), v, dtype=np.int8)], "NOT_FINISHED", levels, 2, [1, 2])


def test_out_that_is_a_file_or_cannot_be_written(tmp_path):
    (tmp_path / "f").write_text("keep")
    one_line_error(duck("play", "--games", str(BUNDLED), "--out", str(tmp_path / "f"), "--max-actions", "3"),
                   "is a file")
    assert (tmp_path / "f").read_text() == "keep"
    one_line_error(duck("play", "--games", str(BUNDLED), "--out", "/proc/duck-run", "--max-actions", "3"),
                   "cannot be written")
    one_line_error(duck("play", "--games", str(BUNDLED), "--out", str(tmp_path / "f" / "run"), "--max-actions", "3"),
                   "cannot be written")


def test_missing_games_folder_and_bad_max_actions(tmp_path):
    one_line_error(duck("play", "--games", str(tmp_path / "nope"), "--out", str(tmp_path / "r")), "no such folder")
    one_line_error(duck("play", "--games", str(BUNDLED), "--out", str(tmp_path / "r"), "--max-actions", "0"),
                   "max_actions")
    assert not (tmp_path / "r" / "records").exists() or not any((tmp_path / "r" / "records").iterdir())


def test_overwrite_with_a_typo_keeps_the_old_records(tmp_path):
    out = tmp_path / "run"
    assert duck("play", "--games", str(BUNDLED), "--out", str(out), "--max-actions", "5",
                "--policy", "random").returncode == 0
    before = {p.name: p.read_bytes() for p in (out / "records").iterdir()}
    one_line_error(duck("play", "--games", str(BUNDLED), "--out", str(out), "--only", "zs0l", "--overwrite"),
                   "no game named zs0l")
    assert {p.name: p.read_bytes() for p in (out / "records").iterdir()} == before


def test_corrupt_metadata_is_a_game_with_an_error(tmp_path):
    games = tmp_path / "games"
    shutil.copytree(BUNDLED, games)
    (games / "zc01" / "00000001" / "metadata.json").write_text('{"game_id": "zc01-00000001", "title": ')
    (games / "zb01" / "00000001" / "metadata.json").write_text('{"title": "no id, no baselines"}')
    ids = GameSource.offline(games).game_ids()
    assert ids == ["zb01-00000001", "zc01-00000001", "zs01-00000001"]  # unreadable ids: by their folders
    r = duck("play", "--games", str(games), "--out", str(tmp_path / "run"), "--max-actions", "5", "--policy", "random")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "run" / "score.json").read_text())
    errors = {g: v.get("error", "") for g, v in doc["games"].items()}
    assert len(errors) == 3
    assert "corrupt metadata.json" in errors["zc01-00000001"] and "incomplete metadata.json" in errors["zb01-00000001"]
    assert doc["games"]["zs01-00000001"]["actions"] == 5 and "error" not in doc["games"]["zs01-00000001"]


def _record(path: Path, n: int = 4, levels_at: int = 3) -> None:
    w = RecordWriter(path)
    w.header(game_id=path.stem, title="G", baselines=[2, 4], obs=_obs(0), policy="p", seed=0)
    for i in range(1, n + 1):
        w.action(i, Action(1), _obs(i, levels=1 if i >= levels_at else 0))
    w.end("max_actions", 1, n, "NOT_FINISHED")


def test_garbage_and_torn_lines_keep_every_valid_line_after_them(tmp_path):
    p = tmp_path / "records" / "g-1.jsonl"
    _record(p)
    lines = p.read_text().splitlines(keepends=True)
    # garbage after the header, a torn line in the middle, a non-record object, bad UTF-8
    bad = lines[:1] + ["garbage\n", lines[1][:20] + "\n", '{"type":"action"}\n', "\udcff\n"] + lines[1:]
    p.write_bytes("".join(bad).encode("utf-8", "surrogateescape"))
    rec = read_record(p)
    assert [a["i"] for a in rec.actions] == [1, 2, 3, 4] and rec.end is not None
    assert len(rec.problems) == 4 and rec.problems[0].startswith("line 2")
    doc = write_score(tmp_path)
    assert doc["games"]["g-1"]["levels"] == 1 and doc["record_problems"]["g-1"] == rec.problems
    r = duck("score", str(tmp_path))
    assert r.returncode == 0 and "4 line(s) skipped" in r.stderr


def test_one_unreadable_record_never_blocks_the_rest(tmp_path):
    _record(tmp_path / "records" / "good-1.jsonl")
    (tmp_path / "records" / "bin-1.jsonl").write_bytes(b"\x00\xff" * 100)
    (tmp_path / "records" / "dir-1.jsonl").mkdir()
    recs = read_records(tmp_path)
    assert [r.game_id for r in recs] == ["bin-1", "dir-1", "good-1"]
    doc = write_score(tmp_path)
    assert doc["games"]["good-1"]["levels"] == 1
    assert "record unreadable" in doc["games"]["bin-1"]["error"] and doc["games"]["dir-1"]["score"] == 0
    r = duck("report", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "report.html").exists()


def test_score_json_flags_a_toolkit_disagreement(tmp_path):
    for name, toolkit in (("same-1", None), ("diff-1", 100.0)):
        p = tmp_path / "records" / f"{name}.jsonl"
        _record(p)
        ours = write_score(tmp_path)["games"][name]["score"] if toolkit is None else toolkit
        with open(p, "a") as f:
            f.write(json.dumps({"type": "event", "kind": "scorecard", "message": "x", "data": {"score": ours}}) + "\n")
    doc = write_score(tmp_path)
    assert doc["disagrees"] == ["diff-1"] and doc["games"]["diff-1"]["toolkit_disagrees"] is True
    assert "toolkit_disagrees" not in doc["games"]["same-1"]
    assert doc["games"]["diff-1"]["toolkit_score"] == 100.0 and "toolkit_score" in doc
    assert "disagrees on diff-1" in duck("score", str(tmp_path)).stderr


def test_ab_stats_with_no_pairs_in_common_is_an_error(tmp_path):
    rows = [{"game_id": "x-1", "pass": p, "final_score": 1.0} for p in range(3)]
    f = tmp_path / "runs.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = duck("ab-stats", str(f), str(f), "--a-passes", "0", "--b-passes", "1")
    assert r.returncode != 0 and "no (game, pass) pairs in common" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


@pytest.mark.parametrize("flag", ["--games", "--out"])
def test_a_flag_without_its_value(flag, tmp_path):
    r = duck("play", flag)
    assert r.returncode == 2 and "expected one argument" in r.stderr


@pytest.mark.parametrize("args", [[], ["nope"], ["../explorer"], ["__main__"]])
def test_a_missing_or_unknown_benchmark_names_the_benchmarks(args):
    r = subprocess.run([sys.executable, "-m", "duck.cli", "bench", *args], capture_output=True,
                       text=True, timeout=120)
    one_line_error(r, "duck bench", "explorer", "calibration")
    assert r.stdout == ""



@pytest.mark.parametrize("args", [["kernel", "--lengths", "0"], ["context", "--runs", "-1"],
                                  ["context", "--turns", "0"], ["load", "--games", "0"],
                                  ["calibration", "--reps", "0"]])
def test_a_benchmark_size_out_of_range_is_an_error_naming_the_flag(args):
    r = subprocess.run([sys.executable, "-m", "duck.cli", "bench", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == ""
    assert args[1] in r.stderr.strip().splitlines()[-1] and "error:" in r.stderr, r.stderr


@pytest.mark.parametrize("option, says", [("nav_lop=3", "nav_lop: unknown field"), ("nav", "not NAME=VALUE"),
                                          ("max_clicks=-1", "max_clicks")])
def test_a_bad_explorer_option_of_the_benchmark_is_one_line(option, says):
    r = subprocess.run([sys.executable, "-m", "duck.cli", "bench", "explorer", "--option", option], capture_output=True,
                       text=True, timeout=120)
    one_line_error(r, "--option", says)
    assert r.stdout == ""


# ---------------------------------------------------------------------------------------------
# The catalog (issue 31): every kind of bad input a new user tried, through every command, is
# one line on stderr (exit 2: bad input; 1: a full disk), never a traceback and never silence.
# Run in-process through duck.cli.main (the same error path as the command line, a fraction of
# the start-up); `python tests/test_bad_input.py` prints the table of inputs and their lines.
# ---------------------------------------------------------------------------------------------

# (what, argv; {B}: a folder of bad files, {G}: the bundled games, {DONE}: a finished run,
#  {NORUN}: a folder with records/ and no run.json, {PORT}: a port in use), exit, words in the line
CATALOG: list[tuple[str, str, int, tuple[str, ...]]] = [
    # duck play
    ("--games missing", "play --games {B}/nope --out {B}/p", 2, ("no such folder",)),
    ("--games is a file", "play --games {B}/afile --out {B}/p", 2, ("not a folder",)),
    ("--games has no games", "play --games {B}/emptydir --out {B}/p", 2, ("no games found",)),
    ("--out is a file", "play --games {G} --out {B}/afile", 2, ("is a file",)),
    ("--out cannot be made", "play --games {G} --out /proc/duck-x", 2, ("cannot be written",)),
    ("--out under a file", "play --games {G} --out {B}/afile/sub", 2, ("cannot be written",)),
    ("--out holds records", "play --games {G} --out {DONE}", 2, ("already holds records", "--resume")),
    ("--max-actions 0", "play --games {G} --out {B}/p --max-actions 0", 2, ("max_actions",)),
    ("--max-actions negative", "play --games {G} --out {B}/p --max-actions -5", 2, ("max_actions",)),
    ("--max-actions not a number", "play --games {G} --out {B}/p --max-actions abc", 2, ("--max-actions", "abc")),
    ("--workers 0", "play --games {G} --out {B}/p --workers 0", 2, ("workers",)),
    ("--seed not a number", "play --games {G} --out {B}/p --seed abc", 2, ("--seed",)),
    ("--only names no game", "play --games {G} --out {B}/p --only zz99", 2, ("no game named zz99",)),
    ("--only misspelt", "play --games {G} --out {B}/p --only zb02", 2,
     ("no game named zb02 among 3 games (did you mean zb01?)",)),
    ("--set field misspelt", "play --games {G} --out {B}/p --set play.max_action=9", 2,
     ("play.max_action: unknown field (did you mean play.max_actions?)",)),
    ("--config missing", "play --games {G} --out {B}/p --config {B}/nope.toml", 2, ("nope.toml", "no such file")),
    ("--config malformed TOML", "play --games {G} --out {B}/p --config {B}/bad.toml", 2, ("malformed TOML",)),
    ("--config malformed JSON", "play --games {G} --out {B}/p --config {B}/bad.json", 2, ("malformed JSON",)),
    ("--config not a table", "play --games {G} --out {B}/p --config {B}/list.json", 2, ("not a table",)),
    ("--config binary", "play --games {G} --out {B}/p --config {B}/binary.toml", 2, ("not UTF-8",)),
    ("--config unknown field", "play --games {G} --out {B}/p --config {B}/unknown.toml", 2, ("play.bogus", "unknown")),
    ("--config is a folder", "play --games {G} --out {B}/p --config {B}/emptydir", 2, ("is a folder",)),
    ("--set without =", "play --games {G} --out {B}/p --set play.seed", 2, ("a.b=value",)),
    ("--set unknown field", "play --games {G} --out {B}/p --set play.bogus=1", 2, ("play.bogus",)),
    ("--set value out of range", "play --games {G} --out {B}/p --set kernel.call_timeout_s=-1", 2,
     ("call_timeout_s",)),
    ("--set unknown profile", "play --games {G} --out {B}/p --set model.profile=bogus", 2, ("model.profile",)),
    ("--set explorer option misspelt", "play --games {G} --out {B}/p --set explorer.nav_lop=3", 2,
     ("explorer.nav_lop", "unknown field")),
    ("--set explorer option bad value", "play --games {G} --out {B}/p --set explorer.nav=maybe", 2,
     ("explorer.nav", "boolean")),
    ("DUCK_ variable malformed", "ENV:DUCK_PLAY__SEED=abc play --games {G} --out {B}/p", 2, ("play.seed",)),
    ("--policy unknown", "play --games {G} --out {B}/p --policy bogus", 2, ("play.policy", "FILE.py:ClassName")),
    ("--policy llm, no server", "play --games {G} --out {B}/p --policy llm", 2, ("needs a model server",
                                                                                  "model_fallback")),
    ("--model-url refused", "play --games {G} --out {B}/p --model-url http://127.0.0.1:9", 2,
     ("no model server answers", "nothing played")),
    ("--model-url not a URL", "play --games {G} --out {B}/p --model-url notaurl", 2, ("not an http",)),
    ("--policy file missing", "play --games {G} --out {B}/p --policy {B}/nope.py:Mine", 2, ("no such file",)),
    ("--policy class missing", "play --games {G} --out {B}/p --policy {B}/noclass.py:Mine", 2, ("has no Mine",)),
    ("--policy file syntax error", "play --games {G} --out {B}/p --policy {B}/syntax.py:Mine", 2,
     ("syntax error", "line 1")),
    ("--policy file raises on import", "play --games {G} --out {B}/p --policy {B}/raises.py:Mine", 2,
     ("raised RuntimeError: boom",)),
    ("--policy class not a policy", "play --games {G} --out {B}/p --policy {B}/notpolicy.py:NotPolicy", 2,
     ("not a policy class",)),
    ("--policy not a .py file", "play --games {G} --out {B}/p --policy {B}/afile:Mine", 2, ("FILE.py:ClassName",)),
    ("--resume without run.json", "play --resume --out {NORUN}", 2, ("no run.json",)),
    ("--resume of no folder", "play --resume --out {B}/nope", 2, ("no run folder",)),
    ("--resume with --games", "play --resume --out {DONE} --games {G}", 2, ("own config", "--games")),
    ("--resume with --set", "play --resume --out {DONE} --set play.seed=3", 2, ("own config", "--set")),
    ("--resume with --overwrite", "play --resume --out {DONE} --overwrite", 2, ("--overwrite",)),
    ("--resume of a malformed run.json", "play --resume --out {BADRUN}", 2, ("run.json", "unreadable")),
    ("a flag without its value", "play --games", 2, ("expected one argument",)),
    ("an unknown flag", "play --bogus", 2, ("unrecognized arguments",)),
    # duck score / report
    ("score: no folder", "score {B}/nope", 2, ("no such folder",)),
    ("score: a file", "score {B}/afile", 2, ("not a folder",)),
    ("score: no records/", "score {B}/emptydir", 2, ("no records/",)),
    ("report: no folder", "report {B}/nope", 2, ("no such folder",)),
    ("report: a file", "report {B}/afile", 2, ("not a folder",)),
    ("report: no records/", "report {B}/emptydir", 2, ("no records/",)),
    ("report: empty records/", "report {NORUN}", 2, ("holds no records",)),
    ("report --out cannot be made", "report {DONE} --out /proc/duck-x", 2, ("cannot be written",)),
    ("report --out is a file", "report {DONE} --out {B}/afile", 2, ("is a file",)),
    ("report A B, B missing", "report {DONE} {B}/nope", 2, ("no such folder",)),
    ("report A B, B without records", "report {DONE} {B}/emptydir", 2, ("no records/",)),
    ("report of three runs", "report {DONE} {DONE} {DONE}", 2, ("not 3",)),
    ("report --duck-summary malformed", "report {DONE} --duck-summary {B}/bad.json", 2, ("summary.json",)),
    # duck simulate (issue 29's module: checked here, in the CLI layer)
    ("simulate --runs missing", "simulate --runs {B}/nope.jsonl", 2, ("--runs", "no such file")),
    ("simulate --runs malformed", "simulate --runs {B}/runs.jsonl --baselines {G}", 2, ("malformed JSON", "runs.jsonl")),
    ("simulate --runs a folder", "simulate --runs {B}/emptydir --baselines {G}", 2, ("Is a directory",)),
    ("simulate --seeds 0", "simulate --runs {B}/afile --seeds 0", 2, ("--seeds", "above 0")),
    ("simulate --slots negative", "simulate --runs {B}/afile --slots -2", 2, ("--slots", "above 0")),
    ("simulate --scenario unknown", "simulate --runs {B}/afile --scenario x", 2, ("invalid choice",)),
    ("simulate --baselines missing", "simulate --runs {B}/afile --baselines {B}/nope", 2, ("--baselines",)),
    # duck replay, ab, ab-stats, ab-merge
    ("replay: traces missing", "replay {B}/nope --games {G} --out {B}/r", 2, ("no such file",)),
    ("replay: traces without runs.jsonl", "replay {B}/emptydir --games {G} --out {B}/r", 2, ("runs.jsonl",)),
    ("replay --games missing", "replay {B}/emptydir --games {B}/nope --out {B}/r", 2, ("--games",)),
    ("replay --out is a file", "replay {B}/emptydir --games {G} --out {B}/afile", 2, ("is a file",)),
    ("ab --a missing", "ab --a {B}/nope.toml --b {B}/nope.toml --games {G} --out {B}/ab", 2, ("--a",)),
    ("ab --a malformed", "ab --a {B}/bad.toml --b {B}/bad.toml --games {G} --out {B}/ab", 2, ("malformed TOML",)),
    ("ab --games missing", "ab --a {B}/ok.toml --b {B}/ok.toml --games {B}/nope --out {B}/ab", 2, ("--games",)),
    ("ab --out is a file", "ab --a {B}/ok.toml --b {B}/ok.toml --games {G} --out {B}/afile", 2, ("is a file",)),
    ("ab --passes 0", "ab --a {B}/ok.toml --b {B}/ok.toml --games {G} --out {B}/ab --passes 0", 2, ("--passes",)),
    ("ab-stats: A missing", "ab-stats {B}/nope {B}/nope", 2, ("no such file",)),
    ("ab-stats: malformed runs", "ab-stats {B}/runs.jsonl {B}/runs.jsonl", 2, ("malformed JSON",)),
    ("ab-merge: shard missing", "ab-merge {B}/nope --out {B}/m", 2, ("no such file",)),
    ("ab-merge: not a shard", "ab-merge {B}/emptydir --out {B}/m", 2, ("plan.json",)),
    # the servers and the rehearsals
    ("stub-server --replies missing", "stub-server --replies {B}/nope.json", 2, ("--replies",)),
    ("stub-server --replies malformed", "stub-server --replies {B}/bad.json", 2, ("malformed JSON",)),
    ("stub-server --conversation missing", "stub-server --conversation {B}/nope.jsonl", 2, ("--conversation",)),
    ("stub-server --conversation not one", "stub-server --conversation {B}/afile", 2, ("not a conversation file",)),
    ("stub-server --traces missing", "stub-server --traces {B}/nope --game ls20", 2, ("--traces",)),
    ("stub-server --port in use", "stub-server --replies {B}/replies.json --port {PORT}", 2, ("already in use",)),
    ("rehearse --games missing", "rehearse --games {B}/nope", 2, ("--games",)),
    ("rehearse --budget-seconds negative", "rehearse --budget-seconds -1", 2, ("--budget-seconds", "above 0")),
    ("doctor --games missing", "doctor --games {B}/nope", 2, ("--games",)),
    ("doctor --game-seconds 0", "doctor --game-seconds 0", 2, ("--game-seconds",)),
    ("serve --config missing", "serve --dry-run --config {B}/nope.toml", 2, ("--config",)),
    ("serve --config malformed", "serve --dry-run --config {B}/bad.toml", 2, ("malformed TOML",)),
    ("an unknown command", "bogus", 2, ("invalid choice",)),
    ("no command", "", 2, ("required",)),
]


def make_bad_inputs(b: Path) -> dict[str, str]:
    """The files and folders the catalog names; returns the placeholders."""
    b.mkdir(parents=True, exist_ok=True)
    (b / "afile").write_text("x\n")
    (b / "emptydir").mkdir(exist_ok=True)
    (b / "bad.toml").write_text("play = {seed = \n")
    (b / "bad.json").write_text('{"play": ')
    (b / "list.json").write_text("[1, 2]")
    (b / "binary.toml").write_bytes(b"\xff\xfe\x00play")
    (b / "unknown.toml").write_text("[play]\nbogus = 1\n")
    (b / "ok.toml").write_text('[play]\npolicy = "random"\n')
    (b / "runs.jsonl").write_text("[1,2\n")
    (b / "replies.json").write_text('[{"content": "hi"}]')
    (b / "syntax.py").write_text("def f(:\n")
    (b / "noclass.py").write_text("class Other:\n    pass\n")
    (b / "raises.py").write_text("raise RuntimeError('boom')\n")
    (b / "notpolicy.py").write_text("class NotPolicy:\n    pass\n")
    (b / "norun" / "records").mkdir(parents=True, exist_ok=True)
    (b / "badrun" / "records").mkdir(parents=True, exist_ok=True)
    (b / "badrun" / "run.json").write_text("{ torn")
    done = b / "done"
    if not (done / "score.json").exists():
        r = duck("play", "--games", str(BUNDLED), "--only", "zs01", "--max-actions", "3", "--out", str(done))
        assert r.returncode == 0, r.stderr
    return {"B": str(b), "G": str(BUNDLED), "DONE": str(done), "NORUN": str(b / "norun"), "BADRUN": str(b / "badrun")}


def run_case(argv: str, places: dict[str, str]) -> tuple[int, str, str]:
    """(exit status, stderr, stdout) of `duck ARGV` run in this process."""
    import contextlib
    import io
    import os

    from duck.cli import main
    env = {}
    if argv.startswith("ENV:"):
        assign, argv = argv[4:].split(" ", 1)
        env = dict([assign.split("=", 1)])
    args = [a.format(**places) for a in argv.split()]
    err, out = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(args)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, err.getvalue(), out.getvalue()


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    p = make_bad_inputs(tmp_path_factory.mktemp("bad"))
    p["PORT"] = str(sock.getsockname()[1])
    yield p
    sock.close()


@pytest.mark.parametrize("what,argv,code,words", CATALOG, ids=[c[0] for c in CATALOG])
def test_catalog_of_bad_inputs(what, argv, code, words, places):
    got, err, _ = run_case(argv, places)
    lines = err.strip().splitlines()
    assert got == code and len(lines) == 1, f"{what}: exit {got}, stderr:\n{err}"
    assert "error:" in lines[0] and "Traceback" not in err
    assert all(w in lines[0] for w in words), lines[0]


def test_the_catalog_counts_the_issues_54_kinds():
    assert len(CATALOG) >= 54 and len({c[0] for c in CATALOG}) == len(CATALOG)


def test_a_full_disk_under_report_and_score_is_one_line(places, tmp_path):
    """A full disk where a command writes: one line, exit 1, what was there kept."""
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        try:
            shutil.copytree(places["DONE"], disk / "run")
            (disk / "filler").write_bytes(b"\0" * (64 * 1024))  # whatever did not fit is still the disk full
        except OSError:
            pass
        for argv in (f"report {disk / 'run'}", f"score {disk / 'run'}"):
            code, err, _ = run_case(argv, places)
            lines = err.strip().splitlines()
            assert code == 1 and len(lines) == 1 and "the disk is full" in lines[0], err
        assert (disk / "run" / "records").is_dir()


if __name__ == "__main__":  # the table of the catalog, for the issue's note
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        p = make_bad_inputs(Path(tmp) / "bad") | {"PORT": str(s.getsockname()[1])}
        print("| # | bad input | command | exit | the one line |\n|---|---|---|---|---|")
        for n, (what, argv, _, _) in enumerate(CATALOG, 1):
            code, err, _ = run_case(argv, p)
            line = " / ".join(err.strip().splitlines()).replace(tmp, "TMP").replace("|", "\\|")
            shown = argv.replace("{B}", "BAD").replace("{G}", "tests/games").replace("{DONE}", "RUN")
            shown = shown.replace("{NORUN}", "NORUN").replace("{BADRUN}", "BADRUN").replace("{PORT}", "PORT")
            print(f"| {n} | {what} | `duck {shown}` | {code} | {line} |")
