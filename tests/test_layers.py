"""The package tree is the architecture: every import points down the stack (README, "Layout").

    cli                                   the command line: may import anything
    devkit, lab, bench                    the workbench beside the stack (stub server, rehearsal,
                                          benchmarks): they import anything; nothing in the stack
                                          imports them, and only duck/cli.py's command table names
                                          devkit (as strings, imported when the command runs)
    kaggle                                the notebook's orchestration
    scheduler | run                       when games start and stop (never how they are played);
                                          playing a folder of games
    policies                              the composition root: policies by name, the fallback
    agent                                 the model-driven loop, its context and notes
    sandbox | explorer | llm              the kernel; the non-LLM policy; the model client and server
    play                                  any policy under a budget; records; scores
    game                                  game access and perception (the only importer of arc_agi)
    config, paths, seeds, files           the one config surface; stable seeds from names; whole files
    config.run                            the sections of a run: play, explorer, kaggle (config re-exports them)
    config.load                           reading a config and planning its fields (config re-exports it)
    config.profiles                       the serving profiles and their memory plan (the config's defaults)

A module may import from lower layers and from its own package, never upwards or sideways
(sandbox, explorer and llm do not import each other). Lazy imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {
    "duck.config.profiles": -3,
    "duck.config.load": -2,
    "duck.config.run": -1,
    "duck.config": 0, "duck.paths": 0, "duck.seeds": 0, "duck.files": 0,
    "duck.game": 1,
    "duck.play": 2,
    "duck.sandbox": 3, "duck.explorer": 3, "duck.llm": 3,
    "duck.agent": 4,
    "duck.policies": 5,
    "duck.run": 6, "scheduler": 6,
    "duck.kaggle": 7,
    "duck.lab": 8, "devkit": 8,
    "duck.cli": 9,
}
OFF_STACK = 8
TOOLKIT = ("arc_agi", "arcengine")


def _unit(module: str) -> str:
    """The layer unit a module belongs to: its longest prefix in LAYERS."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    raise KeyError(module)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for pkg in ("duck", "scheduler", "devkit"):
        for f in (root / pkg).rglob("*.py"):
            name = ".".join(f.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = f
    return out


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every module an import statement names, anywhere in the file (relative ones resolved)."""
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out.append((base, node.lineno))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]  # `from duck import x`
    return out


def violations(root: Path = ROOT) -> list[str]:
    mods = _modules(root)
    bad = []
    for module, path in sorted(mods.items()):
        if module in ("duck", "devkit", "scheduler.__main__"):
            continue
        unit = _unit(module)
        level = LAYERS[unit]
        for target, line in _imports(path, module):
            top = target.split(".")[0]
            if top in TOOLKIT and unit != "duck.game" and level < OFF_STACK:
                bad.append(f"{path.relative_to(root)}:{line} imports {target}: only duck.game uses the toolkit")
            if top not in ("duck", "scheduler", "devkit") or target not in mods:
                continue
            other = _unit(target)
            if other == unit:
                continue
            if LAYERS[other] >= level and not (level >= OFF_STACK and LAYERS[other] <= OFF_STACK):
                bad.append(f"{path.relative_to(root)}:{line} ({unit}, layer {level}) imports {target} "
                           f"({other}, layer {LAYERS[other]})")
    return bad


def devkit_mentions(root: Path = ROOT) -> list[str]:
    """Every line under duck/ or scheduler/ that names devkit, but for duck/cli.py's command
    table (its `Command("devkit....")` strings): the product never reaches the workbench."""
    bad = []
    for pkg in ("duck", "scheduler"):
        for f in sorted((root / pkg).rglob("*.py")):
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if "devkit" in line and not (f.relative_to(root).as_posix() == "duck/cli.py"
                                             and 'Command("devkit.' in line):
                    bad.append(f"{f.relative_to(root)}:{n} names devkit: {line.strip()[:80]}")
    return bad


def test_the_product_never_names_the_workbench():
    assert devkit_mentions() == []


def test_every_module_has_a_layer():
    for module in _modules():
        if module != "duck":
            _unit(module)


def test_no_import_points_up_or_sideways():
    assert violations() == []


def test_a_planted_upward_import_is_caught(tmp_path):
    import shutil
    for pkg in ("duck", "scheduler", "devkit"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / "duck" / "game" / "frames.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from duck.agent.loop import AgentPolicy\n"
                      "    return AgentPolicy\n")
    sideways = tmp_path / "duck" / "sandbox" / "host.py"
    sideways.write_text("from duck.explorer.policy import Explorer\n" + sideways.read_text())
    lazy = tmp_path / "duck" / "run" / "games.py"
    lazy.write_text(lazy.read_text() + "\n\ndef _planted():\n    import devkit.stub.server\n    return devkit\n")
    named = tmp_path / "scheduler" / "book.py"
    named.write_text(named.read_text() + "\n# see devkit.stub for the stand-in\n")
    found = violations(tmp_path)
    assert any("duck/game/frames.py" in v and "duck.agent.loop" in v for v in found)
    assert any("duck/sandbox/host.py" in v and "duck.explorer.policy" in v for v in found)
    assert any("duck/run/games.py" in v and "devkit.stub.server" in v for v in found)
    mentions = devkit_mentions(tmp_path)
    assert any(m.startswith("duck/run/games.py:") for m in mentions)
    assert any(m.startswith("scheduler/book.py:") for m in mentions)
    assert not any(m.startswith("duck/cli.py:") for m in mentions)


@pytest.mark.parametrize("package", ["duck", "scheduler", "devkit"])
def test_no_import_cycles(package):
    mods = _modules()
    graph = {m: {t for t, _ in _imports(p, m) if t in mods and t != m} for m, p in mods.items()
             if m.startswith(package)}
    seen, stack, cycles = set(), [], []

    def visit(m: str) -> None:
        if m in stack:
            cycles.append(stack[stack.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            visit(t)
        stack.pop()

    for m in sorted(graph):
        visit(m)
    # A package's __init__ importing its own modules is not a cycle worth naming.
    cycles = [c for c in cycles if not any(x in ("duck", "scheduler", "devkit") for x in c)]
    assert cycles == []
