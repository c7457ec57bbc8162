"""The size rules of AGENTS.md, checked: each package's lines, and per module, function and line.

A budget that a change outgrows moves in the same commit as the code, with the reason in
experiments/LOG.md. A budget met by squeezing lines is not met: the blank-line share is part of it.
`python tests/test_budget.py` prints where the tree stands against each budget.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (name, folders counted, folders left out, most lines): the packages' budgets (AGENTS.md).
PACKAGES = [
    ("product", ("duck", "scheduler"), ("duck/train",), 20_060),  # 19,000 at issue 46; LOG 2026-12-04
    ("training export", ("duck/train",), (), 1_500),
    ("workbench", ("devkit",), (), 7_000),
]
MODULE_LINES = 400
FUNCTION_LINES = 80
DOCSTRING_LINES = 15  # lines between the quotes of a module docstring
LONG_LINE = 110  # characters
LONG_LINES = 350  # lines over LONG_LINE, in all the packages together
BLANK_SHARE = 0.12  # of each package's lines


def _files(root: Path, folders: tuple[str, ...], skip: tuple[str, ...] = ()) -> list[Path]:
    out = []
    for folder in folders:
        for f in sorted((root / folder).rglob("*.py")):
            if not any(f.is_relative_to(root / s) for s in skip):
                out.append(f)
    return out


def _docstring_lines(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return max(0, first.end_lineno - first.lineno - 1)
    return 0


def violations(root: Path = ROOT) -> list[str]:
    """Every rule the tree at `root` breaks, one line each."""
    bad, long_lines = [], 0
    for name, folders, skip, most in PACKAGES:
        files = _files(root, folders, skip)
        lines = [line for f in files for line in f.read_text().splitlines()]
        if len(lines) > most:
            bad.append(f"{name} ({', '.join(folders)}): {len(lines):,} lines, budget {most:,}")
        blank = sum(1 for line in lines if not line.strip())
        if lines and blank / len(lines) < BLANK_SHARE:
            bad.append(f"{name}: {blank / len(lines):.1%} blank lines, at least {BLANK_SHARE:.0%}")
        long_lines += sum(1 for line in lines if len(line) > LONG_LINE)
        for f in files:
            where = f.relative_to(root).as_posix()
            text = f.read_text()
            n = len(text.splitlines())
            if n > MODULE_LINES:
                bad.append(f"{where}: {n} lines, at most {MODULE_LINES} a module")
            tree = ast.parse(text)
            if _docstring_lines(tree) > DOCSTRING_LINES:
                bad.append(f"{where}: a module docstring of {_docstring_lines(tree)} lines, at most {DOCSTRING_LINES}")
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    size = node.end_lineno - node.lineno + 1
                    if size > FUNCTION_LINES:
                        bad.append(f"{where}:{node.lineno} {node.name}: {size} lines, at most {FUNCTION_LINES}")
    if long_lines > LONG_LINES:
        bad.append(f"{long_lines} lines over {LONG_LINE} characters, at most {LONG_LINES}")
    return bad


def test_the_tree_keeps_its_budgets():
    assert violations() == []


def test_a_padded_module_function_or_docstring_fails(tmp_path):
    for pkg in ("duck", "scheduler", "devkit"):
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = set(violations(tmp_path))
    (tmp_path / "duck" / "padded.py").write_text("".join(f"x{i} = {i}\n" if i % 8 else "\n" for i in range(401)))
    body = "".join(f"    a{i} = {i}\n" if i % 8 else "\n" for i in range(80))
    (tmp_path / "scheduler" / "long_function.py").write_text(f"def planted():\n{body}")
    doc = "\n".join(f"line {i}" for i in range(16))
    (tmp_path / "devkit" / "wordy.py").write_text(f'"""Wordy.\n{doc}\n"""\n')
    new = set(violations(tmp_path)) - before
    assert any(v.startswith("duck/padded.py: 401 lines") for v in new), new
    assert any(v.startswith("scheduler/long_function.py:1 planted: 81 lines") for v in new), new
    assert any(v.startswith("devkit/wordy.py: a module docstring of 16 lines") for v in new), new


def test_a_package_over_its_budget_or_squeezed_fails(tmp_path):
    shutil.copytree(ROOT / "devkit", tmp_path / "devkit", ignore=shutil.ignore_patterns("__pycache__"))
    for pkg in ("duck", "scheduler"):
        (tmp_path / pkg).mkdir()
    filler = tmp_path / "devkit" / "filler"
    filler.mkdir()
    for k in range(20):  # 20 modules of 395 lines, none blank: over the budget and squeezed
        (filler / f"m{k}.py").write_text("".join(f"v{i} = {i}\n" for i in range(395)))
    found = violations(tmp_path)
    assert any(v.startswith("workbench (devkit):") and "budget 7,000" in v for v in found), found
    assert any(v.startswith("workbench:") and "blank lines" in v for v in found), found


if __name__ == "__main__":
    for name, folders, skip, most in PACKAGES:
        files = _files(ROOT, folders, skip)
        lines = [line for f in files for line in f.read_text().splitlines()]
        blank = sum(1 for line in lines if not line.strip())
        print(f"{name:16} {len(lines):>7,} lines of {most:>7,}  blank {blank / max(1, len(lines)):.1%}")
    print("\n".join(violations()) or "every budget kept")
