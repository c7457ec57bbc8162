"""Simulators of the bundled games (tests/games), each as the code a model would send.

`GRID[game]`: a simulator on raw grids (plus an encoder where the board has a HUD), good on
every level, so `check(step, encode, level='all')` can replay a whole recorded play.
`PLAY[game]`: what a scripted model sends each turn: an abstraction of the current level read
from the board with `objects()`, checked, planned, and the plan played as one batch.
"""

GRID = {
    # Ice slide: the orange piece slides one cell (its own size) per frame until a grey wall,
    # stopping on the green goal. UNDO needs the history: no prediction (None).
    "zs01": '''
import numpy as np
MOVES = {'UP': (-1, 0), 'DOWN': (1, 0), 'LEFT': (0, -1), 'RIGHT': (0, 1)}

def piece(g, colour):
    rows, cols = np.nonzero(g == colour)
    return int(rows.min()), int(cols.min()), int(rows.max() - rows.min() + 1)

def step(g, a):
    if a not in MOVES:
        return None
    r0, c0, k = piece(g, 12)
    dr, dc = MOVES[a]
    r, c = r0, c0
    while g[r + dr * k, c + dc * k] != 2:
        r, c = r + dr * k, c + dc * k
        if g[r, c] == 14:
            break
    if (r, c) == (r0, c0):
        return g
    out = g.copy()
    out[r0:r0 + k, c0:c0 + k] = 5
    out[r:r + k, c:c + k] = 12
    return out

def is_goal(g):
    return not (g == 14).any()

encode = None
''',
    # Maze with a move budget: the blue piece walks one cell per key unless a grey wall is
    # there; the budget bar in the bottom two rows is not part of the state.
    "zb01": '''
import numpy as np
MOVES = {'UP': (-1, 0), 'DOWN': (1, 0), 'LEFT': (0, -1), 'RIGHT': (0, 1)}

def encode(f):
    return f.grid[:62]

def step(g, a):
    rows, cols = np.nonzero(g == 9)
    r0, c0, k = int(rows.min()), int(cols.min()), int(rows.max() - rows.min() + 1)
    dr, dc = MOVES[a]
    r, c = r0 + dr * k, c0 + dc * k
    if g[r, c] == 2:
        return g
    out = g.copy()
    out[r0:r0 + k, c0:c0 + k] = 5
    out[r:r + k, c:c + k] = 9
    return out

def is_goal(g):
    return not (g == 14).any()
''',
    # Lights: a click on a tile toggles it between the bars' colour and the level's other
    # tile colour; clicks elsewhere change nothing.
    "zc01": '''
import numpy as np

def tile(g, r, c):
    v = g[r, c]
    top = r
    while top > 0 and g[top - 1, c] == v:
        top -= 1
    bottom = r
    while bottom < 63 and g[bottom + 1, c] == v:
        bottom += 1
    left = c
    while left > 0 and g[r, left - 1] == v:
        left -= 1
    right = c
    while right < 63 and g[r, right + 1] == v:
        right += 1
    return top, bottom, left, right

def step(g, a):
    if not isinstance(a, dict):
        return None
    r, c = a['row'], a['col']
    on = g[0, 0]
    if r < 2 or r > 61 or g[r, c] == 5:
        return g
    off = [int(x) for x in np.unique(g[2:62]) if x not in (5, on)]
    top, bottom, left, right = tile(g, r, c)
    out = g.copy()
    out[top:bottom + 1, left:right + 1] = on if g[r, c] != on else off[0]
    return out

def is_goal(g):
    return set(np.unique(g[2:62]).tolist()) <= {5, int(g[0, 0])}

encode = None
''',
}

# What the scripted model sends at every turn: look, write the simulator of this level as an
# abstraction, check it on what was recorded, plan, play the plan. The state is small (a
# position; the set of tiles that are off), so the plans are exact and instant.
PLAY = {
    "zs01": '''
me = [o for o in objects() if o.color == 12][0]
goal = [o for o in objects() if o.color == 14][0]
K = me.height
WALL, GOAL = 2, (goal.top, goal.left)
MOVES = {'UP': (-1, 0), 'DOWN': (1, 0), 'LEFT': (0, -1), 'RIGHT': (0, 1)}

def encode(f):
    p = [o for o in objects(f) if o.color == 12][0]
    return (p.top, p.left)

def step(s, a):
    if a not in MOVES:
        return None
    r, c = s
    dr, dc = MOVES[a]
    while current_frame.grid[r + dr * K, c + dc * K] != WALL:
        r, c = r + dr * K, c + dc * K
        if (r, c) == GOAL:
            break
    return (r, c)

def is_goal(s):
    return s == GOAL

print(check(step, encode))
p = plan(step, encode(current_frame), is_goal)
print(p)
if p['found']:
    action(p['actions'])
''',
    "zb01": '''
me = [o for o in objects() if o.color == 9][0]
goal = [o for o in objects() if o.color == 14][0]
K = me.height
GOAL = (goal.top, goal.left)
MOVES = {'UP': (-1, 0), 'DOWN': (1, 0), 'LEFT': (0, -1), 'RIGHT': (0, 1)}

def encode(f):
    p = [o for o in objects(f) if o.color == 9][0]
    return (p.top, p.left)

def step(s, a):
    dr, dc = MOVES[a]
    r, c = s[0] + dr * K, s[1] + dc * K
    return s if current_frame.grid[r, c] == 2 else (r, c)

def is_goal(s):
    return s == GOAL

print(check(step, encode))
p = plan(step, encode(current_frame), is_goal)
print(p)
if p['found']:
    action(p['actions'])
''',
    "zc01": '''
ON = int(current_frame.grid[0, 0])
TILES = [o for o in objects() if o.color != 5 and o.top > 1 and o.bottom < 62]
CLICKS = [{'action': 'MOUSE', 'row': int(o.center[0]), 'col': int(o.center[1])} for o in TILES]

def encode(f):
    return frozenset(i for i, o in enumerate(TILES) if f.grid[o.top, o.left] != ON)

def step(s, a):
    i = next(i for i, o in enumerate(TILES) if o.top <= a['row'] <= o.bottom and o.left <= a['col'] <= o.right)
    return s ^ {i}

def is_goal(s):
    return not s

print(check(step, encode))
p = plan(step, encode(current_frame), is_goal, actions=CLICKS)
print(p)
if p['found']:
    action(p['actions'])
''',
}
