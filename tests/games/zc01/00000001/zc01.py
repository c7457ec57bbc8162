"""zc01 "Lights": click tiles until every tile shows the target colour (click game).

Rules
-----
* The frame is drawn at native 64x64 resolution (one grid cell = one pixel),
  so click coordinates are frame coordinates. The background is black (5).
* A bar across the top two rows and the bottom two rows shows the level's
  target colour.
* The board is an n x n grid of square tiles (2x2, 3x3, 4x4 for levels 1-3).
  Each tile is either the target colour or the level's "off" colour.
* ACTION6 at (x, y) on a tile toggles that tile between the two colours.
  Clicks on the background, the gaps between tiles or the bars change nothing
  (but still count as actions). No other action is offered.
* The level is complete when every tile shows the target colour; completing
  level 3 wins the game. No way to lose. RESET restarts the level.

Level 1: 2x2 tiles, 1 off  (green target, red off)      -> 1 click.
Level 2: 3x3 tiles, 3 off  (yellow target, blue off)    -> 3 clicks.
Level 3: 4x4 tiles, 5 off  (orange target, purple off)  -> 5 clicks.
"""

from arcengine import ARCBaseGame, Camera, GameAction, Level, Sprite

BACKGROUND = 5

# (tiles per side, tile size, gap, target colour, off colour, off tiles as (col, row))
LAYOUTS = [
    (2, 16, 6, 14, 8, [(1, 0)]),
    (3, 12, 5, 11, 9, [(0, 0), (2, 1), (1, 2)]),
    (4, 10, 4, 12, 15, [(1, 0), (3, 0), (0, 2), (2, 2), (3, 3)]),
]


def tile_origin(n: int, size: int, gap: int, col: int, row: int) -> tuple[int, int]:
    """Top-left pixel of tile (col, row): the board is centred in the frame."""
    span = n * size + (n - 1) * gap
    start = (64 - span) // 2
    return start + col * (size + gap), start + row * (size + gap)


def _make_level(index: int, layout: tuple) -> Level:
    n, size, gap, target, off, off_tiles = layout
    sprites = [
        Sprite([[target] * 64] * 2, name="bar_top", x=0, y=0, layer=0, tags=["bar"]),
        Sprite([[target] * 64] * 2, name="bar_bottom", x=0, y=62, layer=0, tags=["bar"]),
    ]
    for row in range(n):
        for col in range(n):
            colour = off if (col, row) in off_tiles else target
            x, y = tile_origin(n, size, gap, col, row)
            sprites.append(
                Sprite(
                    [[colour] * size for _ in range(size)],
                    name=f"tile_{col}_{row}",
                    x=x,
                    y=y,
                    layer=1,
                    tags=["tile", "sys_click"],
                )
            )
    return Level(
        sprites=sprites,
        grid_size=(64, 64),
        data={"target": target, "off": off},
        name=f"level{index + 1}",
    )


LEVELS = [_make_level(i, layout) for i, layout in enumerate(LAYOUTS)]


class Zc01(ARCBaseGame):
    def __init__(self, seed: int = 0) -> None:
        camera = Camera(background=BACKGROUND, letter_box=BACKGROUND)
        super().__init__(
            game_id="zc01",
            levels=LEVELS,
            camera=camera,
            available_actions=[6],
            seed=seed,
        )

    def step(self) -> None:
        if self.action.id == GameAction.ACTION6:
            x = self.action.data.get("x")
            y = self.action.data.get("y")
            if isinstance(x, int) and isinstance(y, int):
                cell = self.camera.display_to_grid(x, y)
                tile = None
                if cell is not None:
                    tile = self.current_level.get_sprite_at(cell[0], cell[1], tag="tile")
                if tile is not None:
                    target = self.current_level.get_data("target")
                    off = self.current_level.get_data("off")
                    new = off if int(tile.pixels[0, 0]) == target else target
                    tile.color_remap(None, new)
                    if all(int(t.pixels[0, 0]) == target for t in self.current_level.get_sprites_by_tag("tile")):
                        self.next_level()
        self.complete_action()
