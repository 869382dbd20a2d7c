"""Every figure README.md quotes from a run is produced here by the command the README names, and
compared with the page: exactly where the run is deterministic (the simulated clock), within a stated
tolerance where it is not (the wall clock, and counts that grow as tests are added).

* the test counts ("leaves out the ~N slowest tests and runs the other ~M"): this session's collection
  where it is the whole suite (CI's), else `pytest --collect-only -m slow` at test time; each within 25 %
  of what collection finds now (other work adds tests);
* the demo's table (sequential vs staggered on realtime Boxing, wall clock), from `nonstop demo` as
  the README runs it: N_I exactly, τ_I and actions per second within 5 %, inaction
  within 3 points, delay within 1 tick (a machine that cannot keep pace makes the demo fall back to
  the virtual clock, whose delay is one tick less);
* the demo's learning ("episode return A → B staggered, C → D sequential"), from the same run: part
  two runs on the virtual clock, so these are exact; and its time ("about half a minute") within a
  factor of 6;
* the quick start's CartPole run ("ends at a recent return of R"): exactly; its time ("about N
  minutes on 2 cores shared with other work") from a tenth of N (a quiet machine) to 3 N.

"What you can run", the table of one command a row (at most 25 lines: one screen), row by row:

* the demo's and CartPole's figures are the ones the quick start quotes below it, which the tests above
  check against a run (so the table is compared with the page at once, and with a run by them);
* SAC on HalfCheetah is the settings nonstop ships for it (`nonstop/learning/hyperparams/sac.yml`): the
  row's command and figures are that entry's (its bench, 3 seeds of 30,000 SAC updates a side, takes
  hours on 2 cores: too long for CI, so the test holds the row to the shipped record of it);
* the team self-play (docs/multi-agent.md's run) and your own world run on the simulated clock: their
  command as the row shows it, and its figure exactly (your own world's from `examples/`, where its
  module is, and docs/your-model.md quotes the same run);
* the LLM and the bot (`examples/two_speeds.py`, the wall clock): the slow agent's inaction within 1
  point, run once more where a load spike puts it outside; the bot's between the floor a 40 ms call
  allows at 60 Hz (one action per 40 ms, on at most 41.7 % of the ticks: 58.3 %; CI's run gave 60.4 %) and the page's "up to" figure for a
  loaded machine (72.4 % quiet, 89.8 % at a load average of 18 on this 2-core machine).
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
#: the README's table of what you can run, up to the next section
TABLE = README.split("## What you can run", 1)[1].split("\n## ", 1)[0]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _whole_collection(request: pytest.FixtureRequest) -> list[pytest.Item] | None:
    """Every test of the suite as this session collected it, those `-m` left out included, where the
    session collected the whole suite (`python -m pytest -q`, or either of CI's two passes, `-m "not wall"`
    and `-m wall`); None where it was given paths, names, deselections or last failures."""
    from conftest import DESELECTED

    o = request.config.option
    chosen = o.keyword or o.deselect or o.ignore or o.ignore_glob or getattr(o, "lf", False)
    if request.config.args_source != pytest.Config.ArgsSource.TESTPATHS or chosen:
        return None
    return [*request.session.items, *request.config.stash.get(DESELECTED, [])]


@pytest.mark.slow
def test_the_test_counts_are_about_what_collection_finds(request) -> None:
    """The counts from this session's own collection where it holds the whole suite (CI's run: no second
    collection of ~2,000 tests), else from `pytest --collect-only -m slow` in a child."""
    m = re.search(r"leaves\s+out\s+the\s+~([\d,]+)\s+slowest\s+tests\s+and\s+runs\s+the\s+other\s+~([\d,]+)", README)
    assert m, "the README's sentence on the test counts moved: update this test"
    said_slow, said_other = _number(m[1]), _number(m[2])
    items = _whole_collection(request)
    if items is not None:
        slow = sum(1 for item in items if item.get_closest_marker("slow") is not None)
        other = len(items) - slow
    else:
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


#: the README's first command after the install, run here as written (its run directory aside):
#: tests/test_doc_commands.py lists it as run here (CHECKED_HERE)
DEMO = "nonstop demo"


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
    out = tmp_path / "d"
    stdout, took, problems = _run_the_demo(out, shown)
    if problems:
        out = tmp_path / "again"
        stdout, took, problems = _run_the_demo(out, shown)
    assert not problems, problems
    got = {name: (a, b) for name, a, b in re.findall(r"(staggered|sequential): episode return (\d+) → (\d+)", stdout)}
    assert got == {"staggered": (m[1], m[2]), "sequential": (m[3], m[4])}, (got, m.groups())
    assert took <= 6 * 30, took
    _shows_learning(out, stdout)


def _shows_learning(out: Path, stdout: str) -> None:
    """Within its training budget the demo's return curves rise, the staggered one far above the
    sequential one (it acts at every tick, the sequential agent at one in six): the curves of the
    run above, so no second demo trains only to draw them."""
    from nonstop.commands.demo import learning_curve

    assert "Both agents learn" in stdout
    _, stag = learning_curve(out / "train-staggered")
    _, seq = learning_curve(out / "train-sequential")
    assert len(stag) >= 6 and len(seq) >= 6
    first, last = stag[:2], stag[-3:]
    assert min(last) > 2 * max(first), stag  # staggered: learned, not just acting more
    assert sum(seq[-3:]) / 3 > 1.5 * sum(seq[:2]) / 2, seq  # sequential learns too, slowly
    assert sum(last) / 3 > 2.5 * sum(seq[-3:]) / 3, (stag, seq)


def _run_the_demo(out: Path, shown: dict[str, list[str]]) -> tuple[str, float, list[str]]:
    """Run `nonstop demo`; its stdout, its seconds, and each table row outside the tolerances."""
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *DEMO.split(), "--out", str(out)],
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


# ------------------------------------------------------------------ "What you can run": one command a row


def _rows() -> dict[str, tuple[str, str]]:
    """The table's rows: what → (its command, what it reached)."""
    rows = {}
    for line in TABLE.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            rows[cells[0]] = (cells[1].split("`")[1], cells[2])
    return rows


ROWS = _rows()


def _row(what: str) -> tuple[str, str]:
    assert what in ROWS, f"the README's table has no row {what!r}: update this test"
    return ROWS[what]


def test_the_table_is_one_screen_of_one_command_a_row() -> None:
    assert len(TABLE.strip().splitlines()) <= 25, "the table and its lines must fit one screen"
    assert set(ROWS) == {
        "a slow model on Atari",
        "DQN on CartPole",
        "SAC on HalfCheetah",
        "HalfCheetah behind a slow model",
        "team self-play in a battle",
        "an LLM and a bot on the server",
        "your own world",
    }
    for command, reached in ROWS.values():
        assert "&&" not in command and ";" not in command, command
        assert re.search(r"\d", reached), f"{command}: no figure in {reached!r}"


def test_the_demo_and_cartpole_rows_quote_the_runs_the_quick_start_checks() -> None:
    """The two rows' figures are the quick start's, which the slow tests above check against a run."""
    command, reached = _row("a slow model on Atari")
    assert command == "nonstop demo"
    shown = _table_rows(README.split("(abridged):", 1)[1].split("```", 2)[1])
    m = re.search(
        r"6 ticks slow .*? ([\d.]+) % of the ticks to β alone, ([\d.]+) % staggered over (\d+) workers", reached
    )
    assert m, reached
    assert (m[1] + "%", m[2] + "%") == (shown["sequential"][3], shown["exp_time"][3])  # name, N_I, τ_I, inaction
    assert m[3] == shown["exp_time"][1] and round(float(shown["sequential"][2])) == 6
    command, reached = _row("DQN on CartPole")
    assert command == "nonstop train --env CartPole --seconds 2000 --out runs/cartpole"
    paragraph = re.search(r"ends at a recent return of ([\d.]+)", README)
    assert paragraph and f"a recent return of {paragraph[1]} of 500" in reached, reached


def _train(command: str, out: Path, cwd: Path = ROOT) -> dict:
    """Run a row's `nonstop train` into ``out``; its summary.json."""
    argv = command.split()[1:]
    argv[argv.index("--out") + 1] = str(out)
    done = subprocess.run(
        [sys.executable, "-m", "nonstop", *argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=7200
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


#: the SAC row's figure: nonstop's return, then Stable-Baselines3's, each a mean and its interval
_SAC_FIGURE = r"return of (.+? \[.+?\]) over 3 seeds at ([\d,]+) ticks, beside Stable-Baselines3's (.+? \[.+?\])"


def test_the_sac_row_is_the_shipped_halfcheetah_entry() -> None:
    """The row quotes what `nonstop/learning/hyperparams/sac.yml` ships for HalfCheetah-v5 (the settings
    `nonstop train --algo sac --env HalfCheetah-v5` uses): its command and the figure it reached."""
    from nonstop.learning.hyperparams import world_entry

    command, reached = _row("SAC on HalfCheetah")
    entry = world_entry("sac", "HalfCheetah-v5")
    assert entry is not None and entry.command == command and entry.reached
    m = re.search(_SAC_FIGURE, reached)
    assert m, reached
    assert f"{m[1]} at {m[2]} ticks" in entry.reached and f"reached {m[3]}" in entry.reached, entry.reached


def test_the_delay_row_is_the_shipped_dmsac_entry() -> None:
    """The delay row quotes what `nonstop/learning/hyperparams/dmsac.yml` ships for HalfCheetah-v5: its command
    and figure (3 runs of 100,000 ticks: about 40 minutes on 2 quiet cores, too long for CI), and its share
    is that figure over the SAC row's."""
    from nonstop.learning.hyperparams import world_entry

    command, reached = _row("HalfCheetah behind a slow model")
    entry = world_entry("dmsac", "HalfCheetah-v5")
    assert entry is not None and entry.command == command and entry.reached
    m = re.search(r"return of (([\d,]+) \[.+?\]) over 3 seeds at ([\d,]+) ticks, (\d+) % of", reached)
    assert m, reached
    assert f"{m[1]} at {m[3]} ticks" in entry.reached, entry.reached
    sac = re.search(r"return of ([\d,]+) ", _row("SAC on HalfCheetah")[1])
    assert sac and round(100 * _number(m[2]) / _number(sac[1])) == int(m[4])
    bpql = world_entry("bpql", "HalfCheetah-v5")  # the row's aside: BPQL's shipped figure, and its share
    b = re.search(r"BPQL: ([\d,]+), (\d+) %", reached)
    assert bpql is not None and b and f"of {b[1]} [" in bpql.reached
    assert round(100 * _number(b[1]) / _number(sac[1])) == int(b[2])


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 2 minutes on a quiet 2-core machine, more under load
def test_team_self_play_in_a_battle_wins_what_the_row_and_docs_multi_agent_say(tmp_path) -> None:
    """The row's run is docs/multi-agent.md's on the default map: 81 against 81 agents, about 3 minutes
    (about 7 ms a tick of self-play)."""
    command, reached = _row("team self-play in a battle")
    assert (
        command
        == "nonstop train --env multi/battle --env-arg max_cycles=300 --env-arg minimap_mode=true --self-play --clock virtual --latency 2t --seconds 1200 --lr 1e-3 --batch-size 64 --epsilon-ticks 6000 --learning-starts 1000 --target-update 250 --out runs/battle162"
    )
    assert command in (ROOT / "docs" / "multi-agent.md").read_text().replace(" \\\n  ", " ")
    m = re.search(r"won (\d+) % of (\d+) episodes against a random team after ([\d,]+) ticks", reached)
    assert m, reached
    words = command.split()
    assert float(words[words.index("--seconds") + 1]) * 20 == _number(m[3])  # battle ticks at 20 Hz
    summary = _train(command, tmp_path / "battle")
    assert summary["judged_episodes"] == int(m[2])
    assert round(100 * summary["judged_win_rate"]) == int(m[1]), summary["judged_win_rate"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 4 minutes at a load average of 12, 10 at 17
def test_your_own_world_learns_what_the_row_and_docs_your_model_say(tmp_path) -> None:
    command, reached = _row("your own world")
    m = re.search(r"a recent return of (−[\d.]+) from random play's (−[\d.]+)", reached)
    assert m, reached
    page = (ROOT / "docs" / "your-model.md").read_text()
    assert command in page and f"recent return of {m[1]}" in page, "docs/your-model.md quotes the same run"
    summary = _train(command, tmp_path / "target", cwd=ROOT / "examples")  # myworlds.py is found beside it
    assert summary["updates"] > 0
    assert round(summary["recent_return"], 2) == _number(m[1].replace("−", "-")), summary["recent_return"]


def _two_speeds() -> dict[str, tuple[float, float]]:
    """`examples/two_speeds.py`'s table: agent → (inaction %, mean delay in ticks)."""
    done = subprocess.run(
        [sys.executable, "examples/two_speeds.py"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^(fast scripted bot|slow agent).*?([\d.]+)%\s+([\d.]+) ticks", done.stdout, flags=re.M)
    return {name: (float(inaction), float(delay)) for name, inaction, delay in rows}


@pytest.mark.slow
@pytest.mark.wall
def test_an_llms_pace_and_a_bots_on_the_server_leave_the_rows_ticks_to_beta() -> None:
    command, reached = _row("an LLM and a bot on the server")
    assert command == "python examples/two_speeds.py"
    m = re.search(
        r"leaves ([\d.]+) % of Boxing's ticks to β, a 40 ms bot ([\d.]+) % \(up to ([\d.]+) % under load\)", reached
    )
    assert m, reached
    slow, bot, loaded = float(m[1]), float(m[2]), float(m[3])
    # the floor: a 40 ms decision acts at most once per 40 ms, so on at most (1/60 s)/(40 ms) of 60 Hz ticks
    floor = 100 * (1 - (1 / 60) / 0.040)
    assert floor <= bot <= loaded < slow

    def agrees(run: dict[str, tuple[float, float]]) -> bool:
        return abs(run["slow agent"][0] - slow) <= 1.0 and floor - 0.5 <= run["fast scripted bot"][0] <= loaded

    run = _two_speeds()
    if not agrees(run):
        run = _two_speeds()
    assert agrees(run), (run, slow, bot)
