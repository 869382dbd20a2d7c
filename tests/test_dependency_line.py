"""docs/architecture.md's dependency line is true of the source: the test reads the line from the page
and checks every import (module level or inside a function) of every part against it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "nonstop"
PAGE = ROOT / "docs" / "architecture.md"


def dependency_line() -> list[str]:
    """The parts in the page's order, bottom first (``a`` ← ``b``: b may import a)."""
    text = " ".join(PAGE.read_text().split())
    found = re.search(r"\*\*Dependency direction\*\*[^:]*:(.*?)\.(?:\s|$)", text)
    assert found, "docs/architecture.md has no **Dependency direction** line"
    parts = [re.fullmatch(r"\s*`(\w+)`\s*", piece) for piece in found.group(1).split("←")]
    assert all(parts), f"the line is not `a` ← `b` ← …: {found.group(1)!r}"
    return [p.group(1) for p in parts if p]


def imported_parts(part: str) -> set[str]:
    """The parts of nonstop that ``part``'s modules import, anywhere in them."""
    out: set[str] = set()
    for path in (SRC / part).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            )
            out |= {n.split(".")[1] for n in names if n.startswith("nonstop.") and n.split(".")[1] != part}
    return out


def test_the_page_names_every_part_of_the_library_once():
    line = dependency_line()
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "static"}
    assert len(line) == len(set(line)) and set(line) == packages


def test_each_part_imports_only_parts_to_its_left():
    line = dependency_line()
    helpers = {p.stem for p in SRC.glob("_*.py") if p.stem != "__init__" and p.stem != "__main__"}
    for i, part in enumerate(line):
        above = imported_parts(part) - set(line[:i]) - helpers
        assert not above, f"{part} imports {sorted(above)}, drawn to its right on docs/architecture.md"


def test_the_helpers_below_every_part_import_none():
    for path in SRC.glob("_*.py"):
        if path.stem in ("__init__", "__main__"):
            continue
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0]
        assert not [n for n in names if n.startswith("nonstop.")], path.name
