"""Simulators of level 1 of two public games, as a model would write them from what it sees
(the game's source was read only to know the answer is right). Each entry is the list of
code strings the model sends, in order; a string that plays actions ends a turn.

* tu93: a maze of white nodes joined by grey links; the blue piece moves from node to node
  (6 cells) along a link; the goal is the green node. No experiment needed: plan at once.
* vc33: two blue buttons move a block's yellow stripe left or right; the goal is to line the
  stripe up with the yellow mark in the bar above. One experiment per button, then the
  shift of each is read from the recorded transitions, checked, and planned with.
"""

TU93 = ['''
me = [o for o in objects() if o.color == 9][0]
goal = [o for o in objects() if o.color == 14][0]
GOAL = (goal.top, goal.left)
MOVES = {'UP': (-1, 0), 'DOWN': (1, 0), 'LEFT': (0, -1), 'RIGHT': (0, 1)}
LINK = 2  # grey links between the white nodes

def encode(f):
    p = [o for o in objects(f) if o.color == 9][0]
    return (p.top, p.left)

def step(s, a):
    dr, dc = MOVES[a]
    r, c = s
    if current_frame.grid[r + 1 + 3 * dr, c + 1 + 3 * dc] != LINK:
        return s
    return (r + 6 * dr, c + 6 * dc)

def is_goal(s):
    return s == GOAL

p = plan(step, encode(current_frame), is_goal)
print(p)
half = p['actions'][:len(p['actions']) // 2]
rest = p['actions'][len(half):]
action(half)
''', '''
c = check(step, encode, is_goal=is_goal)
print(c)
assert c['exact'] == c['compared'] == len(half), c
action(rest)
''']

VC33 = ['''
BUTTONS = sorted([o for o in objects() if o.color == 9], key=lambda o: o.top)
CLICKS = [{'action': 'MOUSE', 'row': int(o.center[0]), 'col': int(o.center[1])} for o in BUTTONS]
action(CLICKS)  # the experiment: each button once
''', '''
def encode(f):
    stripe = max((o for o in objects(f) if o.color == 11), key=lambda o: o.top)  # the block's yellow stripe
    return stripe.left

MARK = min((o for o in objects() if o.color == 11), key=lambda o: o.top)  # the yellow mark in the bar
SHIFT = {t.action: encode(t.after_frame) - encode(t.before_frame) for t in transitions}
print(SHIFT)

def step(s, a):
    return s + SHIFT[f"MOUSE(row={a['row']}, col={a['col']})"]

def is_goal(s):
    return s == MARK.left

c = check(step, encode)
print(c)
assert c['ok'], c
p = plan(step, encode(current_frame), is_goal, actions=CLICKS)
print(p)
action(p['actions'])
''']

LEVEL_1 = {"tu93": TU93, "vc33": VC33}
