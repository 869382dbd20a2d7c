"""The dependency direction of docs/architecture.md, checked on the source: clock/channels ← host ←
inference/learning ← run ← cli/server; the realtime core imports nothing above it, metrics import
nothing that starts processes, and no two parts of nonstop import each other (lazy imports inside
functions included: a cycle hidden in a function is still a cycle)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nonstop"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    name = ".".join(rel.parts)
    return name.removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Every ``nonstop.…`` module ``path`` imports, wherever the import statement stands."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                out.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                out.add(node.module)
    return {name for name in out if name == "nonstop" or name.startswith("nonstop.")}


def _part(module: str) -> str:
    """The part of nonstop a module belongs to: ``nonstop.realtime.host`` → ``realtime``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "nonstop"


def _graph() -> dict[str, dict[str, set[str]]]:
    """part -> imported part -> the modules whose imports make that edge."""
    edges: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(SRC.rglob("*.py")):
        mod = _module_name(path)
        for imported in _imports(path):
            if _part(imported) != _part(mod):
                edges[_part(mod)][_part(imported)].add(mod)
    return edges


def _find_cycle(edges: dict[str, dict[str, set[str]]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_scan_sees_lazy_and_relative_imports(tmp_path):
    # the checker itself must be able to fail: an import inside a function and a relative one count
    assert "nonstop.envs" in _imports(
        SRC / "realtime" / "host.py"
    )  # host builds envs by id inside a method (a lazy import)
    assert "nonstop.envs.registry" in _imports(SRC / "envs" / "__init__.py")  # ``from .registry import …``
    cyclic = {"a": {"b": {"nonstop.a.x"}}, "b": {"c": {"nonstop.b.y"}}, "c": {"a": {"nonstop.c.z"}}}
    assert _find_cycle(cyclic) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b": set()}, "b": {}}) is None


def test_no_two_parts_of_nonstop_import_each_other():
    edges = _graph()
    cycle = _find_cycle(edges)
    if cycle:
        steps = [f"{a} → {b} (in {', '.join(sorted(edges[a][b]))})" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle between parts of nonstop: " + "; ".join(steps))


#: What each lower part may import besides itself (docs/architecture.md). The realtime core builds worlds by id
#: (envs); metrics read tick logs and theory (realtime, envs, policies) and start no processes.
ALLOWED: dict[str, set[str]] = {
    "realtime": {"_io", "envs"},
    "envs": {"policies"},
    "metrics": {"_console", "_io", "realtime", "envs", "policies"},
}


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_lower_parts_import_nothing_above_them(part):
    edges = _graph()
    above = {other: sorted(mods) for other, mods in edges.get(part, {}).items() if other not in ALLOWED[part]}
    assert not above, f"nonstop.{part} imports parts above it (docs/architecture.md): {above}"


def test_pure_modules_import_no_plumbing():
    # the tick row's schema and the arithmetic over it import nothing of the log's storage, and the
    # schedulers and the worker loop's pacing are functions of numbers
    assert _imports(SRC / "realtime" / "tickcolumns.py") == set()
    assert _imports(SRC / "realtime" / "ticksummary.py") == {"nonstop.realtime.tickcolumns"}
    assert _imports(SRC / "inference" / "checks.py") == set()
    assert _imports(SRC / "inference" / "rules.py") == {"nonstop.inference.checks"}
    assert _imports(SRC / "inference" / "phases.py") == {"nonstop.inference.checks", "nonstop.inference.rules"}
    pure = {f"nonstop.inference.{m}" for m in ("checks", "rules", "quantile_hold", "autoscale", "fill", "simulate")}
    assert _imports(SRC / "inference" / "fill.py") == {"nonstop.inference.checks", "nonstop.inference.rules"}
    assert _imports(SRC / "inference" / "schedulers.py") <= pure  # the front door re-exports the pure parts
    assert _imports(SRC / "inference" / "pacing.py") == set()


def test_a_tick_log_summary_loads_no_metrics():
    code = (
        "import sys\n"
        "from nonstop.realtime.ticklog import TickLog, SOURCE_AGENT\n"
        "log = TickLog(0.5)\n"
        "log.append(tick=1, deadline=0.5, time=0.5, episode=0, source=SOURCE_AGENT, delay=1)\n"
        "assert log.summary()['agent_ticks'] == 1 and log.seat(0).summary()['seat'] == 'seat0'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['nonstop', 'metrics'], ['nonstop', 'run'],"
        " ['nonstop', 'inference'], ['nonstop', 'learning'], ['nonstop', 'server'])))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC.parent)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_metrics_timing_is_the_logs_own_summary():
    from nonstop.metrics import timing
    from nonstop.realtime import ticksummary

    assert timing.summarize is ticksummary.summarize
    assert timing.episode_returns is ticksummary.episode_returns
    assert timing.interaction_intervals is ticksummary.interaction_intervals


#: The private views of shared-memory segments: their header words and raw arrays. Only the class
#: that lays a segment out reads or writes them (docs/design.md §3, STYLE: one place owns each buffer).
SEGMENT_VIEWS = frozenset({"_hdr", "_hdr_f", "_words", "_ids", "_q", "_d"})
#: Known readers from outside, to move onto the owner's methods (none left).
KNOWN_OUTSIDE: frozenset[tuple[str, str]] = frozenset()


def _outside_segment_access(path: Path) -> list[tuple[int, str]]:
    """``x._hdr`` (and the other views) where ``x`` is not ``self``, outside a class that assigns
    ``self._hdr`` itself (the owner, e.g. in its ``create``)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, str]] = []

    def owns(cls: ast.ClassDef, attr: str) -> bool:
        return any(
            isinstance(n, ast.Attribute)
            and n.attr == attr
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
            and isinstance(n.ctx, ast.Store)
            for n in ast.walk(cls)
        )

    def visit(node: ast.AST, cls: ast.ClassDef | None) -> None:
        if isinstance(node, ast.ClassDef):
            cls = node
        if isinstance(node, ast.Attribute) and node.attr in SEGMENT_VIEWS:
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not on_self and not (cls is not None and owns(cls, node.attr)):
                found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, cls)

    visit(tree, None)
    return found


def test_the_scan_finds_a_header_poked_from_outside(tmp_path):
    src = tmp_path / "poke.py"
    src.write_text(
        "class Owner:\n"
        "    def __init__(self):\n        self._hdr = [0]\n"
        "    @classmethod\n    def create(cls):\n        o = cls(); o._hdr[0] = 1; return o\n"
        "def outsider(state):\n    state._hdr[0] = 2\n"
    )
    assert _outside_segment_access(src) == [(8, "state._hdr")]


def test_each_shared_buffer_is_laid_out_by_its_owner_alone():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        found += [
            f"{rel}:{line} {expr}" for line, expr in _outside_segment_access(path) if (rel, expr) not in KNOWN_OUTSIDE
        ]
    assert not found, "shared-memory header words reached from outside their owner class: " + ", ".join(found)
