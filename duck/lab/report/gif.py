"""A game you can share: `duck gif RUN [GAME ...]` writes `RUN/gif/<game>.gif`, an animated GIF
of the game from its record (the first board, then per action its animation frames and its
final board, the step, the action and the level in a caption), in the ARC palette.

Small enough to post: 16 colours, Pillow stores each frame as its change from the one before,
and a long game is thinned to at most `max_frames` frames (the level-ups, game overs and the
last board always kept, the other steps evenly; their animations only when everything fits).
`duck report` links each game's GIF from the player (player.html) when it exists.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np

from duck.game.actions import Action
from duck.game.frames import PALETTE
from duck.play.record import Record, read_record, unpack_grid

CAPTION_PX = 14  # the caption strip under the board
STEP_MS, ANIM_MS, HOLD_MS, LAST_MS = 120, 50, 700, 2500  # a step, an animation frame, a level-up, the end
FOLDER = "gif"  # RUN/gif/<game>.gif (the player's link)


class Step(NamedTuple):
    action: str  # "start" for the first board
    levels: int  # completed after it
    state: str
    anim: list[np.ndarray]  # its animation frames before the final board
    board: np.ndarray


def steps(rec: Record) -> Iterator[Step]:
    """The first board, then one Step per action. Boards of another shape than the first (none in
    the ARC games) are skipped."""
    grid = unpack_grid(rec.header["grid"])
    yield Step("start", int(rec.header.get("levels") or 0), str(rec.header.get("state") or ""), [], grid)
    for a in rec.actions:
        anim = [f for f in unpack_grid(a["anim"]) if f.shape == grid.shape] if a.get("anim") else []
        if "grid" in a and (g := unpack_grid(a["grid"])).shape == grid.shape:
            grid = g
        try:
            name = str(Action.from_json(a["action"]))
        except (ValueError, TypeError):
            name = str(a["action"])
        yield Step(name, int(a["levels"]), str(a.get("state") or ""), anim, grid)


def _kept(marks: list[int], n: int, budget: int) -> set[int]:
    """The steps kept of `n + 1`: every mark, then evenly spaced others up to `budget`."""
    if n + 1 <= budget:
        return set(range(n + 1))
    kept = set(marks) | {0, n}
    room = max(0, budget - len(kept))
    return kept | {round(i * n / room) for i in range(room)} if room else kept


def _frame(board: np.ndarray, caption: str, scale: int, font: Any) -> Any:
    from PIL import Image, ImageDraw
    cells = (np.asarray(board, dtype=np.uint8) & 15).repeat(scale, axis=0).repeat(scale, axis=1)
    h, w = cells.shape
    img = Image.new("P", (w, h + CAPTION_PX), 5)  # palette index 5: black
    img.putpalette(PALETTE.ravel().tolist())
    img.paste(Image.fromarray(cells, "P"), (0, 0))
    ImageDraw.Draw(img).text((3, h + 1), caption, fill=0, font=font)  # index 0: white
    return img


def write_gif(rec: Record, path: str | Path, *, scale: int = 5, max_frames: int = 600) -> dict[str, Any]:
    """The GIF of one record at `path`; returns what it holds (frames, steps, bytes, size)."""
    from PIL import ImageFont
    if "grid" not in rec.header:
        raise ValueError(f"{rec.game_id}: the record holds no board")
    every = list(steps(rec))
    n, total = len(every) - 1, int(rec.header.get("win_levels") or 0)
    over = [x.state == "GAME_OVER" for x in every]
    marks = [s for s in range(1, n + 1) if every[s].levels != every[s - 1].levels or over[s] != over[s - 1]]
    kept = _kept(marks, n, max_frames)
    with_anim = len(kept) + sum(len(every[s].anim) for s in kept) <= max_frames
    font = ImageFont.load_default()
    frames, ms = [], []
    for s in sorted(kept):
        x = every[s]
        level = f"level {min(x.levels + 1, total)}/{total}" if total else f"level {x.levels + 1}"
        end = {"WIN": " · WIN", "GAME_OVER": " · GAME OVER"}.get(x.state, "")
        caption = f"{rec.game_id[:4]} · step {s}/{n} · {x.action} · {level}{end}"
        for f in x.anim if with_anim else []:
            frames.append(_frame(f, caption, scale, font))
            ms.append(ANIM_MS)
        frames.append(_frame(x.board, caption, scale, font))
        ms.append(LAST_MS if s == n else HOLD_MS if s in marks else STEP_MS)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=ms, loop=0, optimize=False)
    return {"game": rec.game_id, "gif": str(path), "frames": len(frames), "steps": len(kept),
            "of_steps": n + 1, "bytes": path.stat().st_size, "size": list(frames[0].size)}


def record_of(run: Path, game: str) -> Record:
    """The record of `game` (an id or its 4-letter prefix) in `run`; a clear one line otherwise."""
    paths = sorted((run / "records").glob("*.jsonl"))
    names = [p.stem for p in paths]
    hit = [p for p in paths if p.stem == game or p.stem.split("-")[0] == game]
    if len(hit) != 1:
        from difflib import get_close_matches
        near = get_close_matches(game, names + sorted({x.split("-")[0] for x in names}), n=3)
        raise SystemExit(f"{run}: no record of {game} among {len(names)}"
                         + (f" (did you mean {', '.join(near)}?)" if near else f": {', '.join(names[:5])}"))
    return read_record(hit[0])


def _cmd(args: argparse.Namespace) -> int:
    run = Path(args.run)
    if not (run / "records").is_dir():
        raise SystemExit(f"{run} has no records/ folder")
    games = args.game or [p.stem for p in sorted((run / "records").glob("*.jsonl"))]
    if args.out and len(games) != 1:
        raise SystemExit("--out names one file: give one GAME with it")
    for game in games:
        rec = record_of(run, game)
        try:
            doc = write_gif(rec, args.out or run / FOLDER / f"{rec.game_id}.gif", scale=args.scale,
                            max_frames=args.max_frames)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        print(json.dumps(doc))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("gif", help="an animated GIF of a game from its record, to share (RUN/gif/<game>.gif)")
    p.add_argument("run", metavar="RUN", help="a run folder (records/ inside)")
    p.add_argument("game", nargs="*", metavar="GAME",
                   help="game ids or 4-letter prefixes (default: every game)")
    p.add_argument("--out", default=None, help="the GIF's file (one GAME; default RUN/gif/<game>.gif)")
    p.add_argument("--scale", type=int, default=5, help="pixels per cell (5: a 320-pixel board)")
    p.add_argument("--max-frames", type=int, default=600,
                   help="at most this many frames: a longer game keeps its level-ups and evenly spaced steps")
    p.set_defaults(func=_cmd)
