"""docs/your-model.md: each example is a saved script this test runs as the page shows it, and each
figure the page quotes is checked against that run.

Tolerances (these are wall-clock runs on a shared machine, so a fresh run differs from the page's):
inaction within 2 percentage points where the page quotes under 5 % (the page's own figure for the
batching route must be at most 1 %: `test_the_page_shows_a_run_of_each_example`); for the routes the
page shows failing, what the page claims: the run fails too (at least 5 % inaction). How far such a
route fails is not a property of the code: τ_θ sits a hair above a whole number of ticks, where the
overhead lands against the tick boundary differs between machines, and the workers' phases drift
together or apart as the run goes (8 % and 55 % on the CI machine, 25 to 32 % on the one the page
was written on, each run with the same delay, 4 ticks); delay within 2 ticks (3 for the batching route, whose τ_θ
spans two batches); N_I (and lanes) within 3 of the page's. A run outside them is repeated once (a
load spike on a shared machine stretches every τ_θ of a wall-clock run); the second must agree.
The keys table is checked exactly against what a summary has.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from doc_commands import ROOT

PAGE = ROOT / "docs" / "your-model.md"
FIGURES = re.compile(
    r"(?:N_I (?P<n>\d+)|lanes \[(?P<lanes>[\d, ]+)\]).*?inaction(?: \(worst world\))? "
    r"(?P<inaction>[\d.]+)%, delay (?P<delay>[\d.]+) ticks"
)


def page_runs() -> list[tuple[str, str]]:
    """Each ```bash command that runs an examples/your_model_* script, with the ```text line after it."""
    text = PAGE.read_text()
    pairs = re.findall(
        r"```bash\n(PYTHONPATH=src python examples/your_model_\S+[^\n]*)\n```\s*```text\n([^\n]+)\n```", text
    )
    return pairs


def figures(line: str) -> dict[str, float]:
    m = FIGURES.search(line)
    assert m, f"no figures in {line!r}"
    n = [int(x) for x in (m["lanes"] or m["n"]).split(",")]
    return {"n": max(n), "inaction": float(m["inaction"]), "delay": float(m["delay"])}


def test_the_page_shows_a_run_of_each_example() -> None:
    scripts = {shlex.split(cmd)[2] for cmd, _ in page_runs()}
    assert scripts == {
        "examples/your_model_torch.py",
        "examples/your_model_callable.py",
        "examples/your_model_batched.py",
    }
    assert all(figures(line) for _, line in page_runs())
    batched = [figures(line) for cmd, line in page_runs() if cmd.endswith("your_model_batched.py")]
    assert batched and batched[0]["inaction"] <= 1.0  # the route the page recommends: at most 1 % inaction


def test_the_page_lists_every_key_a_summary_has() -> None:
    from nonstop import Session
    from nonstop.policies import ConstantPolicy, Constant, LatencyPolicy
    from nonstop.inference.workers import InferencePool

    with Session("theory/inaction", clock="virtual", seed=0) as world:
        policy = lambda i: LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(2 / 60))  # noqa: E731
        with InferencePool(world, policy, "exp_time", n_inference=2):
            world.run_for(1.0)
    keys = set(world.tick_log.summary(warmup_ticks=10))
    table = PAGE.read_text().split("| key | what it is |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"`([a-z_0-9]+)`", "\n".join(line.split("|")[1] for line in table.splitlines()[2:])))
    assert keys == listed, (
        f"on the page, not in a summary: {sorted(listed - keys)}; in a summary, not on the page: {sorted(keys - listed)}"
    )
    assert "warmup_ticks" in PAGE.read_text()


@pytest.mark.slow
@pytest.mark.wall
@pytest.mark.parametrize(
    "command,shown", page_runs(), ids=lambda v: v.split("examples/")[-1] if "examples/" in v else ""
)
def test_each_example_runs_and_gives_the_pages_figures(command: str, shown: str) -> None:
    problems = _compare_a_run(command, shown)
    if problems:  # a load spike on a shared machine stretches every τ_θ of a wall-clock run: one more try
        problems = _compare_a_run(command, shown)
    assert not problems, problems


def _compare_a_run(command: str, shown: str) -> list[str]:
    """Run the page's command; what of its figures lies outside the tolerances (none: it agrees)."""
    argv = shlex.split(command)[1:]  # PYTHONPATH=src: the test's own environment has it
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    human, last = done.stdout.strip().splitlines()[-2:]
    data = json.loads(last)
    page, run = figures(shown), figures(human)
    worst = data.get("inaction_fraction_worst", data.get("inaction_fraction"))
    assert abs(run["inaction"] - 100 * worst) < 0.01  # the printed line is the JSON's figure
    problems = []
    fails = page["inaction"] >= 5  # a route the page shows failing
    if (not fails and abs(run["inaction"] - page["inaction"]) > 2.0) or (fails and run["inaction"] < 5.0):
        problems.append(f"inaction: page {shown!r}, run {human!r}")
    if abs(run["delay"] - page["delay"]) > (3.0 if "batched" in command else 2.0):
        problems.append(f"delay: page {shown!r}, run {human!r}")
    if abs(run["n"] - page["n"]) > 3:
        problems.append(f"N_I: page {shown!r}, run {human!r}")
    return problems
