"""The namespace a call left, rebuilt in the next call's process without running model code
(worker side, issue 48; the format and what travels: duck.sandbox.carry).

`load(blob, ns, view)` parses the table (JSON and raw bytes: no pickle, no marshal), keeps only
what the roots reach, and builds it in four passes: empty shells of what is mutable, then what is
not, on demand (functions from code compiled again from their cell's source, classes bare:
`type(name, bases, {})` runs no hook of the model's), then the shells filled (dict keys and set
members hashed only if their hash is CPython's or numpy's), then the classes' attributes. A blob
that does not parse is refused whole, and what it built is kept alive for the process's life:
no finalizer of the model's runs before its snippet. Every index, type and size is checked.
"""

from __future__ import annotations

import collections
import functools
import gc
import json
import linecache
import random
import types
from typing import Any, Callable

import numpy as np

from duck.game.frames import Frame
from duck.sandbox.carry import (BUILTIN_BASES, CACHES, END, HEAD, MAGIC, MAX_DEPTH, MAX_NODES, PLAIN, SKIP_ATTRS,
                                base_ok, compile_cell, complete, inert, module_named, resolve, rng_state,
                                unplain)

_KEPT: list[Any] = []  # what a failed load built: never collected, so no finalizer of the model's runs


def load(data: bytes, ns: dict[str, Any], view: Callable[[list], Any]) -> str | None:
    """Rebuild the variables of `data` into `ns` (see the module docstring): None, or why none were."""
    if not data:
        return None
    gc.disable()
    loader = None
    try:
        if not complete(data):
            raise ValueError("the saved variables are incomplete")
        head_len, _ = HEAD.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + HEAD.size
        head = json.loads(data[start:start + head_len])
        loader = Loader(head, memoryview(data)[start + head_len:len(data) - len(END)], ns, view)
        values = loader.run()
        ns.update(values)
        return None
    except Exception as e:  # noqa: BLE001 - a forged or broken blob: none of it is kept
        _KEPT.append(loader.objs if loader is not None else None)
        return f"your variables could not be restored ({type(e).__name__}: {str(e)[:200]})"
    finally:
        gc.enable()


_SHELLS = {"l", "d", "s", "dq", "Counter", "OrderedDict", "defaultdict", "cell", "obj"}
_CLASS_SPECIALS = SKIP_ATTRS | {"__class__", "__bases__", "__mro__", "__name__"}


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


class Loader:
    """Rebuilds a blob's nodes in four passes: shells of what is mutable, then what is not (on
    demand), then the shells filled, then the classes' attributes (see the module docstring)."""

    def __init__(self, head: Any, data: memoryview, ns: dict[str, Any], view: Callable[[list], Any]) -> None:
        _check(type(head) is dict, "not a table")
        self.nodes, self.roots, self.cells = head.get("nodes"), head.get("roots"), head.get("cells")
        _check((type(self.nodes), type(self.roots), type(self.cells)) == (list, dict, dict), "not a table")
        _check(all(type(k) is str and type(v) is str for k, v in self.cells.items()), "bad cells")
        self.data, self.ns, self.view = data, ns, view
        self.objs: dict[int, Any] = {}
        self.building: set[int] = set()
        self.index: dict[str, dict[tuple, types.CodeType]] = {}
        self.made: list[type] = []  # the classes made here (only these may be bases, or have instances)

    def node(self, i: Any) -> list[Any]:
        _check(type(i) is int and 0 <= i < len(self.nodes), "a reference out of the table")
        n = self.nodes[i]
        _check(type(n) is list and len(n) >= 1 and type(n[0]) is str, "a malformed node")
        return n

    def children(self, n: list[Any]) -> list[Any]:
        tag, rest = n[0], n[1:]
        if tag in ("l", "t", "s", "f", "dq"):
            return list(rest[0])
        if tag in ("d", "Counter", "OrderedDict", "defaultdict"):
            return [x for pair in rest[0] for x in pair] + ([rest[1]] if tag == "defaultdict" else [])
        if tag == "view":
            return [r for _, _, r in rest[1]]
        if tag in ("meth", "sm", "cm", "prop", "pt", "cell"):
            return [x for x in rest if x is not None]
        if tag == "fn":
            return [x for x in (rest[6], rest[7], rest[9]) if x is not None] + list(rest[8] or [])
        if tag == "obj":
            items = rest[3] or []
            flat = [x for it in items for x in (it if type(it) is list else [it])]
            return [x for x in (rest[0], rest[1]) if x is not None] + [r for _, r in rest[2]] + flat
        if tag == "cls":
            return list(rest[2]) + [r for _, r in rest[5]]
        return []

    def run(self) -> dict[str, Any]:
        order, seen, stack = [], set(), [self.roots[k] for k in self.roots]
        while stack:
            i = stack.pop()
            if type(i) is not int or i in seen:
                _check(type(i) is int, "a malformed reference")
                continue
            seen.add(i)
            order.append(i)
            stack += self.children(self.node(i))
        _check(len(order) <= MAX_NODES, "too many values")
        for i in order:
            if self.nodes[i][0] in _SHELLS:
                self.objs[i] = self.shell(self.nodes[i])
        for i in order:
            self.get(i)
        for i in order:
            self.fill(i, self.nodes[i])
        for i in order:
            if self.nodes[i][0] == "cls":
                for name, ref in self.nodes[i][6]:
                    _check(type(name) is str and name not in _CLASS_SPECIALS, "a class attribute")
                    type.__setattr__(self.objs[i], name, self.get(ref))
        for where, source in self.cells.items():
            if where in self.index:
                linecache.cache[where] = (len(source), None, source.splitlines(True), where)
        return {_name(k): self.get(v) for k, v in self.roots.items()}

    def get(self, i: int) -> Any:
        if i in self.objs:
            return self.objs[i]
        _check(i not in self.building and len(self.building) < MAX_DEPTH * 4, "a cycle or chain too deep")
        self.building.add(i)
        obj = self.build(self.node(i))
        self.building.discard(i)
        self.objs[i] = obj
        return obj

    def key(self, i: int) -> Any:
        k = self.get(i)
        _check(inert(k), "a key the model's code would hash")
        return k

    def blob(self, off: Any, size: Any) -> memoryview:
        _check(type(off) is int and type(size) is int and 0 <= off and 0 <= size
               and off + size <= len(self.data), "bytes out of the blob")
        return self.data[off:off + size]

    def build(self, n: list[Any]) -> Any:
        tag, a = n[0], n[1:]
        if tag == "v":
            _check(type(a[0]) in PLAIN, "not a value")
            return a[0]
        if tag in ("L", "T", "S", "F"):
            items = [unplain(x) if type(x) is list else x for x in a[0]]
            return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "D":
            return {unplain(k) if type(k) is list else k: unplain(v) if type(v) is list else v for k, v in a[0]}
        if tag == "t":
            return tuple(self.get(r) for r in a[0])
        if tag == "f":
            return frozenset(self.key(r) for r in a[0])
        if tag in ("y", "Y"):
            return (bytes if tag == "y" else bytearray)(self.blob(a[0], a[1]))
        if tag in ("a", "g"):
            return self.array(tag, a)
        if tag in ("c", "r", "sl", "e"):
            _check(all(type(x) in PLAIN or type(x) is list for x in a), "not a value")
            return {"c": lambda: complex(float(a[0]), float(a[1])), "r": lambda: range(*a),
                    "sl": lambda: slice(*[unplain(x) for x in a]), "e": lambda: Ellipsis}[tag]()
        return self.build_other(tag, a)

    def array(self, tag: str, a: list[Any]) -> Any:
        _check(type(a[0]) is str and len(a[0]) < 40, "a dtype")
        dtype = np.dtype(a[0])
        _check(not dtype.hasobject and dtype.fields is None, "an array of objects")
        if tag == "g":
            raw = self.blob(a[1], a[2])
            _check(len(raw) == dtype.itemsize, "a scalar's size")
            return np.frombuffer(raw, dtype)[0]
        _check(type(a[1]) is list and all(type(x) is int and x >= 0 for x in a[1]), "a shape")
        raw = self.blob(a[2], a[3])
        _check(len(raw) == int(np.prod(a[1], dtype=np.int64)) * dtype.itemsize, "an array's size")
        arr = np.frombuffer(raw, dtype).reshape(a[1]).copy()
        arr.flags.writeable = a[4] is not False
        return arr

    def build_other(self, tag: str, a: list[Any]) -> Any:
        if tag == "m":
            mod = module_named(a[0])
            _check(mod is not None, "a module not here")
            return mod
        if tag == "ref":
            _check(type(a[1]) is str, "a name")
            obj = resolve(a[0], a[1])
            _check(obj is not None, "a name not here")
            return obj
        if tag == "view":
            obj = self.view(a[0])
            _check(obj is not None, "a game view not here")
            return obj
        if tag == "fn":
            return self.function(a)
        if tag == "meth":
            fn = self.get(a[0])
            _check(type(fn) is types.FunctionType, "a method of no function")
            return types.MethodType(fn, self.get(a[1]))
        if tag in ("sm", "cm"):
            return (staticmethod if tag == "sm" else classmethod)(self.get(a[0]))
        if tag == "prop":
            parts = [self.get(x) for x in a[:3]]
            _check(all(p is None or type(p) is types.FunctionType for p in parts), "a property")
            doc = self.get(a[3])
            _check(doc is None or type(doc) is str, "a docstring")
            return property(*parts, doc)
        if tag == "pt":  # its keywords are set when the shells are filled (a dict may still be empty)
            func, args = self.get(a[0]), self.get(a[1])
            _check(callable(func) and type(args) is tuple, "a partial")
            return functools.partial(func, *args)
        if tag == "cls":
            return self.cls(a)
        if tag == "rng":  # setstate checks the version, the 625 words and the gauss value
            _check(len(a) == 3 and type(a[1]) is list and type(a[2]) in (float, type(None)), "a Random")
            rng = random.Random()
            rng.setstate((a[0], tuple(a[1]), a[2]))
            return rng
        if tag == "npg":  # the bit generator's own setter checks the state
            _check(rng_state(a[0]), "a Generator's state")
            bits = getattr(np.random, a[0]["bit_generator"])()
            bits.state = a[0]
            return np.random.Generator(bits)
        raise ValueError(f"an unknown node {tag[:20]!r}")

    def function(self, a: list[Any]) -> types.FunctionType:
        where, qualname, line, h, name, fqual = a[:6]
        _check(type(where) is str and where.startswith("<cell-") and type(name) is str and type(fqual) is str,
               "a function")
        if where not in self.index:
            _check(where in self.cells, "a function whose cell is missing")
            codes: dict[tuple, types.CodeType] = {}
            stack = [compile_cell(self.cells[where], where)]
            while stack:
                c = stack.pop()
                codes.setdefault((c.co_qualname, c.co_firstlineno, hash(c)), c)
                stack += [k for k in c.co_consts if type(k) is types.CodeType]
            self.index[where] = codes
        code = self.index[where].get((qualname, line, h))
        _check(code is not None, "a function not in its cell")
        defaults = self.get(a[6])
        _check(defaults is None or type(defaults) is tuple, "defaults")
        closure = tuple(self.get(r) for r in a[8]) if a[8] is not None else None
        _check(closure is None or all(type(c) is types.CellType for c in closure), "a closure")
        f = types.FunctionType(code, self.ns, name, defaults, closure)
        f.__qualname__ = fqual
        return f

    def cls(self, a: list[Any]) -> type:
        name, qualname, bases, slots, doc = a[:5]
        bases = tuple(self.get(b) for b in bases)
        _check(type(name) is str and type(qualname) is str and (doc is None or type(doc) is str), "a class")
        _check(all(base_ok(b, b in self.made) for b in bases), "a class's bases")
        body: dict[str, Any] = {"__module__": "__main__", "__qualname__": qualname, "__doc__": doc}
        if slots is not None:
            _check(type(slots) is list and all(type(x) is str for x in slots), "slots")
            body["__slots__"] = tuple(slots)
        made = type(name, bases, body)
        self.made.append(made)
        return made

    def shell(self, n: list[Any]) -> Any:
        tag = n[0]
        if tag == "obj":
            cls = self.get(n[1])
            _check(cls in self.made and not issubclass(cls, BaseException), "an instance of no class of its")
            base = next(b for b in cls.__mro__ if b in BUILTIN_BASES)
            return base.__new__(cls)
        if tag == "dq":
            _check(n[2] is None or type(n[2]) is int and n[2] >= 0, "a maxlen")
            return collections.deque((), n[2])
        return {"l": list, "d": dict, "s": set, "Counter": collections.Counter, "cell": types.CellType,
                "OrderedDict": collections.OrderedDict, "defaultdict": collections.defaultdict}[tag]()

    def fill(self, i: int, n: list[Any]) -> None:
        obj, tag, a = self.objs[i], n[0], n[1:]
        if tag in ("l", "dq"):
            type(obj).extend(obj, [self.get(r) for r in a[0]])
        elif tag == "s":
            set.update(obj, [self.key(r) for r in a[0]])
        elif tag in ("d", "Counter", "OrderedDict", "defaultdict"):
            put = collections.OrderedDict.__setitem__ if tag == "OrderedDict" else dict.__setitem__
            for k, v in a[0]:
                put(obj, self.key(k), self.get(v))
            if tag == "defaultdict":
                factory = self.get(a[1]) if a[1] is not None else None
                _check(factory is None or callable(factory), "a default factory")
                obj.default_factory = factory
        elif tag == "view":
            for spec, name, ref in a[1]:
                frame, value = self.view(spec), self.get(ref)
                _check(isinstance(frame, Frame) and name in CACHES and type(value) is CACHES[name],
                       "a frame's cache")
                Frame.__dict__[name].__set__(frame, value)
        elif tag == "cell" and a[0] is not None:
            obj.cell_contents = self.get(a[0])
        elif tag == "fn":
            kw, attrs = self.get(a[7]), self.get(a[9])
            _check((kw is None or type(kw) is dict) and type(attrs) is dict, "a function's attributes")
            obj.__kwdefaults__ = kw
            obj.__dict__ = attrs
        elif tag == "obj":
            self.fill_instance(obj, a)
        elif tag == "pt":
            kw = self.get(a[2])
            _check(type(kw) is dict and all(type(k) is str for k in kw), "a partial's keywords")
            functools.partial.__setstate__(obj, (obj.func, obj.args, kw, None))

    def fill_instance(self, obj: Any, a: list[Any]) -> None:
        if a[1] is not None:
            state = self.get(a[1])
            _check(type(state) is dict, "an instance's attributes")
            object.__setattr__(obj, "__dict__", state)
        for name, ref in a[2]:
            desc = next((c.__dict__[name] for c in type(obj).__mro__ if type(name) is str and name in c.__dict__),
                        None)
            _check(type(desc) is types.MemberDescriptorType, "a slot")
            desc.__set__(obj, self.get(ref))
        if a[3] is not None:
            if isinstance(obj, dict):
                for k, v in a[3]:
                    dict.__setitem__(obj, self.key(k), self.get(v))
            else:
                _check(isinstance(obj, list), "items of an instance")
                list.extend(obj, [self.get(r) for r in a[3]])


def _name(k: str) -> str:
    _check(type(k) is str and k.isidentifier() and not k.startswith("__"), "a variable's name")
    return k
