"""Functions a reader can hold (issue 41, item 5): across src/nonstop, bench/ included, at most 10
functions run over 80 lines and at most 10 take more than 8 parameters (``self``/``cls`` not counted;
``*args`` and ``**kwargs`` count one each).

The few left wide are so on purpose: the per-tick appends and publishes (a grouped argument would be
built every tick), `make_atari` (its signature lists the env's arguments) and `FillScheduler` (its
keywords are the user's ``--scheduler-arg`` keys).
"""

from __future__ import annotations

import ast
from pathlib import Path

import nonstop

SRC = Path(nonstop.__file__).parent
MAX_LINES, MAX_PARAMS, MAX_OVER = 80, 8, 10


def _measure(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(lines, parameters) of one function, as issue 41 counts them."""
    a = node.args
    params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    named = a.posonlyargs + a.args
    if named and named[0].arg in ("self", "cls"):
        params -= 1
    return (node.end_lineno or node.lineno) - node.lineno + 1, params


def _functions() -> list[tuple[str, str, int, int]]:
    """(module, name, lines, parameters) of every function and method under src/nonstop."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((str(path.relative_to(SRC)), node.name, *_measure(node)))
    return out


def test_the_measure_counts_parameters_and_lines_as_the_issue_does() -> None:
    tree = ast.parse("class A:\n    def f(self, a, /, b, *c, d, **e):\n        pass\n\n\ndef g(x, *, y):\n    pass\n")
    found = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    method, function = found["f"], found["g"]
    assert _measure(method) == (2, 5)  # a, b, *c, d, **e: self not counted
    assert _measure(function) == (2, 2)


def test_at_most_ten_functions_run_over_80_lines() -> None:
    long = sorted((lines, f"{module}:{name}") for module, name, lines, _ in _functions() if lines > MAX_LINES)
    assert len(long) <= MAX_OVER, f"{len(long)} functions over {MAX_LINES} lines: {long[::-1]}"


def test_at_most_ten_functions_take_more_than_8_parameters() -> None:
    wide = sorted((params, f"{module}:{name}") for module, name, _, params in _functions() if params > MAX_PARAMS)
    assert len(wide) <= MAX_OVER, f"{len(wide)} functions take more than {MAX_PARAMS} parameters: {wide[::-1]}"


def test_the_measure_sees_the_whole_package() -> None:
    modules = {module for module, *_ in _functions()}
    assert {"learning/learners.py", "bench/nstar.py", "realtime/ticklog.py"} <= modules
