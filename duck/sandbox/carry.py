"""The model's namespace carried from one call's process to the next (worker side, issue 48).

Each call runs in a fresh process forked from a worker that never runs model code
(duck.sandbox.worker), so nothing a snippet leaves (a patched function of ours, a signal
handler, an audit hook, a half-run snippet) can act in the next call. What carries over is its
variables: `dump` writes them as data (a table of nodes, no pickle), `load` rebuilds them in the
next call's process without running any model code: functions are compiled again from their
cell's source (never bytecode from the old process), classes are made bare and their attributes
set after every instance is filled (no __init_subclass__, __set_name__, __new__ or __setattr__
of the model's runs), dict keys and set members are values whose hash is not the model's, and
game views travel by their place in the history. What cannot travel (a generator, an open
file, a dataclass) is named in the `done` message and left out; a blob that does not parse is
refused whole (the namespace starts empty, game variables and notes restored). Node formats:
docs/sandbox.md, "What carries between calls".
"""

from __future__ import annotations

import __future__
import collections
import functools
import gc
import importlib
import json
import linecache
import struct
import types
from typing import Any, Callable

import numpy as np

from duck.game.frames import Frame
from duck.sandbox.guard import REFUSED_MODULES

MAGIC, END = b"DUCKNS1\n", b"\nEND"
_HEAD = struct.Struct("<QQ")
MAX_NODES = 2_000_000
MAX_DEPTH = 200
_PLAIN = (type(None), bool, int, float, str)
_KEPT: list[Any] = []  # what a failed load built: never collected, so no finalizer of the model's runs
_BUILTIN_BASES = (object, list, dict)
_CACHES = {"_ascii": str, "_seg": dict, "_labels": np.ndarray}  # what a game frame computes once
_SKIP_ATTRS = {"__dict__", "__weakref__", "__module__", "__qualname__", "__slots__", "__doc__"}


class Unsupported(Exception):
    """A value that cannot travel (its name is left out)."""


def compile_cell(source: str, filename: str) -> types.CodeType:
    """A snippet as the call compiles it (`load` compiles a cell again the same way: the same
    code objects); annotations postponed, as they always were."""
    return compile(source, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)


def _plain(v: Any, depth: int = 0) -> Any:
    """`v` as an inline JSON value (a tuple as an array), or raise Unsupported."""
    t = type(v)
    if t in _PLAIN:
        if t is int and v.bit_length() > 10_000:
            raise Unsupported("an int of more than 3,000 digits")
        return v
    if t is tuple and depth < 4:
        return [_plain(x, depth + 1) for x in v]
    raise Unsupported


def _unplain(v: Any) -> Any:
    return tuple(_unplain(x) for x in v) if type(v) is list else v


class Dumper:
    """Nodes for the values of one namespace; `add(name, value)` is all or nothing per name."""

    def __init__(self, views: Callable[[], dict[int, list]], limit: int) -> None:
        self.nodes: list[list[Any]] = []
        self.data = bytearray()
        self.memo: dict[int, int] = {}
        self.held: list[Any] = []  # what the memo points at (ids stay unique)
        self.cells: dict[str, str] = {}
        self.roots: dict[str, int] = {}
        self.views, self.view_ids, self.limit = views, None, limit

    def add(self, name: str, value: Any) -> str | None:
        """Add one variable; None, or why it cannot travel (then nothing of it is kept)."""
        n, d, h, cells = len(self.nodes), len(self.data), len(self.held), set(self.cells)
        try:
            self.roots[name] = self.ref(value, 0)
            if len(self.data) > self.limit or len(self.nodes) > MAX_NODES:
                raise Unsupported(f"the variables take more than {self.limit >> 20} MB")
            return None
        except Exception as e:  # noqa: BLE001 - the model's objects may raise anything: that name stays out
            for obj in self.held[h:]:
                self.memo.pop(id(obj), None)
            del self.nodes[n:], self.data[d:], self.held[h:]
            for k in set(self.cells) - cells:
                del self.cells[k]
            self.roots.pop(name, None)
            return str(e) if type(e) is Unsupported and str(e) else f"a {type(value).__name__}"

    def blob(self) -> bytes:
        head = json.dumps({"nodes": self.nodes, "roots": self.roots, "cells": self.cells},
                          separators=(",", ":")).encode("utf-8", "surrogatepass")
        return MAGIC + _HEAD.pack(len(head), len(self.data)) + head + bytes(self.data) + END

    def _bytes(self, b: bytes) -> list[int]:
        self.data += b
        return [len(self.data) - len(b), len(b)]

    def ref(self, v: Any, depth: int) -> int:
        if id(v) in self.memo:
            return self.memo[id(v)]
        if depth > MAX_DEPTH:
            raise Unsupported("nested too deep")
        i = len(self.nodes)
        self.memo[id(v)] = i
        self.held.append(v)
        self.nodes.append([])
        self.nodes[i] = self.node(v, depth + 1)
        return i

    def _refs(self, items: Any, depth: int) -> list[int]:
        return [self.ref(x, depth) for x in items]

    def node(self, v: Any, d: int) -> list[Any]:
        t = type(v)
        if t in _PLAIN:
            return ["v", _plain(v)]
        if t in (list, tuple, set, frozenset):
            tag = {list: "l", tuple: "t", set: "s", frozenset: "f"}[t]
            try:
                return [tag.upper(), [_plain(x) for x in v]]
            except Unsupported:
                if tag in "sf":
                    self._keys(v)
                return [tag, self._refs(v, d)]
        if t is dict:
            try:
                return ["D", [[_plain(k), _plain(x)] for k, x in v.items()]]
            except Unsupported:
                self._keys(v)
                return ["d", [[self.ref(k, d), self.ref(x, d)] for k, x in v.items()]]
        return self.other(v, t, d)

    def _keys(self, keys: Any) -> None:
        """Dict keys and set members must hash without the model's code (see the docstring)."""
        for k in keys:
            if not _inert(k):
                raise Unsupported(f"a dict or set holding a {type(k).__name__} (only values, tuples, "
                                  "functions and classes can be keys)")

    def other(self, v: Any, t: type, d: int) -> list[Any]:
        if t is complex:
            return ["c", v.real, v.imag]
        if t in (bytes, bytearray):
            return ["y" if t is bytes else "Y", *self._bytes(bytes(v))]
        if t in (range, slice):
            return ["r" if t is range else "sl", *[_plain(x) for x in (v.start, v.stop, v.step)]]
        if v is Ellipsis:
            return ["e"]
        if t is np.ndarray or issubclass(t, np.generic) and t.__module__ == "numpy":
            if v.dtype.hasobject or v.dtype.fields is not None:
                raise Unsupported("an array of objects")
            if t is np.ndarray:
                data = self._bytes(np.ascontiguousarray(v).tobytes())
                return ["a", v.dtype.str, list(v.shape), *data, bool(v.flags.writeable)]
            return ["g", v.dtype.str, *self._bytes(v.tobytes())]
        if id(v) in self._view_ids():  # a game view: by its place, with what its frames have computed
            frames = [v] if isinstance(v, Frame) else [getattr(v, "frame", None), getattr(v, "before_frame", None),
                                                      *getattr(v, "frames", ())]
            caches = [[self.view_ids[id(f)], k, self.ref(getattr(f, k), d)] for f in frames
                      if isinstance(f, Frame) and id(f) in self.view_ids for k in _CACHES if getattr(f, k) is not None]
            return ["view", self.view_ids[id(v)], caches]
        if t is types.ModuleType:
            if _module(v.__name__) is not v:
                raise Unsupported(f"the module {v.__name__} (made by your code)")
            return ["m", v.__name__]
        if t is types.FunctionType and v.__code__.co_filename.startswith("<cell-"):
            return self.function(v, d)
        if t is types.CellType:
            try:
                return ["cell", self.ref(v.cell_contents, d)]
            except ValueError:
                return ["cell", None]  # an empty cell (a name not bound yet)
        if t is types.MethodType:
            return ["meth", self.ref(v.__func__, d), self.ref(v.__self__, d)]
        if t in (staticmethod, classmethod):
            return ["sm" if t is staticmethod else "cm", self.ref(v.__func__, d)]
        if t is property:
            return ["prop", *self._refs((v.fget, v.fset, v.fdel, v.__doc__), d)]
        if t is functools.partial:
            return ["pt", *self._refs((v.func, v.args, v.keywords), d)]
        if t is collections.deque:
            return ["dq", self._refs(v, d), v.maxlen]
        if t in (collections.Counter, collections.OrderedDict, collections.defaultdict):
            self._keys(v)
            factory = self.ref(v.default_factory, d) if t is collections.defaultdict else None
            return [t.__name__, [[self.ref(k, d), self.ref(x, d)] for k, x in dict.items(v)], factory]
        if type(t) is type and t.__module__ == "__main__":
            return self.instance(v, t, d)
        if type(v) is type and v.__module__ == "__main__":
            return self.cls(v, d)
        name = getattr(v, "__qualname__", None) or getattr(v, "__name__", None)
        if type(name) is str and _resolve(getattr(v, "__module__", None), name) is v:
            return ["ref", v.__module__, name]
        raise Unsupported(f"a {t.__name__}")

    def _view_ids(self) -> dict[int, list]:
        if self.view_ids is None:
            self.view_ids = self.views()
        return self.view_ids

    def function(self, f: types.FunctionType, d: int) -> list[Any]:
        code, where = f.__code__, f.__code__.co_filename
        entry = linecache.cache.get(where)
        if not entry or len(entry) < 3:
            raise Unsupported("a function whose source is gone")
        self.cells[where] = "".join(entry[2])
        closure = [self.ref(c, d) for c in f.__closure__] if f.__closure__ else None
        return ["fn", where, code.co_qualname, code.co_firstlineno, hash(code), f.__name__, f.__qualname__,
                self.ref(f.__defaults__, d), self.ref(f.__kwdefaults__, d), closure,
                self.ref(dict(f.__dict__), d)]

    def instance(self, v: Any, t: type, d: int) -> list[Any]:
        base = next((b for b in t.__mro__ if b in _BUILTIN_BASES), None)
        if base is None or any(b.__module__ != "__main__" and b not in _BUILTIN_BASES for b in t.__mro__):
            raise Unsupported(f"a {t.__name__} (its class derives from a library class)")
        if issubclass(t, BaseException):
            raise Unsupported(f"a {t.__name__} (an exception)")
        slots = [s for c in t.__mro__ for s in c.__dict__.get("__slots__", ()) if s not in ("__dict__", "__weakref__")]
        try:
            state = object.__getattribute__(v, "__dict__")
        except AttributeError:
            state = None
        slot_values = []
        for s in slots:
            try:
                slot_values.append([s, self.ref(object.__getattribute__(v, s), d)])
            except AttributeError:
                pass
        items = list(list.__iter__(v)) if base is list else list(dict.items(v)) if base is dict else None
        if base is dict:
            self._keys(k for k, _ in items)
            items = [[self.ref(k, d), self.ref(x, d)] for k, x in items]
        elif items is not None:
            items = self._refs(items, d)
        return ["obj", self.ref(t, d), self.ref(dict(state), d) if type(state) is dict else None,
                slot_values, items]

    def cls(self, c: type, d: int) -> list[Any]:
        if not all(_base_ok(b, b.__module__ == "__main__") for b in c.__bases__):
            raise Unsupported(f"the class {c.__name__} (it derives from a library class)")
        slots = c.__dict__.get("__slots__")
        slots = [slots] if isinstance(slots, str) else list(slots) if slots is not None else None
        attrs = [[k, self.ref(x, d)] for k, x in c.__dict__.items()
                 if k not in _SKIP_ATTRS and not isinstance(x, (types.MemberDescriptorType, types.GetSetDescriptorType))]
        return ["cls", c.__name__, c.__qualname__, self._refs(c.__bases__, d), slots, c.__dict__.get("__doc__"), attrs]


def _base_ok(b: Any, ours: bool) -> bool:
    """A base a carried class may have: one of the model's (`ours`: carried too), object, list, dict,
    or a built-in exception (the loader checks the same)."""
    return type(b) is type and (ours or b in _BUILTIN_BASES or issubclass(b, BaseException)
                                and b.__module__ == "builtins")


def _inert(k: Any) -> bool:
    """Hashed by CPython or numpy, never by the model's code (its classes hash as `type` does)."""
    t = type(k)
    if t in _PLAIN or t in (complex, bytes, range, slice, types.FunctionType, type, types.ModuleType) or k is Ellipsis:
        return True
    if t in (tuple, frozenset):
        return all(_inert(x) for x in k)
    return issubclass(t, np.generic) and t.__module__ == "numpy" and not k.dtype.hasobject


def _module(name: Any) -> types.ModuleType | None:
    """A module by name, imported if it must be and may be (what the kernel's import refuses, never)."""
    if not isinstance(name, str) or not name or name.split(".")[0] in REFUSED_MODULES:
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - no such module here: the value cannot travel
        return None


def _resolve(module: Any, qualname: str) -> Any:
    obj = _module(module)
    for part in qualname.split("."):
        if obj is None or not part.isidentifier() or part.startswith("__"):
            return None
        obj = getattr(obj, part, None)
    return obj


def dump(ns: dict[str, Any], skip: set[str], views: Callable[[], dict[int, list]], limit: int
         ) -> tuple[bytes, list[str]]:
    """The blob for `ns` (its names but `skip`'s), and "name (why)" for each left out."""
    dumper, dropped = Dumper(views, limit), []
    for name in sorted(k for k in ns if isinstance(k, str) and k not in skip and not k.startswith("__")):
        why = dumper.add(name, ns[name])
        if why:
            dropped.append(f"{name} ({why})")
    return dumper.blob(), dropped


def complete(data: bytes) -> bool:
    """Whether `data` is one whole blob (the framing only: the worker that keeps it parses nothing)."""
    if not data.startswith(MAGIC) or not data.endswith(END) or len(data) < len(MAGIC) + _HEAD.size + len(END):
        return False
    head, size = _HEAD.unpack_from(data, len(MAGIC))
    return len(MAGIC) + _HEAD.size + head + size + len(END) == len(data)


def load(data: bytes, ns: dict[str, Any], view: Callable[[list], Any]) -> str | None:
    """Rebuild the variables of `data` into `ns` (see the module docstring): None, or why none were."""
    if not data:
        return None
    gc.disable()
    loader = None
    try:
        if not complete(data):
            raise ValueError("the saved variables are incomplete")
        head_len, _ = _HEAD.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + _HEAD.size
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
_CLASS_SPECIALS = _SKIP_ATTRS | {"__class__", "__bases__", "__mro__", "__name__"}


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _int(x: Any) -> int:
    _check(type(x) is int, "not an int")
    return x


class Loader:
    """Rebuilds a blob's nodes in four passes: shells of what is mutable, then what is not (on
    demand), then the shells filled, then the classes' attributes (see the module docstring)."""

    def __init__(self, head: Any, data: memoryview, ns: dict[str, Any], view: Callable[[list], Any]) -> None:
        _check(type(head) is dict, "not a table")
        self.nodes, self.roots, self.cells = head.get("nodes"), head.get("roots"), head.get("cells")
        _check(type(self.nodes) is list and type(self.roots) is dict and type(self.cells) is dict, "not a table")
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
        _check(_inert(k), "a key the model's code would hash")
        return k

    def blob(self, off: Any, size: Any) -> memoryview:
        _check(type(off) is int and type(size) is int and 0 <= off and 0 <= size and off + size <= len(self.data),
               "bytes out of the blob")
        return self.data[off:off + size]

    def build(self, n: list[Any]) -> Any:
        tag, a = n[0], n[1:]
        if tag == "v":
            _check(type(a[0]) in _PLAIN, "not a value")
            return a[0]
        if tag in ("L", "T", "S", "F"):
            items = [_unplain(x) for x in a[0]]
            return {"L": list, "T": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "D":
            return {_unplain(k): _unplain(v) for k, v in a[0]}
        if tag == "t":
            return tuple(self.get(r) for r in a[0])
        if tag == "f":
            return frozenset(self.key(r) for r in a[0])
        if tag in ("y", "Y"):
            return (bytes if tag == "y" else bytearray)(self.blob(a[0], a[1]))
        if tag in ("a", "g"):
            return self.array(tag, a)
        if tag in ("c", "r", "sl", "e"):
            _check(all(type(x) in _PLAIN or type(x) is list for x in a), "not a value")
            return {"c": lambda: complex(float(a[0]), float(a[1])), "r": lambda: range(*a),
                    "sl": lambda: slice(*[_unplain(x) for x in a]), "e": lambda: Ellipsis}[tag]()
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
            mod = _module(a[0])
            _check(mod is not None, "a module not here")
            return mod
        if tag == "ref":
            _check(type(a[1]) is str, "a name")
            obj = _resolve(a[0], a[1])
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
        _check(all(_base_ok(b, b in self.made) for b in bases), "a class's bases")
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
            _check(cls in self.made and not issubclass(cls, BaseException), "an instance of no class of the model's")
            base = next(b for b in cls.__mro__ if b in _BUILTIN_BASES)
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
                _check(isinstance(frame, Frame) and name in _CACHES and type(value) is _CACHES[name], "a frame's cache")
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
            desc = next((c.__dict__[name] for c in type(obj).__mro__ if type(name) is str and name in c.__dict__), None)
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
