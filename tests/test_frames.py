"""duck.game.frames: the Duck-exact segmentation, the letters, Frame, animation summaries, the PNG.

`_reference` below is a deliberately slow, literal implementation of the algorithm as the
traces README states it (flood fill per region for containment, a set of cells for the
contour); the fast implementation must agree with it on every board."""

from __future__ import annotations

import hashlib
import io
import time

import numpy as np

from duck.game.animation import summarize_animation
from duck.game.frames import LETTERS, PALETTE, Frame, grid_png, to_ascii

CW = ((-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1))


def _reference(grid: np.ndarray) -> dict:
    g = np.asarray(grid).tolist()
    h, w = len(g), len(g[0])
    comp = [[-1] * w for _ in range(h)]
    regions = []
    for r in range(h):
        for c in range(w):
            if comp[r][c] >= 0:
                continue
            k, cells, stack = len(regions), set(), [(r, c)]
            comp[r][c] = k
            while stack:
                y, x = stack.pop()
                cells.add((y, x))
                for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < h and 0 <= nx < w and comp[ny][nx] < 0 and g[ny][nx] == g[r][c]:
                        comp[ny][nx] = k
                        stack.append((ny, nx))
            regions.append((g[r][c], cells, (r, c)))
    n = len(regions)
    adj = sorted({(min(comp[r][c], comp[r2][c2]), max(comp[r][c], comp[r2][c2]))
                  for r in range(h) for c in range(w) for r2, c2 in ((r + 1, c), (r, c + 1))
                  if r2 < h and c2 < w and comp[r][c] != comp[r2][c2]})
    enclosers = [set() for _ in range(n)]
    for b in range(n):
        seen = {(r, c) for r in range(h) for c in range(w)
                if (r in (0, h - 1) or c in (0, w - 1)) and comp[r][c] != b}
        stack = list(seen)
        while stack:
            y, x = stack.pop()
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < h and 0 <= nx < w and (ny, nx) not in seen and comp[ny][nx] != b:
                    seen.add((ny, nx))
                    stack.append((ny, nx))
        for a in range(n):
            if a != b and regions[a][2] not in seen:
                enclosers[a].add(b)
    children = [[] for _ in range(n)]
    for a in range(n):
        if enclosers[a]:
            children[max(enclosers[a], key=lambda e: (len(enclosers[e]), -e))].append(a)
    nodes = []
    for k, (v, cells, start) in enumerate(regions):
        contour = [start]
        if len(cells) > 1:
            b, back, second = start, (start[0], start[1] - 1), None
            for _ in range(8 * len(cells) + 16):
                i0 = CW.index((back[0] - b[0], back[1] - b[1]))
                nxt = None
                for s in range(1, 9):
                    off = CW[(i0 + s) % 8]
                    cand = (b[0] + off[0], b[1] + off[1])
                    if cand in cells:
                        nxt, prev_off = cand, CW[(i0 + s - 1) % 8]
                        break
                if nxt is None:
                    break
                if second is None:
                    second = nxt
                elif b == start and nxt == second:
                    break
                contour.append(nxt)
                back, b = (b[0] + prev_off[0], b[1] + prev_off[1]), nxt
            if len(contour) > 1 and contour[-1] == contour[0]:
                contour.pop()
        if len(contour) > 2:
            m = len(contour)
            contour = [contour[i] for i in range(m)
                       if (contour[i][0] - contour[i - 1][0], contour[i][1] - contour[i - 1][1])
                       != (contour[(i + 1) % m][0] - contour[i][0], contour[(i + 1) % m][1] - contour[i][1])]
        r0, c0 = min(r for r, _ in cells), min(c for _, c in cells)
        letter = LETTERS[v]
        digest = hashlib.sha1(repr((letter, sorted((r - r0, c - c0) for r, c in cells))).encode()).hexdigest()[:16]
        nodes.append({"id": k, "color": letter, "hash": digest, "pixels": len(cells),
                      "boundary": [list(p) for p in contour], "children": sorted(children[k])})
    return {"nodes": nodes, "adjacency_list": [list(p) for p in adj]}


def _boards(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        h, w = rng.integers(3, 16, size=2)
        k = rng.integers(2, 4)
        s = int(rng.integers(1, 4))
        small = rng.integers(0, k, size=(h // s + 1, w // s + 1))
        g = np.kron(small, np.ones((s, s), dtype=int))[:h, :w]
        noise = rng.random((h, w)) < 0.15
        g[noise] = rng.integers(0, 16, size=int(noise.sum()))
        out.append(g.astype(np.int8))
    return out


def test_ascii_letters_and_layout():
    grid = np.arange(16, dtype=np.int8).reshape(2, 8)
    assert to_ascii(grid) == "WwgGcBMP\nRbSYOrNp"
    f = Frame(np.zeros((64, 64), np.int8), step=3, level=2)
    assert f.ascii.count("\n") == 63 and len(f.ascii) == 64 * 65 - 1 and set(f.ascii) == {"W", "\n"}


def test_frame_view_surface():
    f = Frame(np.full((64, 64), 5, np.int8), step=7, level=2)
    assert str(f) == repr(f) == "AsciiFrameView(level=2, step=7, shape=64x64)"
    assert f.shape == (64, 64) and f.step == 7 and f.level == 2
    assert f.grid.dtype == np.int8 and not f.grid.flags.writeable
    assert f.segmentation is f.segmentation  # cached per frame


def test_small_shapes_exact():
    g = np.zeros((6, 7), np.int8)
    g[1, 1:6] = 8  # a straight line: its two ends
    g[3, 3] = 9  # a single cell
    seg = Frame(g).segmentation
    line = seg["nodes"][1]
    assert list(line) == ["id", "color", "hash", "pixels", "boundary", "children"]
    assert line["color"] == "R" and line["pixels"] == 5 and line["boundary"] == [[1, 1], [1, 5]]
    dot = next(n for n in seg["nodes"] if n["color"] == "b")
    assert dot["boundary"] == [[3, 3]] and dot["pixels"] == 1
    expected = hashlib.sha1(repr(("R", [(0, i) for i in range(5)])).encode()).hexdigest()[:16]
    assert line["hash"] == expected
    assert seg["adjacency_list"] == [[0, 1], [0, 2]]


def test_rectangle_corners_clockwise_and_nesting():
    g = np.zeros((9, 9), np.int8)
    g[1:8, 1:8] = 2  # ring
    g[2:7, 2:7] = 0  # hole (a separate white region)
    g[4, 4] = 3  # dot inside the hole
    seg = Frame(g).segmentation
    ring = seg["nodes"][1]
    assert ring["boundary"] == [[1, 1], [1, 7], [7, 7], [7, 1]]
    hole, dot = seg["nodes"][2], seg["nodes"][3]
    assert ring["children"] == [hole["id"]] and hole["children"] == [dot["id"]]
    assert seg["nodes"][0]["children"] == [1]  # the ring cannot reach the edge outside it


def test_matches_the_literal_algorithm_on_random_boards():
    for g in _boards(1, 40):
        assert Frame(g).segmentation == _reference(g)


def test_busy_board_is_fast():
    rng = np.random.default_rng(5)
    g = np.kron(rng.integers(0, 6, size=(16, 16)), np.ones((4, 4), dtype=int)).astype(np.int8)
    Frame(g).segmentation
    t = time.process_time()  # CPU time: a machine busy with other work does not slow it
    for _ in range(5):
        seg = Frame(g).segmentation
    per = (time.process_time() - t) / 5
    assert len(seg["nodes"]) > 100
    assert per < 0.05, f"segmentation took {per * 1000:.1f} ms"


def test_animation_summary_moves_appears_and_mid_frames():
    before = np.zeros((64, 64), np.int8)
    before[10:12, 10:12] = 9  # a 2x2 blue sprite
    before[40, 40] = 8  # a red dot that will vanish
    after = np.zeros((64, 64), np.int8)
    after[10:12, 14:16] = 9
    after[50, 5] = 11  # a yellow dot appears
    mid = after.copy()
    mid[30:33, 30:33] = 12  # an orange flash only mid-way
    text = summarize_animation(before, [mid, mid, after])
    assert text.startswith("3 frames")
    assert "moved: b4px (10,10)->(10,14)" in text
    assert "appeared: Y1px at (50,5)" in text and "vanished: R1px at (40,40)" in text
    assert "seen only mid-animation: O in rows 30-32, cols 30-32 (frames 1-2 of 3)" in text
    assert len(summarize_animation(before, [after], limit=60)) <= 60
    assert "board unchanged" in summarize_animation(before, [before])


def test_summary_reuses_frame_regions():
    a, b = Frame(np.zeros((64, 64), np.int8)), Frame(np.ones((64, 64), np.int8))
    assert "board replaced" in summarize_animation(a, [b])
    small = np.zeros((64, 64), np.int8)
    small[0, 0] = 3
    fb = Frame(small)
    summarize_animation(a, [fb])
    assert fb._labels is not None  # cached: the next action's summary starts from it


def test_the_palette_is_the_toolkits():
    from arc_agi.rendering import COLOR_MAP
    assert [f"#{r:02X}{g:02X}{b:02X}FF" for r, g, b in PALETTE.tolist()] == [COLOR_MAP[i] for i in range(16)]


def test_grid_png_is_an_upscaled_palette_image():
    from PIL import Image
    grid = np.full((64, 64), 8, dtype=np.int8)
    grid[0, 0] = 9
    for scale in (2, 4):
        img = Image.open(io.BytesIO(grid_png(grid, scale)))
        assert img.size == (64 * scale, 64 * scale)
        assert img.getpixel((scale - 1, scale - 1)) == (0x1E, 0x93, 0xFF)  # 9 = blue
        assert img.getpixel((scale, scale)) == (0xF9, 0x3C, 0x31)  # 8 = red
