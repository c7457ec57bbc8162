"""zs01 "Slide": an ice-sliding maze (keyboard, animated moves, undo).

Rules
-----
* The board is a square grid of cells (8x8, 10x10, 12x12 for levels 1-3),
  scaled up to fill the 64x64 frame. Walls are grey (2), the floor is black (5),
  the letterbox around a board that does not fill 64x64 is dark grey (4).
* The player is an orange cell (12), the goal a green cell (14).
* ACTION1/2/3/4 = up/down/left/right. The player slides in that direction,
  one cell per frame, until the next cell is a wall. A move therefore returns
  one frame per cell travelled (a single unchanged frame when blocked at once).
* Sliding onto the goal stops the player there and completes the level; the
  transition frame to the next level closes the animation. Completing level 3
  wins the game.
* ACTION7 = undo: puts the player back where the last (non-blocked) move
  started. Undo with nothing to undo changes nothing. Every action, undo
  included, counts as an action.
* No move budget, no way to lose. RESET restarts the level (or the game when
  the level has had no action yet), as the engine does by default.

Shortest solutions: 4, 6 and 8 moves (tests/games/zs01/00000001/solution.json).
"""

from arcengine import ARCBaseGame, Camera, GameAction, Level, Sprite

WALL = 2
FLOOR = 5
LETTERBOX = 4
PLAYER = 12
GOAL = 14

MAPS = [
    [
        "########",
        "#.G.#..#",
        "#.....##",
        "#....#P#",
        "#.#..#.#",
        "#...#..#",
        "#......#",
        "########",
    ],
    [
        "##########",
        "#..#.P..##",
        "#...###..#",
        "#........#",
        "#......#.#",
        "#........#",
        "#.....##.#",
        "#...#G...#",
        "#.....#..#",
        "##########",
    ],
    [
        "############",
        "#....#.G...#",
        "#P....##...#",
        "#....#.....#",
        "#.......#..#",
        "#.....#.#.##",
        "##.....#.#.#",
        "#......#...#",
        "#..........#",
        "##......#..#",
        "#.....##...#",
        "############",
    ],
]

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


def _make_level(index: int, rows: list[str]) -> Level:
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
        data={"walls": [list(r) for r in rows]},
        name=f"level{index + 1}",
    )


LEVELS = [_make_level(i, rows) for i, rows in enumerate(MAPS)]


class Zs01(ARCBaseGame):
    def __init__(self, seed: int = 0) -> None:
        self._dir: tuple[int, int] | None = None
        self._history: list[tuple[int, int]] = []
        camera = Camera(background=FLOOR, letter_box=LETTERBOX)
        super().__init__(
            game_id="zs01",
            levels=LEVELS,
            camera=camera,
            available_actions=[1, 2, 3, 4, 7],
            seed=seed,
        )

    def on_set_level(self, level: Level) -> None:
        self._dir = None
        self._history = []

    def _player(self) -> Sprite:
        return self.current_level.get_sprites_by_name("player")[0]

    def _blocked(self, x: int, y: int) -> bool:
        grid = self.current_level.get_data("walls")
        return grid[y][x] == "#"

    def step(self) -> None:
        player = self._player()
        if self._dir is None:
            if self.action.id == GameAction.ACTION7:
                if self._history:
                    x, y = self._history.pop()
                    player.set_position(x, y)
                self.complete_action()
                return
            if self.action.id not in DIRS:
                self.complete_action()
                return
            dx, dy = DIRS[self.action.id]
            if self._blocked(player.x + dx, player.y + dy):
                self.complete_action()  # one unchanged frame
                return
            self._history.append((player.x, player.y))
            self._dir = (dx, dy)
        # one cell per frame
        dx, dy = self._dir
        player.set_position(player.x + dx, player.y + dy)
        goal = self.current_level.get_sprites_by_name("goal")[0]
        if (player.x, player.y) == (goal.x, goal.y):
            self._dir = None
            self.next_level()
            self.complete_action()
            return
        if self._blocked(player.x + dx, player.y + dy):
            self._dir = None
            self.complete_action()
