"""The report's step-through player (duck.lab.report.player, player.html): its data checked
against the records and against the games replayed (every final board, every animation frame,
the actions, levels, states, the jumps to level starts, GAME_OVER and the win, the reasons,
a model game's turns), and the page drawn by headless Chromium (skipped, saying so, where
none is installed; Debian: `apt-get install chromium`)."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import BUNDLED
from duck.config import load_config
from duck.game.actions import Action
from duck.game.frames import PALETTE
from duck.game.source import GameSource
from duck.lab.report.build import write_report
from duck.lab.report.player import encode_boards
from duck.play.record import read_records
from duck.run import play_folder

USER_POLICY = """
from duck.policies import Action, UserPolicy

class Says(UserPolicy):
    def choose_action(self, obs):
        if self.step_count >= 6:
            return None
        self.reason = f"step {self.step_count}: up, then down"
        return Action(1 if self.step_count % 2 == 0 else 2)
"""


def decode_boards(text: str, n: int, h: int, w: int) -> list[np.ndarray]:
    """The boards of `encode_boards`, decoded as the page's script does."""
    data, pos = base64.b64decode(text), 0

    def varint() -> int:
        nonlocal pos
        shift = value = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value
    board = np.zeros(h * w, dtype=np.int8)
    out = []
    for _ in range(n):
        cell = 0
        for _ in range(varint()):
            cell += varint()
            length = varint()
            for k in range(length):
                byte = data[pos + k // 2]
                board[cell + k] = (byte >> 4) if k % 2 == 0 else (byte & 15)
            pos += (length + 1) // 2
            cell += length
        out.append(board.reshape(h, w).copy())
    return out


def page_data(run: Path) -> dict:
    html = (run / "player.html").read_text()
    blob = re.search(r'<script type="application/json" id="duck-player">(.*?)</script>', html, re.S).group(1)
    return json.loads(blob)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The bundled games played by the explorer with its reasons kept (`trace`), then reported."""
    out = tmp_path_factory.mktemp("player") / "run"
    play_folder(BUNDLED, out, policy="explorer", max_actions=300, options={"trace": True})
    paths = write_report(out)
    assert paths["player"] == out / "player.html"
    return out


def test_every_board_and_animation_frame_is_the_games_own(run):
    data = page_data(run)
    records = {r.game_id: r for r in read_records(run)}
    assert [g["id"] for g in data["games"]] == sorted(records)
    source = GameSource.offline(BUNDLED)
    animated = 0
    for g in data["games"]:
        rec = records[g["id"]]
        boards = decode_boards(g["boards"], g["n"], g["h"], g["w"])
        assert len(g["a"]) == len(rec.actions) + 1 == len(g["st"]) and g["n"] == len(g["a"]) + sum(g["nf"])
        game = source.make(g["id"])  # replayed: the frames the game itself shows for each action
        k = 0
        assert np.array_equal(boards[0], game.obs.grid)
        for s, a in enumerate(rec.actions, start=1):
            obs = game.step(Action.from_json(a["action"]))
            frames = boards[k + 1:k + 2 + g["nf"][s]]
            k += 1 + g["nf"][s]
            assert len(frames) == len(obs.frames) == g["fr"][s], (g["id"], s)
            assert all(np.array_equal(x, y) for x, y in zip(frames, obs.frames)), (g["id"], s)
            assert g["a"][s] == str(Action.from_json(a["action"])) and g["lv"][s] == a["levels"]
            assert g["st"][s] == {"NOT_FINISHED": "N", "WIN": "W", "GAME_OVER": "G"}[a["state"]]
            animated += g["nf"][s] > 0
        final = dict(rec.grids())
        assert all(np.array_equal(boards[g_i], final[s]) for s, g_i in
                   enumerate(np.cumsum([0] + [1 + n for n in g["nf"][1:]])))
    assert animated > 10  # zs01 slides: its moves are animated, and every frame is there


def test_jumps_to_level_starts_game_over_and_the_win(run):
    games = {g["id"][:4]: g for g in page_data(run)["games"]}
    for g in games.values():
        levels = [m for m in g["marks"] if m["kind"] == "level"]
        assert levels[0] == {"label": "level 1 start", "s": 0, "kind": "level"}
        assert [m["s"] for m in levels[1:]] == [s for s in range(1, len(g["lv"]))
                                                if g["lv"][s] > g["lv"][s - 1] and g["st"][s] != "W"]
    report = (run / "report.html").read_text()  # each level of the report links to its start in the player
    for g in games.values():
        assert f'href="player.html#game={g["id"]}"' in report
        for m in g["marks"]:
            if m["kind"] == "level":
                assert f'href="player.html#game={g["id"]}&amp;step={m["s"]}"' in report
    zs = games["zs01"]
    assert zs["marks"][-1] == {"label": "win", "s": len(zs["a"]) - 1, "kind": "win"} and zs["st"][-1] == "W"
    overs = [m["s"] for m in games["zb01"]["marks"] if m["kind"] == "over"]  # the move budget runs out
    assert overs and all(games["zb01"]["st"][s] == "G" != games["zb01"]["st"][s - 1] for s in overs)
    assert all(games["zb01"]["rt"][games["zb01"]["r"][s + 1]].startswith("RESET") for s in overs)


def test_the_explorers_reasons_are_shown(run):
    for g in page_data(run)["games"]:
        why = [g["rt"][i] for i in g["r"][1:]]
        assert all(why), g["id"]  # every action has one
        assert any(w.startswith("search: the cheapest untried action is ") for w in why)
    assert any(w.startswith("navigator:") for w in page_data(run)["games"][2]["rt"])  # zs01: the avatar walks


def test_each_game_as_a_gif_that_opens_and_the_player_links_it(run, tmp_path):
    """`duck report` writes gif/<game>.gif (duck.lab.report.gif): Pillow reads each back with one
    frame per board of the page (the first board, each action's animation and final board), the
    board drawn cell by cell in the ARC palette above the caption; a long game is thinned."""
    from PIL import Image
    from duck.lab.report.gif import CAPTION_PX, write_gif
    data = page_data(run)
    for g in data["games"]:
        assert g["gif"] == f"gif/{g['id']}.gif"
        boards = decode_boards(g["boards"], g["n"], g["h"], g["w"])
        with Image.open(run / g["gif"]) as im:
            assert im.size == (64 * 5, 64 * 5 + CAPTION_PX) and im.n_frames == g["n"] <= 600
            for k in (0, g["n"] - 1):
                im.seek(k)
                rgb = np.asarray(im.convert("RGB"))[:320:5, ::5]
                assert np.array_equal(rgb, PALETTE[boards[k].astype(np.int64) & 15])
    rec = next(r for r in read_records(run) if r.game_id.startswith("zs01"))  # 3 levels, animations
    doc = write_gif(rec, tmp_path / "short.gif", max_frames=20)
    with Image.open(tmp_path / "short.gif") as im:
        assert im.n_frames == doc["frames"] == doc["steps"] <= 20 and doc["of_steps"] == len(rec.actions) + 1
    r = subprocess.run([str(Path(sys.executable).parent / "duck"), "gif", str(run), "zs02"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == f"duck gif: error: {run}: no record of zs02 among 3 " \
        "(did you mean zs01?)"


def test_a_user_policys_reason_and_the_page_size(tmp_path):
    (tmp_path / "says.py").write_text(USER_POLICY)
    out = tmp_path / "run"
    play_folder(BUNDLED, out, policy=f"{tmp_path / 'says.py'}:Says", games=["zb01"])
    write_report(out)
    g = page_data(out)["games"][0]
    assert [g["rt"][i] for i in g["r"]] == [""] + [f"step {k}: up, then down" for k in range(6)]
    # the board stream: a few bytes a board where a move changes a few cells
    rng = np.random.default_rng(0)
    boards = [rng.integers(0, 16, (64, 64)).astype(np.int8)]
    for _ in range(999):
        b = boards[-1].copy()
        b[rng.integers(0, 64, 3), rng.integers(0, 64, 3)] = rng.integers(0, 16, 3)
        boards.append(b)
    text = encode_boards(boards)
    assert all(np.array_equal(x, y) for x, y in zip(decode_boards(text, 1000, 64, 64), boards))
    assert len(text) < 4 * 2048 + 4 * 1000 * 12  # the first board, then ~3 cells a board


@pytest.fixture(scope="module")
def model_run(tmp_path_factory) -> Path:
    from devkit.stub.models import SolutionModel
    from devkit.stub.server import StubServer
    out = tmp_path_factory.mktemp("player_model") / "run"
    with StubServer(SolutionModel(BUNDLED)) as url:
        cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.fallback=null", "play.policy=llm",
                                     f'model.urls=["{url}"]'])
        play_folder(BUNDLED, out, cfg, games=["zc01"])
    write_report(out)
    return out


def test_a_model_games_actions_show_their_turns_code_and_output(model_run):
    g = page_data(model_run)["games"][0]
    turns = {int(k): t for k, t in g["turns"].items()}
    assert len(turns) >= 3 and all(t["code"] and t["out"] for t in turns.values())
    sent = [g["tn"][s] for s in range(1, len(g["a"]))]
    assert all(t in turns for t in sent) and sent == sorted(sent)  # every action is a turn's
    for s in range(1, len(g["a"])):
        assert g["rt"][g["r"][s]].startswith(f"model turn {g['tn'][s]}")
        assert "action" in turns[g["tn"][s]]["code"].lower() or "click" in turns[g["tn"][s]]["code"].lower()


def chromium() -> str | None:
    for name in (os.environ.get("DUCK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


BROWSER = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
           "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1300,900"]


@pytest.mark.skipif(chromium() is None, reason="no headless Chromium here (apt-get install chromium, or "
                                                "DUCK_CHROMIUM=/path/to/chrome); CI does not install it")
def test_the_player_draws_the_board_in_headless_chromium(run, tmp_path):
    from PIL import Image
    g = next(g for g in page_data(run)["games"] if g["id"].startswith("zs01"))
    s = next(s for s in range(1, len(g["a"])) if g["nf"][s] >= 2)  # an animated move, mid-animation
    url = (run / "player.html").as_uri() + f"#game={g['id']}&step={s}&frame=1"
    dom = subprocess.run([chromium(), *BROWSER, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    step = re.search(r'<div id="step">(.*?)</div>', dom.stdout, re.S).group(1)
    assert re.sub("<[^>]+>", "", step).startswith(f"step {s} / {len(g['a']) - 1} · {g['a'][s]} · level ")
    assert f"frame 2/{g['nf'][s] + 1}" in step  # the script ran and read the address
    shot = tmp_path / "player.png"
    p = subprocess.run([chromium(), *BROWSER, f"--screenshot={shot}", url], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    if os.environ.get("DUCK_SCREENSHOT"):  # keep it to look at
        shutil.copy(shot, os.environ["DUCK_SCREENSHOT"])
    board = decode_boards(g["boards"], g["n"], g["h"], g["w"])[sum(1 + n for n in g["nf"][1:s]) + 2]  # frame 1
    rgb = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    for colour in np.unique(board):  # each colour's cells, drawn 8x8 pixels each (the page has no other)
        if colour in (0, 1, 2, 3, 4, 5):  # greys, white and black: also the page's own text and frame
            continue
        drawn = int((rgb == PALETTE[colour]).all(axis=1).sum())
        assert drawn == 64 * int((board == colour).sum()), colour


EVIL = "<!--<script>"  # issue 48: in a script element this swallowed the player's own script


def _json_block(html: str) -> str:
    """The data block as the HTML parser ends it: in a script element's text only `<` can
    change the tokenizer's state (`</script` closes it, `<!--` then `<script` escapes), so
    with no `<` inside, the element ends at the first `</script` after its tag."""
    start = html.index('<script type="application/json" id="duck-player">')
    start = html.index(">", start) + 1
    return html[start:html.index("</script", start)]


def test_model_text_cannot_break_the_player_page(tmp_path):
    """`<!--<script>` in a model's code, output, notes and reasoning and in a policy's reason:
    each page's data block holds no `<` (the parser's rules), parses whole, and the page's
    script runs in headless Chromium where one is installed (it fills the step line)."""
    from devkit.stub.models import FixedModel
    from devkit.stub.server import StubServer
    code = f"# {EVIL}\nnotes['n'] = {EVIL!r}\nprint({EVIL + '</script><script>'!r})\naction('UP')"
    reply = {"content": f"plan: {EVIL}", "reasoning": f"think {EVIL}", "code": code}
    with StubServer(FixedModel([reply] * 3)) as url:
        cfg = load_config(overrides=["model.retries=0", "model.name=stub", "agent.fallback=null", "play.policy=llm",
                                     f'model.urls=["{url}"]', "play.max_actions=3"])
        play_folder(BUNDLED, tmp_path / "model", cfg, games=["zb01"])
    (tmp_path / "says.py").write_text(USER_POLICY.replace('f"step {self.step_count}: up, then down"', repr(EVIL)))
    play_folder(BUNDLED, tmp_path / "user", policy=f"{tmp_path / 'says.py'}:Says", games=["zb01"])
    pages = []
    for name in ("model", "user"):
        write_report(tmp_path / name)
        block = _json_block((tmp_path / name / "player.html").read_text())
        assert "<" not in block
        pages.append((tmp_path / name / "player.html", json.loads(block)["games"][0]))
    turn = next(iter(pages[0][1]["turns"].values()))
    assert EVIL in turn["code"] and EVIL + "</script><script>" in turn["out"], turn
    assert EVIL in pages[1][1]["rt"]
    if chromium() is None:
        pytest.skip("no headless Chromium here: checked by the parser's rules only")
    for path, g in pages:
        url = path.as_uri() + f"#game={g['id']}&step=1"
        dom = subprocess.run([chromium(), *BROWSER, "--dump-dom", url], capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        step = re.search(r'<div id="step">(.*?)</div>', dom.stdout, re.S).group(1)
        assert re.sub("<[^>]+>", "", step).startswith("step 1 / "), (path, step)  # the player's script ran
