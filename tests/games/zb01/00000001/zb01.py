"""zb01 "Budget": walk through a maze to the goal before the move budget runs out.

Rules
-----
* The board is a square grid (10x10 then 12x12) scaled up by 6 or 5 to 60x60
  and centred, leaving a 2-pixel letterbox (dark grey, 4) on every side.
  Walls are grey (2), the floor black (5), the player blue (9), the goal green (14).
* ACTION1/2/3/4 = up/down/left/right: the player walks one cell (one frame);
  walking into a wall leaves it in place.
* The level has a move budget, shown as a yellow (11) bar in the bottom two
  rows of the frame (the letterbox) whose width is 64 * remaining / budget
  pixels. Every action, including a bump into a wall, uses one unit.
* Reaching the goal completes the level (even with the last unit); completing
  level 2 wins the game. If the budget reaches 0 before that, the game is
  GAME_OVER; a RESET then restarts the current level with a full budget and
  keeps the levels already completed.

Level 1: shortest path 13 moves, budget 18.
Level 2: shortest path 15 moves, budget 22.
"""

import numpy as np

from arcengine import ARCBaseGame, Camera, GameAction, Level, RenderableUserDisplay, Sprite

WALL = 2
FLOOR = 5
LETTERBOX = 4
PLAYER = 9
GOAL = 14
BAR = 11

MAPS = [
    [
        "##########",
        "##########",
        "##P..#####",
        "####.#...#",
        "##...#.#.#",
        "##.#...#G#",
        "##.#####.#",
        "##.......#",
        "##########",
        "##########",
    ],
    [
        "############",
        "############",
        "#P....#...##",
        "#.###.#.#.##",
        "#...#...#..#",
        "###.#####.##",
        "#.....#.#..#",
        "#.###...#.##",
        "#...#.#...G#",
        "############",
        "############",
        "############",
    ],
]
BUDGETS = [18, 22]

DIRS = {
    GameAction.ACTION1: (0, -1),
    GameAction.ACTION2: (0, 1),
    GameAction.ACTION3: (-1, 0),
    GameAction.ACTION4: (1, 0),
}


def _find(rows: list[str], ch: str) -> tuple[int, int]:
    for y, row in enumerate(rows):
        x = row.find(ch)
        if x >= 0:
            return x, y
    raise ValueError(f"no {ch!r} in map")


def _make_level(index: int, rows: list[str], budget: int) -> Level:
    size = len(rows)
    wall_pixels = [[WALL if ch == "#" else -1 for ch in row] for row in rows]
    px, py = _find(rows, "P")
    gx, gy = _find(rows, "G")
    sprites = [
        Sprite(wall_pixels, name="walls", x=0, y=0, layer=0, tags=["wall"]),
        Sprite([[GOAL]], name="goal", x=gx, y=gy, layer=1, tags=["goal"]),
        Sprite([[PLAYER]], name="player", x=px, y=py, layer=2, tags=["player"]),
    ]
    return Level(
        sprites=sprites,
        grid_size=(size, size),
        data={"walls": [list(r) for r in rows], "budget": budget},
        name=f"level{index + 1}",
    )


LEVELS = [_make_level(i, rows, b) for i, (rows, b) in enumerate(zip(MAPS, BUDGETS))]


class BudgetBar(RenderableUserDisplay):
    """Draws the remaining budget in the bottom two rows of the 64x64 frame."""

    def __init__(self) -> None:
        self.budget = 1
        self.remaining = 1

    def render_interface(self, frame: np.ndarray) -> np.ndarray:
        width = (64 * self.remaining) // self.budget if self.budget > 0 else 0
        frame[62:64, :] = LETTERBOX
        frame[62:64, :width] = BAR
        return frame


class Zb01(ARCBaseGame):
    def __init__(self, seed: int = 0) -> None:
        self._bar = BudgetBar()
        camera = Camera(background=FLOOR, letter_box=LETTERBOX, interfaces=[self._bar])
        super().__init__(
            game_id="zb01",
            levels=LEVELS,
            camera=camera,
            available_actions=[1, 2, 3, 4],
            seed=seed,
        )

    def on_set_level(self, level: Level) -> None:
        budget = level.get_data("budget")
        self._bar.budget = budget
        self._bar.remaining = budget

    def step(self) -> None:
        if self.action.id not in DIRS:
            self.complete_action()
            return
        player = self.current_level.get_sprites_by_name("player")[0]
        dx, dy = DIRS[self.action.id]
        grid = self.current_level.get_data("walls")
        if grid[player.y + dy][player.x + dx] != "#":
            player.set_position(player.x + dx, player.y + dy)
        self._bar.remaining -= 1
        goal = self.current_level.get_sprites_by_name("goal")[0]
        if (player.x, player.y) == (goal.x, goal.y):
            self.next_level()
        elif self._bar.remaining <= 0:
            self.lose()
        self.complete_action()
