"""Object-centric keyboard play: the avatar found from transitions (duck/explorer/avatar.py)
and the navigator walking it to goal-like objects (duck/explorer/nav.py).

The navigator is driven here by a small grid world written for the test (a maze of 4-pixel
cells: walls, a goal, an avatar the four keys move), so that the figures it must meet
(moves to reach the goal, blocked moves repeated) are exact.
"""

from __future__ import annotations

import numpy as np

from duck.explorer.avatar import Avatar, find_motions
from duck.explorer.nav import Navigator
from duck.explorer.push import blocked_pushes, push_step

CELL = 4
MOVES = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}


class Maze:
    """16x16 cells: floor 5, walls 3, goal 11, avatar 9 (one cell). Keys 1-4 move it."""

    def __init__(self, walls: list[tuple[int, int]], start: tuple[int, int], goal: tuple[int, int]):
        self.walls = set(walls)
        self.pos = start
        self.goal = goal
        self.won = False

    def board(self) -> np.ndarray:
        g = np.full((16, 16), 5, dtype=np.int8)
        for r, c in self.walls:
            g[r, c] = 3
        g[self.goal] = 11
        g[self.pos] = 9
        return np.kron(g, np.ones((CELL, CELL), dtype=np.int8))

    def step(self, key: int) -> None:
        dr, dc = MOVES[key]
        r, c = self.pos[0] + dr, self.pos[1] + dc
        if 0 <= r < 16 and 0 <= c < 16 and (r, c) not in self.walls:
            self.pos = (r, c)
            self.won = self.pos == self.goal


def _walk(maze: Maze, nav: Navigator, limit: int = 200) -> tuple[int, list]:
    mask = np.zeros((64, 64), dtype=bool)
    seen_blocked = []
    steps = 0
    # the first moves come from elsewhere (the explorer's graph search tries keys first)
    for key in (4, 2):
        before = maze.board()
        maze.step(key)
        nav.observe(before, maze.board(), key, None, mask)
        steps += 1
    while not maze.won and steps < limit:
        key = nav.choose(maze.board(), mask, [1, 2, 3, 4])
        assert key is not None, "the navigator gave up with the goal in sight"
        before, pos = maze.board(), maze.pos
        maze.step(key)
        if maze.pos == pos:
            seen_blocked.append((pos, key))
        nav.observe(before, maze.board(), key, "+" if maze.won else None, mask)
        steps += 1
    return steps, seen_blocked


def test_walks_to_the_goal_around_a_wall_and_never_bumps_twice():
    wall = [(r, 8) for r in range(0, 12)]  # a wall with a gap at the bottom
    maze = Maze(wall, start=(2, 2), goal=(2, 13))
    steps, blocked = _walk(maze, Navigator())
    assert maze.won
    # shortest path from (3, 3) after the two probing moves: down to row 12, across, up
    assert steps <= 2 + (12 - 3) + (13 - 3) + (12 - 2) + 6
    assert len(blocked) == len(set(blocked))  # a blocked move is a wall, not a new state


def test_what_it_learned_carries_to_the_next_level():
    nav = Navigator()
    maze = Maze([], start=(1, 1), goal=(1, 10))
    _walk(maze, nav)
    assert maze.won and nav.win_colours[11] == 1 and nav.floor[5] > 0
    nav.new_level()
    maze2 = Maze([(5, c) for c in range(3, 16)], start=(10, 1), goal=(2, 12))
    mask = np.zeros((64, 64), dtype=bool)
    steps = 0
    while not maze2.won and steps < 100:  # no probing moves needed now
        key = nav.choose(maze2.board(), mask, [1, 2, 3, 4])
        before = maze2.board()
        maze2.step(key)
        nav.observe(before, maze2.board(), key, None, mask)
        steps += 1
    assert maze2.won and steps <= (10 - 2) + (12 - 1) + 4


def test_find_motions_sees_the_avatar_and_the_tile_it_uncovered():
    # an avatar standing on a floor tile steps onto an identical tile: the tile it left
    # reappears where it stood, as if it had moved the other way
    def board(col: int) -> np.ndarray:
        g = np.full((64, 64), 5, dtype=np.int8)
        for c in (10, 20, 30):
            g[10:13, c:c + 3] = 0  # white tiles
        g[10:13, col:col + 3] = 9
        g[11, col + 2] = 4  # a pointer pixel
        return g

    ms = find_motions(board(10), board(20))
    assert {(m.dy, m.dx) for m in ms} == {(0, 10), (0, -10)}
    av = Avatar()
    m = av.pick(4, ms, located=False)  # ACTION4 = right, by the toolkit's convention
    assert (m.dy, m.dx) == (0, 10)
    av.learn(4, m)
    assert av.locate(board(30)) == (10, 30)
    assert av.delta(3) == (0, -10)  # not seen yet: the convention, with the seen step


def test_a_turned_sprite_is_still_the_avatar():
    def board(r: int, c: int, pointer: tuple[int, int]) -> np.ndarray:
        g = np.full((64, 64), 5, dtype=np.int8)
        g[r:r + 3, c:c + 3] = 9
        g[r + pointer[0], c + pointer[1]] = 4
        return g

    av = Avatar()
    av.learn(4, av.pick(4, find_motions(board(20, 20, (1, 2)), board(20, 26, (1, 2))), False))
    turned = board(26, 26, (2, 1))  # it moved down and now points down
    m = av.pick(2, find_motions(board(20, 26, (1, 2)), turned), located=True)
    assert m is not None and (m.dy, m.dx) == (6, 0)
    assert av.locate(turned) == (26, 26)


def test_push_step_plans_a_box_path_and_where_to_stand():
    deltas = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}
    walls = {(r, 4) for r in range(0, 4)}  # a wall above the pad's column, right of the box

    def free(q, box):
        return 0 <= q[0] < 8 and 0 <= q[1] < 8 and q not in walls

    step = push_step([(2, 3)], lambda q: q == (5, 5), free, deltas)
    assert step is not None
    key, behind, box = step
    # the box cannot go right at rows 0-3 (wall): it is pushed down first, from above it
    assert (key, behind, box) == (2, (1, 3), (2, 3))
    assert push_step([(5, 5)], lambda q: q == (5, 5), free, deltas) is None  # already placed
    assert push_step([(0, 0)], lambda q: q == (5, 5), free, deltas) is None  # stuck in a corner


def test_blocked_pushes_skip_a_key_that_no_longer_moves():
    # key 4 was blocked at (3, 3) and key 1 at (2, 2) in world "w"; then the avatar model lost
    # key 4's move (g50t seed 16 and sk48 seeds 6 and 13 raised KeyError here and lost the
    # rest of their games): only key 1's blocked push remains, one row up from the avatar
    edges = {("w", (3, 3), 4): None, ("w", (2, 2), 1): None, ("w", (5, 5), 1): (4, 5),
             ("v", (0, 0), 1): None}
    assert blocked_pushes(edges, "w", {1: (-1, 0), 2: (1, 0)}) == {((1, 2), 1)}
    assert blocked_pushes(edges, "w", {}) == set()


def _homing_walk(nav: Navigator, steps: int) -> list:
    """Things to walk to (a goal, a clock cell that ticks each step: the board is never
    the same twice in a row), and after every 4 moves a SPACE from the graph search
    that sends the avatar home (g50t's replay of a recorded walk did this): the navigator
    walks the same few places again and again, and the graph never sees a new state. The
    keys it chose, None when it handed the turn back."""
    maze = Maze([], start=(8, 1), goal=(8, 14))
    mask = np.zeros((64, 64), dtype=bool)

    def board(t: int) -> np.ndarray:
        g = maze.board()
        g[60:64, 0:4] = 12 + t % 3  # the clock: outside any HUD mask the test gives
        return g

    for t, key in enumerate((4, 2)):  # the first moves, from the graph search
        before = board(t)
        maze.step(key)
        nav.observe(before, board(t + 1), key, None, mask)
    chosen = []
    for t in range(2, 2 + steps):
        key = nav.choose(board(t), mask, [1, 2, 3, 4])
        chosen.append(key)
        if key is None:
            break
        before = board(t)
        maze.step(key)
        nav.observe(before, board(t + 1), key, None, mask)
        if t % 4 == 1:  # the SPACE, on the board the move left
            before = board(t + 1)
            maze.pos = (8, 1)  # home again
            nav.observe(before, board(t + 1), 5, None, mask)
    return chosen


def test_walking_in_circles_hands_the_turn_back_until_a_new_state():
    chosen = _homing_walk(Navigator(), 40)
    assert None not in chosen  # per-world visits never add up: it would walk on and on
    nav = Navigator(loop=2)
    chosen = _homing_walk(nav, 40)
    assert chosen[-1] is None and len(chosen) <= 16  # three rounds at most
    nav.progress()  # the graph search found a new state: walking is worth a try again
    maze_board = Maze([], start=(8, 1), goal=(8, 14)).board()
    assert nav.choose(maze_board, np.zeros((64, 64), dtype=bool), [1, 2, 3, 4]) is not None
