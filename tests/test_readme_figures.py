"""Every figure README.md quotes from a run is produced here by the command the README names, and
compared with the page: exactly where the run is deterministic (the simulated clock), within a stated
tolerance where it is not (the wall clock, and counts that grow as tests are added).

* the test counts ("leaves out the ~N slowest tests and runs the other ~M"): `pytest --collect-only -m
  slow` at test time; each within 25 % of what collection finds now (other work adds tests);
* the demo's table (sequential vs staggered on realtime Boxing, wall clock), from `nonstop demo` as
  the README runs it: N_I exactly, τ_I and actions per second within 5 %, inaction
  within 3 points, delay within 1 tick (a machine that cannot keep pace makes the demo fall back to
  the virtual clock, whose delay is one tick less);
* the demo's learning ("episode return A → B staggered, C → D sequential"), from the same run: part
  two runs on the virtual clock, so these are exact; and its time ("about half a minute") within a
  factor of 6;
* the quick start's CartPole run ("ends at a recent return of R"): exactly; its time ("about N
  minutes on 2 cores shared with other work") from a tenth of N (a quiet machine) to 3 N.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from doc_commands import ROOT

README = (ROOT / "README.md").read_text()
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.slow
def test_the_test_counts_are_about_what_collection_finds() -> None:
    m = re.search(r"leaves\s+out\s+the\s+~([\d,]+)\s+slowest\s+tests\s+and\s+runs\s+the\s+other\s+~([\d,]+)", README)
    assert m, "the README's sentence on the test counts moved: update this test"
    said_slow, said_other = _number(m[1]), _number(m[2])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", done.stdout)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    slow, other = int(found[1]), int(found[3])
    assert abs(said_slow - slow) <= 0.25 * slow, (said_slow, slow)
    assert abs(said_other - other) <= 0.25 * other, (said_other, other)


def _table_rows(text: str) -> dict[str, list[str]]:
    """Rows of the last scheduler table in ``text``: name -> its cells."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()] if "│" in line else line.split()
        if cells and cells[0] in ("sequential", "exp_time"):
            rows[cells[0]] = cells
    return rows


@pytest.mark.slow
@pytest.mark.wall
def test_the_demo_prints_what_the_readme_says(tmp_path) -> None:
    """`nonstop demo` as the README runs it: its table (within the tolerances above), its learning
    returns (exact: part two runs on the simulated clock) and its time ("about half a minute":
    within a factor of 6, for a loaded machine). A table outside the tolerances is run once more, as
    the other wall-clock figure tests do (a load spike stretches every τ_θ of a wall-clock run); the
    second must agree."""
    shown = _table_rows(README.split("(abridged):", 1)[1].split("```", 2)[1])
    assert set(shown) == {"sequential", "exp_time"}
    m = re.search(
        r"episode\s+return\s+([\d,]+)\s+→\s+([\d,]+)\s+staggered,\s+([\d,]+)\s+→\s+([\d,]+)\s+sequential", README
    )
    assert m, "the README's sentence on the demo's learning moved: update this test"
    assert "and run the default job (about half a minute after the install" in README
    stdout, took, problems = _run_the_demo(tmp_path / "d", shown)
    if problems:
        stdout, took, problems = _run_the_demo(tmp_path / "again", shown)
    assert not problems, problems
    got = {name: (a, b) for name, a, b in re.findall(r"(staggered|sequential): episode return (\d+) → (\d+)", stdout)}
    assert got == {"staggered": (m[1], m[2]), "sequential": (m[3], m[4])}, (got, m.groups())
    assert took <= 6 * 30, took


def _run_the_demo(out: Path, shown: dict[str, list[str]]) -> tuple[str, float, list[str]]:
    """Run `nonstop demo`; its stdout, its seconds, and each table row outside the tolerances."""
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "nonstop", "demo", "--out", str(out)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )
    took = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _table_rows(done.stdout)
    problems = []
    for name, page in shown.items():
        run = rows[name]  # scheduler, N_I, τ_I, τ_I CV, inaction, delay, acts/s, ...
        n_i, tau_i, inaction, delay, acts = page[1:6]
        if not (
            run[1] == n_i
            and abs(_number(run[2]) - _number(tau_i)) <= 0.05 * _number(tau_i)
            and abs(_number(run[4].rstrip("%")) - _number(inaction.rstrip("%"))) <= 3.0
            and abs(_number(run[5]) - _number(delay)) <= 1.0
            and abs(_number(run[6]) - _number(acts)) <= 0.05 * _number(acts)
        ):
            problems.append(f"{name}: README {page}, run {run}")
    return done.stdout, took, problems


@pytest.mark.slow
def test_the_quick_starts_cartpole_run_ends_where_the_readme_says(tmp_path) -> None:
    m = re.search(r"about ([\d.]+) minutes on 2 cores.*?ends at a recent return of ([\d.]+)", README, flags=re.DOTALL)
    assert m, "the README's sentence on the CartPole run moved: update this test"
    minutes, recent = float(m[1]), float(m[2])
    command = "nonstop train --env CartPole --seconds 2000 --out runs/cartpole"
    assert command in README
    out = tmp_path / "cartpole"
    argv = command.split()[1:-1] + [str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "nonstop", *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert round(summary["recent_return"], 2) == recent, summary["recent_return"]  # the simulated clock: exact
    assert minutes / 10 <= summary["wall_s"] / 60 <= minutes * 3, summary["wall_s"]  # load moves it, most of all down
