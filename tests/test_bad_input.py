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
    r = subprocess.run([sys.executable, "-m", "duck.bench", *args], capture_output=True,
                       text=True, timeout=120)
    one_line_error(r, "duck.bench", "explorer", "calibration")
    assert r.stdout == ""
