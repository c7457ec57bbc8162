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
import importlib
import json
import linecache
import random
import struct
import types
from typing import Any, Callable

import numpy as np

from duck.game.frames import Frame
from duck.sandbox.guard import REFUSED_MODULES

MAGIC, END = b"DUCKNS1\n", b"\nEND"
HEAD = struct.Struct("<QQ")
MAX_NODES = 2_000_000
MAX_DEPTH = 200
PLAIN = (type(None), bool, int, float, str)
BUILTIN_BASES = (object, list, dict)
CACHES = {"_ascii": str, "_seg": dict, "_labels": np.ndarray}  # what a game frame computes once
RNG_BITS = {"PCG64", "PCG64DXSM"}  # numpy bit generators whose state is ints only
SKIP_ATTRS = {"__dict__", "__weakref__", "__module__", "__qualname__", "__slots__", "__doc__"}


class Unsupported(Exception):
    """A value that cannot travel (its name is left out)."""


def compile_cell(source: str, filename: str) -> types.CodeType:
    """A snippet as the call compiles it (`load` compiles a cell again the same way: the same
    code objects); annotations postponed, as they always were."""
    return compile(source, filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)


def _plain(v: Any, depth: int = 0) -> Any:
    """`v` as an inline JSON value (a tuple as an array), or raise Unsupported."""
    t = type(v)
    if t in PLAIN:
        if t is int and v.bit_length() > 10_000:
            raise Unsupported("an int of more than 3,000 digits")
        return v
    if t is tuple and depth < 4:
        return [_plain(x, depth + 1) for x in v]
    raise Unsupported


def unplain(v: Any) -> Any:
    if type(v) is not list:
        return v
    return tuple(unplain(x) if type(x) is list else x for x in v)


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
        return MAGIC + HEAD.pack(len(head), len(self.data)) + head + bytes(self.data) + END

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
        if t in PLAIN:
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
            if not inert(k):
                raise Unsupported(f"a dict or set holding a {type(k).__name__} (only values, tuples, "
                                  "functions and classes can be keys)")

    def other(self, v: Any, t: type, d: int) -> list[Any]:
        if id(v) in self._view_ids():  # a game view: by its place, with what its frames have computed
            frames = [v] if isinstance(v, Frame) else [getattr(v, "frame", None),
                                                      getattr(v, "before_frame", None), *getattr(v, "frames", ())]
            frames = [f for f in frames if isinstance(f, Frame) and id(f) in self.view_ids]
            caches = [[self.view_ids[id(f)], k, self.ref(getattr(f, k), d)] for f in frames
                      for k in CACHES if getattr(f, k) is not None]
            return ["view", self.view_ids[id(v)], caches]
        if t is complex:
            return ["c", v.real, v.imag]
        if t is random.Random:  # its state inline: the loader's Random.setstate checks it
            return ["rng", *_plain(v.getstate())]
        if t is np.random.Generator:
            if not rng_state(state := v.bit_generator.state):
                raise Unsupported(f"a Generator over {state.get('bit_generator')} (PCG64 travels)")
            return ["npg", state]
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
        if t is types.ModuleType:
            if module_named(v.__name__) is not v:
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
        if type(name) is str and resolve(getattr(v, "__module__", None), name) is v:
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
        base = next((b for b in t.__mro__ if b in BUILTIN_BASES), None)
        if base is None or any(b.__module__ != "__main__" and b not in BUILTIN_BASES for b in t.__mro__):
            raise Unsupported(f"a {t.__name__} (its class derives from a library class)")
        if issubclass(t, BaseException):
            raise Unsupported(f"a {t.__name__} (an exception)")
        slots = [s for c in t.__mro__ for s in c.__dict__.get("__slots__", ())
                 if s not in ("__dict__", "__weakref__")]
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
        if not all(base_ok(b, b.__module__ == "__main__") for b in c.__bases__):
            raise Unsupported(f"the class {c.__name__} (it derives from a library class)")
        slots = c.__dict__.get("__slots__")
        slots = [slots] if isinstance(slots, str) else list(slots) if slots is not None else None
        made = (types.MemberDescriptorType, types.GetSetDescriptorType)  # (type() makes these again)
        attrs = [[k, self.ref(x, d)] for k, x in c.__dict__.items() if k not in SKIP_ATTRS and not isinstance(x, made)]
        return ["cls", c.__name__, c.__qualname__, self._refs(c.__bases__, d), slots, c.__dict__.get("__doc__"),
                attrs]


def rng_state(v: Any) -> bool:
    """Whether `v` is a numpy bit generator's state that travels (PCG64's: dicts of strings and ints)."""
    return type(v) is dict and v.get("bit_generator") in RNG_BITS and _ints(v)


def _ints(v: Any) -> bool:
    return type(v) in (int, str) or type(v) is dict and all(type(k) is str and _ints(x) for k, x in v.items())


def base_ok(b: Any, ours: bool) -> bool:
    """A base a carried class may have: one of the model's (`ours`: carried too), object, list, dict,
    or a built-in exception (the loader checks the same)."""
    return type(b) is type and (ours or b in BUILTIN_BASES or issubclass(b, BaseException)
                                and b.__module__ == "builtins")


def inert(k: Any) -> bool:
    """Hashed by CPython or numpy, never by the model's code (its classes hash as `type` does)."""
    t = type(k)
    if t in PLAIN or t in (complex, bytes, range, slice, types.FunctionType, type, types.ModuleType) \
            or k is Ellipsis:
        return True
    if t in (tuple, frozenset):
        return all(inert(x) for x in k)
    return issubclass(t, np.generic) and t.__module__ == "numpy" and not k.dtype.hasobject


def module_named(name: Any) -> types.ModuleType | None:
    """A module by name, imported if it must be and may be (what the kernel's import refuses, never)."""
    if not isinstance(name, str) or not name or name.split(".")[0] in REFUSED_MODULES:
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - no such module here: the value cannot travel
        return None


def resolve(module: Any, qualname: str) -> Any:
    obj = module_named(module)
    for part in qualname.split("."):
        if obj is None or not part.isidentifier() or part.startswith("__"):
            return None
        obj = getattr(obj, part, None)
    return obj


def dump(ns: dict[str, Any], skip: set[str], views: Callable[[], dict[int, list]], limit: int
         ) -> tuple[bytes, list[str]]:
    """The blob for `ns` (its names but `skip`'s), and "name (why)" for each left out."""
    dumper, dropped, starts = Dumper(views, limit), [], []
    for name in sorted(k for k in ns if isinstance(k, str) and k not in skip and not k.startswith("__")):
        at = (name, len(dumper.nodes), len(dumper.data))
        why = dumper.add(name, ns[name])
        if why:
            dropped.append(f"{name} ({why})")
        elif name in dumper.roots:
            starts.append(at)
    blob = dumper.blob()
    while len(blob) > limit and starts:  # (its strings count too: the last names go until it fits)
        name, n, d = starts.pop()
        del dumper.roots[name], dumper.nodes[n:], dumper.data[d:]
        dropped.append(f"{name} (the variables take more than {limit >> 20} MB)")
        blob = dumper.blob()
    return blob, dropped


def complete(data: bytes) -> bool:
    """Whether `data` is one whole blob (the framing only: the worker that keeps it parses nothing)."""
    if not data.startswith(MAGIC) or not data.endswith(END) or len(data) < len(MAGIC) + HEAD.size + len(END):
        return False
    head, size = HEAD.unpack_from(data, len(MAGIC))
    return len(MAGIC) + HEAD.size + head + size + len(END) == len(data)
