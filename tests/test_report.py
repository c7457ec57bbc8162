"""duck report: built from real run folders (play_folder / play_game on real games) and
checked headlessly: the HTML parses, every section is there, one <img> per level frame."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from duck.game.actions import Action
from duck.game.source import GameSource
from duck.play.session import play_game
from duck.play.record import read_records
from duck.lab.report.build import build_report, write_report
from duck.lab.report.html import report_html, report_markdown
from duck.lab.report.views import model_stats
from duck.run import play_folder, write_score
from duck.play.scoring import score_record
from duck.paths import SHARED

SHARED_SUMMARY = SHARED / "duck-traces" / "summary.json"


class Page(HTMLParser):
    """Collects what a headless check needs: sections by id, game sections, frame images."""

    def __init__(self) -> None:
        super().__init__()
        self.section_ids: list[str] = []
        self.game_sections: list[str] = []
        self.frames: list[dict[str, str]] = []
        self.images: list[dict[str, str]] = []
        self.headers: list[str] = []
        self._in_th = False
        self.stack: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag not in ("img", "br", "meta"):
            self.stack.append(tag)
        if tag == "section":
            self.section_ids.append(a.get("id", ""))
            if "game" in a.get("class", "").split():
                self.game_sections.append(a.get("data-game", ""))
        if tag == "img":
            self.images.append(a)
            assert a["src"].startswith("data:image/png;base64,"), "images must be embedded"
            if "frame" in a.get("class", "").split():
                self.frames.append(a | {"game": self.game_sections[-1]})
        if tag == "th":
            self._in_th = True

    def handle_endtag(self, tag):
        if tag == "th":
            self._in_th = False
        if tag not in ("img", "br", "meta"):
            assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}> after {self.stack[-3:]}"
            self.stack.pop()

    def handle_data(self, data):
        if self._in_th:
            self.headers.append(data.strip())


def parse(html: str) -> Page:
    p = Page()
    p.feed(html)
    p.close()
    assert p.stack == [], f"unclosed tags {p.stack}"
    return p


def expected_levels(rec) -> int:
    """Levels the report must show frames for: the completed ones and the unfinished one."""
    s = score_record(rec)
    won = rec.actions and rec.actions[-1]["state"] == "WIN"
    return s.levels + (0 if won or s.levels >= s.levels_total else 1)


@pytest.fixture(scope="module")
def bundled_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    play_folder(Path(__file__).parent / "games", out, policy="random", seed=0, max_actions=200)
    return out


def check_report(run_dir: Path, summary: Path | None) -> Page:
    paths = write_report(run_dir, duck_summary=summary)
    html = paths["html"].read_text()
    page = parse(html)
    recs = read_records(run_dir)
    assert {"overall", "games"} <= set(page.section_ids)
    assert sorted(page.game_sections) == sorted(r.game_id for r in recs)
    for r in recs:
        frames = [f for f in page.frames if f["game"] == r.game_id]
        n = expected_levels(r)
        assert len(frames) == 2 * n, r.game_id
        assert sorted(f["data-kind"] for f in frames) == sorted(["first", "last"] * n)
        assert sorted({int(f["data-level"]) for f in frames}) == list(range(1, n + 1))
    for heading in ("Levels", "First and last frame", "Notes at each level", "Errors and time-outs"):
        assert html.count(heading) >= len(recs), heading
    md = paths["md"].read_text()
    assert "# Run report" in md and all(r.game_id in md for r in recs)
    return page


def test_report_of_a_bundled_run(bundled_run: Path, tmp_path: Path):
    page = check_report(bundled_run, tmp_path / "absent.json")
    assert "Duck mean" not in page.headers  # no summary file: no column
    assert "model calls" not in page.headers  # no model played
    score = json.loads((bundled_run / "score.json").read_text())["score"]
    html = (bundled_run / "report.html").read_text()
    assert f"{score:.3f}" in html
    # plots: the overview and one per game
    plots = [i for i in page.images if "plot" in i.get("class", "")]
    assert len(plots) == 1 + len(page.game_sections)


def test_duck_reference_column(bundled_run: Path, tmp_path: Path):
    recs = read_records(bundled_run)
    summary = {"overall": {}, "games": {recs[0].game_id: {"mean_score": 12.345, "mean_levels_completed": 1.5,
                                                          "mean_actions": 99}}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    report = build_report(bundled_run, path)
    assert report.has_duck
    html = report_html(report, frames=False)
    page = parse(html)
    assert "Duck mean" in page.headers and not page.frames
    assert "12.35" in html and "12.35" in report_markdown(report)


class TalkativePolicy:
    """Plays the bundled zc01 with its solution, leaving what an LLM agent leaves: model
    stats per action, a `model` event per call, notes at each level's end, an error and a
    time-out."""

    name = "talkative"

    def __init__(self, solution: list[list[list[int]]]) -> None:
        self.solution = solution

    def play(self, session) -> None:
        session.event("timeout", "kernel call timed out after 30 s", {"call": 1})
        for level, moves in enumerate(self.solution[:2], start=1):
            for m in moves:
                session.event("model", "call", {"usage": {"prompt_tokens": 100, "completion_tokens": 20}})
                session.step(Action.from_json(m), info={"model": {"calls": 1, "prompt_tokens": 100,
                                                                   "completion_tokens": 20}})
            session.event("notes", f"notes after level {level}",
                          {"World model": f"level {level} understood", "Plan": "next"})
        session.event("error", "model server returned 503")
        for _ in range(3):
            session.step(Action(1))


@pytest.fixture(scope="module")
def talkative_run(tmp_path_factory) -> Path:
    from conftest import solutions
    out = tmp_path_factory.mktemp("talk")
    sols = solutions()
    game_id = next(g for g in sols if g.startswith("zc01"))
    play_game(GameSource.offline(Path(__file__).parent / "games"), game_id, TalkativePolicy(sols[game_id]),
              max_actions=100, record_path=out / "records" / f"{game_id}.jsonl")
    write_score(out)
    return out


def test_notes_model_stats_errors_and_timeouts(talkative_run: Path, tmp_path: Path):
    rec = read_records(talkative_run)[0]
    stats = model_stats(rec)
    n_calls = sum(1 for e in rec.events if e["kind"] == "model")
    assert stats["calls"] == n_calls and stats["total_tokens"] == 120 * n_calls
    page = check_report(talkative_run, tmp_path / "absent.json")
    assert "model calls" in page.headers and "tokens" in page.headers
    html = (talkative_run / "report.html").read_text()
    assert "level 1 understood" in html and "level 2 understood" in html
    assert "model server returned 503" in html and "kernel call timed out" in html
    report = build_report(talkative_run, tmp_path / "absent.json")
    view = report.views[0]
    assert [lev.number for lev in view.levels if lev.notes] == [1, 2]  # notes belong to the level they end
    assert {e["kind"] for e in view.problems} == {"error", "timeout"}
    assert report.overall()["errors"] == 1 and report.overall()["timeouts"] == 1
    md = (talkative_run / "report.md").read_text()
    assert "level 2 understood" in md and "model server returned 503" in md


def test_model_stats_from_action_info_only(talkative_run: Path):
    rec = read_records(talkative_run)[0]
    rec.events = [e for e in rec.events if e["kind"] != "model"]
    stats = model_stats(rec)
    assert stats["calls"] > 0 and stats["total_tokens"] == 120 * stats["calls"]


def test_cli_report(bundled_run: Path, tmp_path: Path, capsys):
    from duck.cli import main
    assert main(["report", str(bundled_run), "--out", str(tmp_path / "rep"), "--duck-summary",
                 str(tmp_path / "none.json")]) == 0
    assert (tmp_path / "rep" / "report.html").exists() and (tmp_path / "rep" / "report.md").exists()


def test_folder_without_records_is_a_clear_error(tmp_path: Path):
    with pytest.raises(SystemExit, match="no records"):
        build_report(tmp_path)


@pytest.mark.public
def test_report_of_all_public_games(public: Path, tmp_path: Path):
    """A run over the 25 public games renders every section, with one image per level frame
    (short games: the report, not the play, is under test)."""
    play_folder(public, tmp_path, policy="random", seed=0, max_actions=10, workers=2)
    assert len(read_records(tmp_path)) == 25
    summary = SHARED_SUMMARY if SHARED_SUMMARY.exists() else None
    page = check_report(tmp_path, summary or tmp_path / "absent.json")
    assert len(page.game_sections) == 25
    assert ("Duck mean" in page.headers) == (summary is not None)


def test_report_of_a_run_with_a_broken_game(games_with_broken: Path, tmp_path: Path):
    play_folder(games_with_broken, tmp_path, policy="random", seed=0, max_actions=20)
    page = check_report(tmp_path, tmp_path / "absent.json")
    broken = [r for r in read_records(tmp_path) if r.header.get("state") == "ERROR"]
    assert broken, "the fixture should hold a game that fails to load"
    html = (tmp_path / "report.html").read_text()
    for r in broken:
        assert not [f for f in page.frames if f["game"] == r.game_id]
        assert html.count(r.events[0]["message"][:40]) >= 1
