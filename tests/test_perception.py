"""What the model is shown of the board (issue 27): the net change of a whole call, the
precise rule for mid-animation frames that hold what the final board lost, the images (board,
diff) and what they cost in tokens on Qwen3-VL, and their bit-for-bit rebuild from the
conversation file."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from duck.game.change import Step, animation_line, informative_frames, net_change, pick_frames, transient
from duck.game.frames import PALETTE, grid_png
from duck.game.images import DIM_SHARE, DIM_TO, diff_png, png_size, render
from duck.llm.vision import board_tokens, image_tokens, smart_resize
from duck.play.conversation import DATA_PNG, ConversationWriter, read_conversation


def board(**cells: tuple[int, int, int]) -> np.ndarray:
    g = np.full((64, 64), 5, dtype=np.int8)
    for r, c, v in cells.values():
        g[r, c] = v
    return g


def sprite(g: np.ndarray, r: int, c: int, v: int = 12, size: int = 3) -> np.ndarray:
    g = g.copy()
    g[r:r + size, c:c + size] = v
    return g


def test_net_change_is_of_the_whole_call_not_its_last_action():
    """The review: a 30-action batch came out as '2 cells changed in rows 61-62' (its last,
    blocked action touching the HUD). The net change runs from before the first action to
    after the last one."""
    start = sprite(board(), 20, 10)
    steps, b = [], start
    for k in range(29):  # the piece walks right, a HUD counter at the bottom ticks each time
        a = sprite(board(), 20, 11 + k)
        a[62, k] = 8
        steps.append(Step("RIGHT", b, (a,)))
        b = a
    last = b.copy()
    last[62, 29] = 8  # the 30th action is blocked: only the HUD changes
    steps.append(Step("RIGHT", b, (last,)))
    whole = net_change(start, steps[-1].after)
    assert whole.inside > 0 and "moved: O9px (20,10)->(20,39)" in whole.text
    only_last = net_change(steps[-1].before, steps[-1].after)
    assert only_last.hud_only and "only the HUD border changed" in only_last.text
    assert net_change(start, start).text == "no cell changed"


def test_a_slide_is_not_lost_information_but_a_flash_is():
    start = sprite(board(), 30, 10)
    slide = [sprite(board(), 30, 10 + k) for k in (2, 4, 6, 8)]
    assert transient(start, slide).any()  # its in-between positions are cells of neither board...
    assert informative_frames(start, slide) == []  # ...but no frame changes more than the final one
    flash = [sprite(sprite(board(), 30, 11), 5, 40, v=11, size=6), sprite(board(), 30, 12)]
    assert informative_frames(start, flash) == [0]  # a yellow block shown mid-way, gone at the end
    hud = [sprite(sprite(board(), 30, 11), 0, 20, v=11, size=3), sprite(board(), 30, 12)]
    assert informative_frames(start, hud) == []  # a HUD bar animating in the border is not it
    assert informative_frames(start, hud[-1:]) == []  # one frame: nothing in between


def test_pick_frames_chooses_up_to_k_covering_frames_in_play_order():
    start = board()
    mids = [sprite(start, 10, 10, v=11), sprite(start, 10, 10, v=11), sprite(start, 40, 40, v=9, size=5)]
    steps = [Step("SPACE", start, (*mids, start)), Step("UP", start, (sprite(start, 20, 20, v=6, size=4), start))]
    picks = pick_frames(steps, 2)
    # the 5x5 block covers most, then another step's block; the duplicate of frame 0 adds nothing
    assert [(p.step, p.frame, p.of) for p in picks] == [(0, 2, 4), (1, 0, 2)]
    assert [(p.step, p.frame) for p in pick_frames(steps, 5)] == [(0, 0), (0, 2), (1, 0)]
    assert pick_frames(steps, 0) == []
    line = animation_line(steps)
    assert line.startswith("6 frames over 2 actions; 2 animated (longest 4 frames); seen only in between: "
                           "action 1: rows 10-44, cols 10-44, frames 1-3 of 4")
    assert animation_line([Step("UP", start, (start,))]) is None


def test_the_diff_image_keeps_changed_cells_and_dims_the_rest():
    before, after = board(), sprite(board(), 8, 8, v=11, size=2)
    after[0, 0] = 0
    png = diff_png(before, after, scale=10)
    assert png_size(png) == (640, 640)
    from PIL import Image
    import io
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    assert tuple(rgb[85, 85]) == tuple(PALETTE[11])  # a changed cell, full colour
    assert tuple(rgb[5, 5]) == tuple(PALETTE[0])  # a cell changed to white
    dim = tuple(int(v) for v in np.rint(PALETTE[5] * (1 - DIM_SHARE) + DIM_TO * DIM_SHARE))
    assert tuple(rgb[300, 300]) == dim  # black, unchanged: dimmed towards grey
    assert render("board", [after], 10) == grid_png(after, 10)
    with pytest.raises(ValueError):
        render("diff", [after], 10)


def test_image_tokens_follow_the_qwen3_vl_processor_geometry():
    assert board_tokens(10) == 402  # FIELD §3: 640 px ≈ 402 tokens
    assert board_tokens(4) == 66  # 256 px: 8x8 merged patches + 2 markers
    assert smart_resize(100, 100) == (256, 256)  # below min_pixels: scaled up
    assert smart_resize(8192, 8192) == (4096, 4096)  # above max_pixels: scaled down
    assert image_tokens(640, 320) == 20 * 10 + 2 and image_tokens(0, 10) == 0


def test_images_made_from_grids_are_stored_as_grids_and_rebuilt_bit_for_bit(tmp_path):
    before, after = board(), sprite(board(), 8, 8, v=11)
    made = [("diff", (before, after), 10), ("board", (after,), 4)]
    pngs = [render(kind, grids, scale) for kind, grids, scale in made]
    urls = [DATA_PNG + base64.b64encode(p).decode() for p in pngs]
    w = ConversationWriter(tmp_path / "c.jsonl", start={"game_id": "g"})
    for (kind, grids, scale), url in zip(made, urls):
        w.remember_image(url, kind, grids, scale)
    unknown = DATA_PNG + base64.b64encode(grid_png(before, 3)).decode()
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls + [unknown]]
    w.message({"role": "user", "content": content + [{"type": "text", "text": "t"}]})
    conv = read_conversation(w.close())
    stored = conv.messages[0]["message"]["content"]
    assert [list(p["image_url"]) for p in stored[:3]] == [["render"], ["render"], ["url"]]
    assert len(str(stored[0])) < len(urls[0]) // 4  # the grids, not the PNG
    rebuilt = conv.message(0)["content"]
    assert [p["image_url"]["url"] for p in rebuilt[:3]] == urls + [unknown]
