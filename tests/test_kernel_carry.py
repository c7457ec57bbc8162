"""What a call leaves to the next (issue 48): each call runs in its own process, so its variables
travel as data (duck.sandbox.carry, duck.sandbox.restore). Through a real kernel: what model code
keeps between calls comes back the same (functions, closures, classes, instances, containers,
arrays, the game's views by identity); what cannot travel is named; and nothing of the model's
runs while the next call's process rebuilds them, however the blob was made (a hostile class,
a forged table: restore.load itself)."""

from __future__ import annotations

import gc
import json
import os

import numpy as np

from conftest import alive
from duck.sandbox import carry, restore

KEEP = """
import numpy as np, collections, functools, math
from collections import Counter, deque, defaultdict
from math import sqrt
grid = np.arange(12, dtype=np.int8).reshape(3, 4)
frozen = current_frame.grid
seen = {(1, 2), (3, 4)}
colours = {(1, 2): 'a', (3, 4): np.int64(7)}
by_colour = defaultdict(list); by_colour['x'].append(3)
counts = Counter('hello')
recent = deque([1, 2, 3], maxlen=3)
def helper(x, y=2, *, z=3):
    return x + y + z + len(seen)
def outer():
    k = 10
    def inner(v):
        return v + k
    return inner
inner = outer()
square = lambda v: v * v
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def norm(self):
        return sqrt(self.x ** 2 + self.y ** 2)
class Twice(Point):
    def norm(self):
        return super().norm() * 2
p = Twice(3, 4)
norm = p.norm
loop = []; loop.append(loop)
partial = functools.partial(helper, 1, z=5)
h0, seg = history[0], current_frame.segmentation
def fails():
    raise ValueError('from an earlier cell')
steps = (i for i in range(3))
import random
rng, gen = random.Random(5), np.random.default_rng(3)
drawn = rng.random(), gen.random()
"""
CHECK = """
print(helper(1), inner(1), square(3), p.norm(), norm(), type(p).__mro__[1] is Point, partial())
print(grid.sum(), frozen.flags.writeable, frozen is history[0].frame.grid, sorted(seen), colours[(3, 4)] + 1)
print(dict(by_colour), counts['l'], recent, recent.maxlen, loop[0] is loop, math.pi > 3)
print(h0 is history[0], seg is history[0].frame.segmentation, 'steps' in globals())
again = random.Random(5), np.random.default_rng(3)
print([again[0].random(), again[1].random()] == list(drawn), rng.random() == again[0].random(),
      gen.random() == again[1].random())
fails()
"""


def test_what_model_code_keeps_comes_back_the_same(make_kernel):
    k = make_kernel()
    r = k.run(KEEP)
    assert r.kind == "ok" and "steps (a generator)" in r.text and not r.restarted, r.text
    r = k.run(CHECK)
    assert r.stdout.splitlines() == [
        "8 11 9 10.0 10.0 True 10",
        "66 False True [(1, 2), (3, 4)] 8",
        "{'x': [3]} 2 deque([1, 2, 3], maxlen=3) 3 True True",
        "True True False",
        "True True True"], r.text  # the random generators go on where they were
    assert 'File "<cell-1>", line 35, in fails' in r.error and "raise ValueError('from an earlier cell')" in r.error
    alive(k)


def test_definitions_survive_a_time_out_and_go_with_a_restart(make_kernel):
    k = make_kernel(timeout=1.0)
    k.run("keep = 7")
    r = k.run("while True:\n    pass")
    assert r.kind == "timeout" and not r.restarted and k.run("print(keep)").stdout == "7\n"
    r = k.run("import os\nos._exit(3)")
    assert r.restarted and "NameError" in k.run("print(keep)").text


HOSTILE = """
import sys
def left(*_):
    action('LEFT')
    return 0
class Base:
    def __init_subclass__(cls, **kw):
        left()
class Named:
    def __set_name__(self, owner, name):
        left()
class Loud(Base):
    tag = Named()
    def __new__(cls, *a):
        left()
        return object.__new__(cls)
    def __setattr__(self, name, value):
        left()
        object.__setattr__(self, name, value)
    def __hash__(self):
        return left()
    def __eq__(self, other):
        return left() == 0
    def __getattr__(self, name):
        return left()
    def __del__(self):
        left()
x = Loud()
as_key = {1: x}
print(len(history))
"""


def test_carried_classes_run_no_model_code_in_the_next_call(make_kernel):
    """A class whose every hook plays an action: the next call's process rebuilds the class and
    its instance without calling one (no __init_subclass__, __set_name__, __new__, __setattr__,
    __hash__, __eq__, __getattr__ or __del__), so a reply that plays nothing plays nothing."""
    k = make_kernel()
    first = k.run(HOSTILE)
    played = k.session.game.actions
    second = k.run("print(type(x).__name__, Loud.tag.__class__.__name__)")
    assert second.stdout == "Loud Named\n" and second.actions == [], second.text
    assert k.session.game.actions == played, (first.text, second.text)
    alive(k)


def _blob(nodes: list, roots: dict, cells: dict | None = None, data: bytes = b"") -> bytes:
    head = json.dumps({"nodes": nodes, "roots": roots, "cells": cells or {}}).encode()
    return carry.MAGIC + carry.HEAD.pack(len(head), len(data)) + head + data + carry.END


def test_a_forged_table_runs_nothing_and_keeps_nothing(tmp_path):
    """restore.load on tables no dump makes: a cell whose top level would write a file (it is
    compiled, never run), a class with a __del__ whose load then fails (what it built is kept:
    no finalizer), a model object as a dict key, a reference out of the table, a cycle of
    tuples, an object array; each refused whole with a reason, none touching the disk."""
    marker = tmp_path / "ran"
    cell = f"open({str(marker)!r}, 'w').write('x')\ndef f():\n    return 1\n"
    code = next(c for c in carry.compile_cell(cell, "<cell-9>").co_consts if hasattr(c, "co_qualname"))
    fn = ["fn", "<cell-9>", code.co_qualname, code.co_firstlineno, hash(code), "f", "f", 1, 1, None, 2]
    ns: dict = {}
    assert restore.load(_blob([fn, ["v", None], ["D", []]], {"f": 0}, {"<cell-9>": cell}), ns, lambda s: None) is None
    assert ns["f"]() == 1 and not marker.exists()
    dele = f"def d(self):\n    open({str(marker)!r}, 'w').write('x')\n"
    dcode = next(c for c in carry.compile_cell(dele, "<cell-8>").co_consts if hasattr(c, "co_qualname"))
    dfn = ["fn", "<cell-8>", dcode.co_qualname, dcode.co_firstlineno, hash(dcode), "d", "d", 3, 3, None, 4]
    forged = {
        "__del__ then a failure": [["cls", "K", "K", [5], None, None, [["__del__", 1]]], dfn, ["obj", 0, None, [], None],
                                   ["v", None], ["D", []], ["ref", "builtins", "object"], ["l", [2, 99]]],
        "a key of the model's": [["cls", "K", "K", [3], None, None, []], ["obj", 0, None, [], None],
                                 ["d", [[1, 1]]], ["ref", "builtins", "object"]],
        "a cycle of tuples": [["t", [1]], ["t", [0]]],
        "an object array": [["a", "|O", [1], 0, 8, True]],
        "a Random of two words": [["rng", 3, [1, 2], None]],
        "a Generator over a bit generator not carried": [["npg", {"bit_generator": "MT19937", "state": {}}]],
    }
    for what, nodes in forged.items():
        root = {"__del__ then a failure": 6, "a key of the model's": 2}.get(what, 0)
        ns = {}
        why = restore.load(_blob(nodes, {"x": root}, data=bytes(8)), ns, lambda s: None)
        assert why and why.startswith("your variables could not be restored") and ns == {}, (what, why)
    gc.collect()
    assert not marker.exists()  # the class's __del__ never ran
    assert restore.load(b"DUCKNS1\nnot a table", {}, lambda s: None).startswith("your variables could not")


def test_what_cannot_travel_is_named_and_the_rest_kept(make_kernel):
    k = make_kernel()
    r = k.run("import io\nbuf = io.StringIO('x')\nok = np.zeros(3) if False else [1, 2]\nlines = iter([1])")
    assert "buf (a StringIO)" in r.text and "lines (a list_iterator)" in r.text, r.text
    assert k.run("print(ok)").stdout == "[1, 2]\n"
    assert os.path.exists(k.workdir)


def test_a_large_array_travels_and_a_larger_namespace_is_cut_by_name(make_kernel):
    k = make_kernel(memory_mb=2048)
    r = k.run("import numpy as np\nbig = np.ones((4100, 4096))\nsmall = 1")  # 134 MB: past the cap
    assert "big (the variables take more than 128 MB)" in r.text and not r.restarted, r.text
    assert k.run("print(small, 'big' in globals())").stdout == "1 False\n"
    r = k.run("import numpy as np\nmid = np.arange(10**6)")
    assert k.run("print(int(mid.sum()))").stdout == f"{sum(range(10**6))}\n"
    assert np.arange(3).sum() == 3


def test_what_a_call_was_told_reaches_the_next_one_without_an_action(make_kernel):
    """The worker outlives each call's process: a result that added no board (a refused action)
    reaches it too, before the next call (the Duck's bp35 replay printed a stale one)."""
    k = make_kernel()
    k.run("action('UP')")
    k.run("r = action({'action': 'MOUSE', 'row': 1, 'col': 1})\nprint(r['executed'])")
    r = k.run("print(last_action_result['executed'], last_action_result.get('error', '')[:40])")
    assert r.stdout.startswith("False "), r.text


def test_strings_count_toward_the_cap_too(make_kernel):
    """A namespace of text past the cap (the JSON of its table, not only its raw bytes) loses its
    last variables, named, and keeps the rest (the worker would refuse the whole blob)."""
    k = make_kernel(memory_mb=2048)
    r = k.run("a = 1\nwords = ['x' * 1000] * 1000\nz = 'y' * (130 << 20)")
    assert "z (the variables take more than 128 MB)" in r.text and not r.restarted, r.text
    assert k.run("print(a, len(words), 'z' in globals())").stdout == "1 1000 False\n"
