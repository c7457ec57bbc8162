"""The report's conversation view: built from a real stub-server run of the agent on the bundled
games, parsed, and rendered by headless Chromium (skipped, saying so, where none is installed;
Debian: `apt-get install chromium`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from conftest import BUNDLED
from duck.config import load_config
from duck.lab.report.build import write_report
from duck.lab.report.highlight import highlight_python
from duck.play.conversation import read_conversation
from duck.run import play_folder
from devkit.stub.models import SolutionModel
from devkit.stub.server import StubServer


class ConvPage(HTMLParser):
    """Per conversation view: its request count, turns, boards, highlighted code."""

    def __init__(self) -> None:
        super().__init__()
        self.views: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        cls = a.get("class", "").split()
        if tag == "div" and "conv" in cls:
            self.views.append({"id": a["id"], "requests": int(a["data-requests"]), "turns": 0, "boards": 0,
                               "spans": set()})
        elif self.views and tag == "details" and "turn" in cls:
            self.views[-1]["turns"] += 1
        elif self.views and tag == "img" and "board" in cls:
            assert a["src"].startswith("data:image/png;base64,")
            self.views[-1]["boards"] += 1
        elif self.views and tag == "span":
            self.views[-1]["spans"].update(cls)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report_conv") / "run"
    with StubServer(SolutionModel(BUNDLED)) as url:
        cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.fallback=null", "play.policy=llm",
                                     f'model.urls=["{url}"]', "agent.context_tokens=4200",
                                     "model.max_output_tokens=400"])  # small: it trims (a level-up turn: 2 boards)
        play_folder(BUNDLED, out, cfg, games=["zc01"])
    write_report(out)
    return out


def test_each_game_has_a_conversation_view_with_every_turn_and_board(run):
    page = ConvPage()
    page.feed((run / "report.html").read_text())
    convs = {c.game_id: c for c in map(read_conversation, sorted(run.glob("conversations/*.jsonl.gz")))}
    assert [v["id"] for v in page.views] == [f"game-{g}-conversation" for g in convs]
    for view, conv in zip(page.views, convs.values()):
        turns = [ln for ln in conv.lines if ln.get("type") == "message" and "level" in ln]
        assert view["requests"] == len(conv.requests) and view["turns"] == view["boards"] == len(turns) == 3
        assert {"b", "n"} <= view["spans"]  # print / action and the click coordinates
    html = (run / "report.html").read_text()
    assert "the prompt neared its budget: turns 0" in html
    assert "notes changed: Plan" in html
    md = (run / "report.md").read_text()
    assert "Conversation: 3 turns, 6 model requests" in md and "MOUSE ×3" in md


def test_the_highlighter_colours_tokens_and_survives_broken_code():
    assert highlight_python("for a in x:  # go\n    print('a', 3)") == (
        "<span class=k>for</span> a <span class=k>in</span> x:  <span class=c># go</span>\n"
        "    <span class=b>print</span>(<span class=s>&#x27;a&#x27;</span>, <span class=n>3</span>)")
    assert highlight_python("s = '<b>") == "s = &#x27;&lt;b&gt;"  # cut mid-string: escaped, no colour


def chromium() -> str | None:
    for name in (os.environ.get("DUCK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(chromium() is None, reason="no headless Chromium here (apt-get install chromium, or "
                                                "DUCK_CHROMIUM=/path/to/chrome); CI does not install it")
def test_the_conversation_view_renders_in_headless_chromium(run, tmp_path):
    from PIL import Image
    shot = tmp_path / "report.png"
    p = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1280,3600", f"--screenshot={shot}", (run / "report.html").as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    if os.environ.get("DUCK_SCREENSHOT"):  # keep it to look at
        shutil.copy(shot, os.environ["DUCK_SCREENSHOT"])
    rgb = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    assert rgb.shape[0] == 1280 * 3600

    def pixels(hex_colour: str, tolerance: int = 0) -> int:
        want = np.array([int(hex_colour[i:i + 2], 16) for i in (0, 2, 4)])
        return int((np.abs(rgb.astype(int) - want).max(axis=1) <= tolerance).sum())
    # Painted, not only parsed: the code blocks' background, the highlighter's builtin colour,
    # and the boards (zc01's green and orange tiles, ARC palette) inside the open turns.
    assert pixels("272822") > 20_000 and pixels("66d9ef", tolerance=40) > 100  # (text is antialiased)
    assert pixels("4fcc30") > 1_000 and pixels("ff851b") > 1_000
