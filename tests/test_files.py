"""duck.files: a file is replaced whole or not at all (a full disk, an error mid-write), an
--out that cannot take a file is one line, and a run that starts over leaves no old record."""

from __future__ import annotations

import json

import pytest

from duck.files import fresh_run, replacing, unwritable, write_whole
from duck.play.conversation import ConversationWriter
from duck.play.scoring import write_score
from smalldisk import small_tmpfs


def test_an_error_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "score.json"
    write_whole(path, "old")
    with pytest.raises(RuntimeError):
        with replacing(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["score.json"]


def test_a_full_disk_keeps_the_old_score_json_whole(tmp_path):
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        (disk / "records").mkdir()
        write_whole(disk / "score.json", json.dumps({"score": 1.0}))
        try:
            (disk / "filler").write_bytes(b"\0" * (64 * 1024))
        except OSError:
            pass  # the disk is full now
        with pytest.raises(OSError):
            write_whole(disk / "score.json", "z" * 100_000)
        assert json.loads((disk / "score.json").read_text()) == {"score": 1.0}
        assert not list(disk.glob(".*.tmp"))
        with pytest.raises(OSError):
            write_score(disk)  # duck score on a full disk
        assert json.loads((disk / "score.json").read_text()) == {"score": 1.0}


def test_a_finished_conversation_is_gzipped_whole(tmp_path):
    w = ConversationWriter(tmp_path / "conversations" / "g.jsonl")
    w.begin(model="m")
    gz = w.close("done")
    assert gz is not None and gz.name == "g.jsonl.gz" and sorted(p.name for p in gz.parent.iterdir()) == [gz.name]


def test_an_out_that_cannot_take_a_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert unwritable(tmp_path / "afile") == f"--out {tmp_path / 'afile'} is a file, not a folder"
    assert unwritable(tmp_path / "afile" / "sub").startswith(f"--out {tmp_path / 'afile' / 'sub'} cannot be written: ")
    assert unwritable(tmp_path / "new", "records") is None and (tmp_path / "new" / "records").is_dir()
    assert list((tmp_path / "new" / "records").iterdir()) == []  # (its probe file is gone)


def test_a_run_that_starts_over_leaves_no_old_record_or_conversation(tmp_path):
    for name in ("records/a.jsonl", "conversations/a.jsonl.gz", "conversations/b.jsonl", "notes.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    assert fresh_run(tmp_path) == tmp_path / "records"
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["notes.txt"]
