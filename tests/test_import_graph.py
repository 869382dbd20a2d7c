"""The module graph of nonstop, read from the source with `ast`: no two modules import each other,
however far round (a lazy import inside a function counts: it runs all the same), and no module
grows past `MAX_LINES` (a module that long holds more than one concern: split it).

``test_layers`` checks the same at the level of parts (realtime, server, …); this one checks every
module. Imports under ``if TYPE_CHECKING:`` never run, but a cycle through one is still two modules
that each need the other to be read: the cycle test counts them too (``type_only=True``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nonstop"
MAX_LINES = 800

# Nothing is owed: a cycle or a long module fails the test. (Work in progress elsewhere may list what
# it alone still owes here until it lands; a cycle passes when its modules are a subset of one entry.)
KNOWN_CYCLES_BEING_FIXED: list[frozenset[str]] = []
KNOWN_LONG_BEING_FIXED: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` at ``line`` of its file (``text``: that import statement)."""

    importer: str
    imported: str
    line: int
    text: str


def module_name(path: Path, root: Path) -> str:
    """``root/realtime/host.py`` → ``nonstop.realtime.host``; a package's ``__init__`` is the package."""
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_imports(node: ast.AST, type_only: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` that can run, at any depth (functions, methods, try
    blocks), less the bodies of ``if TYPE_CHECKING:`` (their ``else`` runs) unless ``type_only``."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
        for child in node.orelse:
            yield from _run_imports(child)
        return
    for child in ast.iter_child_nodes(node):
        yield from _run_imports(child, type_only)


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` an import statement runs: ``from a.b import c`` reaches the
    submodule ``a.b.c`` where there is one, else ``a.b`` itself."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    package = importer if is_package else importer.rpartition(".")[0]
    if node.level:
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    out = set()
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in modules:
            out.add(submodule)
        elif source in modules:
            out.add(source)
    return out


def import_edges(root: Path, type_only: bool = False) -> tuple[dict[str, Path], list[Edge]]:
    """Every module under the package directory ``root`` and every import between two of them (with
    ``type_only``, those under ``if TYPE_CHECKING:`` too)."""
    files = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    modules = set(files)
    edges = []
    for name, path in files.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in _run_imports(ast.parse(text, str(path)), type_only):
            statement = " ".join(line.strip() for line in lines[node.lineno - 1 : node.end_lineno])
            for target in sorted(_targets(node, name, path.name == "__init__.py", modules)):
                edges.append(Edge(name, target, node.lineno, statement))
    return files, edges


def import_cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of the import graph with more than one module, and every
    module that imports itself: each a cycle (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
        graph.setdefault(e.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def describe_cycle(cycle: list[str], edges: list[Edge]) -> str:
    """The cycle's modules, then each import line between two of them."""
    members = set(cycle)
    steps = [
        f"    {e.importer}:{e.line} → {e.imported}: {e.text}"
        for e in edges
        if e.importer in members and e.imported in members
    ]
    return f"  cycle of {len(cycle)}: {', '.join(cycle)}\n" + "\n".join(steps)


def _known(cycle: list[str]) -> bool:
    return any(set(cycle) <= entry for entry in KNOWN_CYCLES_BEING_FIXED)


def test_no_import_cycles() -> None:
    _, edges = import_edges(SRC, type_only=True)
    cycles = [c for c in import_cycles(edges) if not _known(c)]
    if cycles:
        pytest.fail(
            "import cycles in nonstop (break each: move the shared piece down, or pass it in):\n"
            + "\n".join(describe_cycle(c, edges) for c in cycles)
        )


def test_no_module_over_800_lines() -> None:
    files, _ = import_edges(SRC)
    long = {}
    for name, path in files.items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES and name not in KNOWN_LONG_BEING_FIXED:
            long[name] = n
    assert not long, f"modules over {MAX_LINES} lines (split each by concern): " + ", ".join(
        f"{name} ({n} lines)" for name, n in sorted(long.items())
    )


def test_graph_finds_a_cycle(tmp_path: Path) -> None:
    # the detector must be able to fail: a module-level import one way, a lazy relative one back
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg.b import helper\n")
    (root / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import c\n"
        "def helper():\n    from . import a\n    return a\n"
    )
    (root / "c.py").write_text("import pkg.b\n")
    _, edges = import_edges(root)
    assert import_cycles(edges) == [["pkg.a", "pkg.b"]]  # b → c is type-only: c is in no running cycle
    assert import_cycles(import_edges(root, type_only=True)[1]) == [["pkg.a", "pkg.b", "pkg.c"]]  # but c ↔ b
    report = describe_cycle(["pkg.a", "pkg.b"], edges)
    assert "pkg.a:1 → pkg.b: from pkg.b import helper" in report
    assert "pkg.b:5 → pkg.a: from . import a" in report
    (root / "c.py").write_text("import pkg.c\n")
    assert ["pkg.c"] in import_cycles(import_edges(root)[1])  # a module importing itself


def test_nothing_in_the_library_imports_a_command():
    """Commands (`nonstop.commands`) stand on the library; the library never reaches up to one
    (only the entry point, `nonstop.cli`, finds the verbs)."""
    edges = [
        e
        for e in import_edges(SRC)[1]
        if e.imported.startswith("nonstop.commands")
        and not e.importer.startswith(("nonstop.commands", "nonstop.cli", "nonstop.__main__"))
    ]
    assert not edges, "\n".join(f"{e.importer}:{e.line}: {e.text}" for e in edges)


def test_importing_the_library_imports_no_command_line_code():
    """``import nonstop`` and ``import nonstop.experiment`` bring in no argparse and no command module."""
    import subprocess
    import sys

    code = (
        "import sys, nonstop, nonstop.experiment; "
        "print(sorted(m for m in sys.modules if m == 'argparse' or m.startswith('nonstop.commands')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_one_formatter_few_skips() -> None:
    """`ruff format` formats the tree (CI checks it); a `# fmt: skip` is kept only where an aligned table of
    numbers reads better, at most 20 in all (issue 31)."""
    root = SRC.parents[1]
    marks = sum(
        line.count("# fmt: skip")
        for folder in ("src", "tests", "scripts", "examples")
        for path in (root / folder).rglob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
    )
    assert marks <= 20, f"{marks} `# fmt: skip` markers: let ruff format the code"


#: the question `test_no_part_asks_which_clock_it_runs_on` forbids (the issue's grep, as a pattern)
ASKS_WHICH_CLOCK = re.compile(r"is_virtual|isinstance\(.*VirtualClock")


def test_no_part_asks_which_clock_it_runs_on() -> None:
    """A timed process runs the same lines on both clocks; where a part takes another shape it asks the clock
    what it offers (`Clock.waits_block`, `Clock.spans_processes`, ...), never whether it is virtual. Only the
    clocks themselves and the benchmarks (which measure one clock against the other) may ask (issue 31)."""
    found = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path != SRC / "realtime" / "clock.py" and "bench" not in path.relative_to(SRC).parts
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ASKS_WHICH_CLOCK.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_clock_question_scan_sees_a_question() -> None:
    """The scan above is not vacuous: it matches the forms it forbids, and not a clock's capability."""
    asks = ASKS_WHICH_CLOCK.search
    assert asks("if clock.is_virtual:") and asks('getattr(clock, "is_virtual", False)')
    assert asks("if isinstance(self.clock, VirtualClock):")
    assert not asks("if clock.waits_block:") and not asks("clock = VirtualClock()")
