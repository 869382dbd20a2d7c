"""`nonstop sweep`: the paper's learning experiments as one command (issue 10, part 2).

The pure parts (which cells a budget runs, the declared delays, the confidence intervals) are
checked against hand-computed values; the command itself runs its ``tiny`` budget end to end on
the virtual clock: it must show the paper's effect (staggered beats sequential), resume, extend,
and stop cleanly on SIGTERM."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nonstop.studies.sweep import (
    BUDGETS,
    GAMES,
    PAPER_SIZES,
    aggregate,
    declared_delays,
    SweepPlan,
    plan_cells,
    t_quantile_95,
)
from nonstop.studies.cellrun import cell_state

pytest.importorskip("torch")

PAIR = ("staggered", "sequential")


def _plan(budget: str = "small", **kw):
    args = dict(
        games=None,
        sizes=None,
        seeds=None,
        episodes=None,
        interactions=PAIR,
        latency_source="paper",
        latency_overrides={},
        available=lambda g, a: (False, "no ROM here"),
    )
    args.update(kw)
    available = args.pop("available")
    return plan_cells(BUDGETS[budget], SweepPlan(**args), available)


def test_the_paper_sizes_declare_the_authors_inference_times():
    assert declared_delays([1, 7, 29, 98], "paper", game_boy=False, overrides={}) == {
        1: "5t",
        7: "8t",
        29: "70t",
        98: "599t",
    }
    assert declared_delays([98], "paper", game_boy=True, overrides={})[98] == "596t"  # 59.7275 Hz
    with pytest.raises(ValueError, match="k=3"):
        declared_delays([3], "paper", game_boy=False, overrides={})


def test_small_budget_cells_and_their_train_commands(tmp_path):
    cells, notes = _plan("small")
    per_game = {g: [c for c in cells if c.game == g] for g in ("delay-world", "Boxing")}
    assert len(per_game["delay-world"]) == 4 * 3 * 2 and len(per_game["Boxing"]) == 4 * 1 * 2
    assert {c.delay for c in per_game["Boxing"]} == {f"{PAPER_SIZES[k][1]}t" for k in PAPER_SIZES}
    staggered = next(c for c in per_game["Boxing"] if c.interaction == "staggered" and c.k == 29)
    argv = staggered.train_argv(tmp_path / "x")
    # the paper's Atari setting: Algorithm 1, one update per 4 transitions, the declared 70-tick model, a k = 1 learner
    assert argv[argv.index("--scheduler") + 1] == "max_time" and argv[argv.index("--latency") + 1] == "70t"
    assert math.isclose(float(argv[argv.index("--updates-per-transition") + 1]), 1 / 4) and "--tau-l" not in argv
    assert "paper-atari" in argv and "--k" not in argv
    sequential = next(c for c in per_game["Boxing"] if c.interaction == "sequential" and c.k == 29)
    assert sequential.train_argv(tmp_path)[sequential.train_argv(tmp_path).index("--scheduler") + 1] == "sequential"
    assert len({c.name for c in cells}) == len(cells)  # one directory per cell


def test_rom_games_are_left_out_with_a_note_or_refused_when_named():
    cells, notes = _plan("paper")
    assert {c.game for c in cells} == {"Boxing", "Krull", "NameThisGame"}
    assert any("Tetris left out: no ROM here" in n for n in notes)
    with pytest.raises(FileNotFoundError, match="Tetris: no ROM here"):
        _plan("paper", games=["Tetris"])


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(games=["Pong2"]), "unknown game 'Pong2'"),
        (dict(interactions=("staggered", "lockstep")), "unknown interaction 'lockstep'"),
        (dict(seeds=0), "--seeds must be >= 1"),
        (dict(episodes=0), "--episodes must be >= 1"),
        (dict(game_args={"Pacman": ["x=1"]}), "unknown game 'Pacman' in --game-arg"),
    ],
)
def test_bad_plans_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _plan(**kw)


def test_pokemon_needs_a_start_state(monkeypatch):
    import nonstop.envs.gameboy as gb
    from nonstop.studies import sweep

    monkeypatch.setattr(gb, "find_rom", lambda game, rom=None: "/roms/red.gb")
    monkeypatch.setattr(gb, "pyboy_problem", lambda: "")
    ok, why = sweep.env_available("PokemonBattle", [])
    assert not ok and "--game-arg PokemonBattle:state=PATH" in why
    assert sweep.env_available("PokemonBattle", ["state=b.state"]) == (True, "")
    cells, _ = _plan(
        "paper", games=["PokemonBattle"], game_args={"PokemonBattle": ["state=b.state"]}, available=sweep.env_available
    )
    assert cells and all("state=b.state" in c.train_argv(Path("x")) for c in cells)


def test_a_rom_given_as_a_game_arg_is_the_one_checked(tmp_path):
    from nonstop.studies import sweep

    ok, why = sweep.env_available("Tetris", [f"rom={tmp_path / 'tetris.gb'}"])
    assert not ok and "tetris.gb" in why and "--game-arg Tetris:rom=PATH" in why


def test_confidence_intervals_are_student_t_over_seeds():
    rng = np.random.default_rng(3)
    values = rng.normal(10, 2, size=5)
    rows = [
        {
            "game": "g",
            "k": 1,
            "params": "1M",
            "delay": "5t",
            "interaction": "staggered",
            "mean_return": float(v),
            "inaction_fraction": 0.1,
            "delay_mean_ticks": 5.0,
            "complete": True,
        }
        for v in values
    ]
    rows.append(dict(rows[0], mean_return=None, complete=False))  # a cell with no episode yet: not in the mean
    (agg,) = aggregate(rows)
    assert agg["seeds"] == 5 and agg["cells"] == 6 and agg["complete"] == 5
    assert math.isclose(agg["mean_return"], values.mean())
    assert math.isclose(agg["ci95"], t_quantile_95(4) * values.std(ddof=1) / math.sqrt(5))
    assert round(t_quantile_95(4), 3) == 2.776
    one = aggregate(rows[:1])[0]
    assert one["ci95"] is None  # one seed: no interval, rather than a made-up one


#: t_{0.975, df} from published tables (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
KNOWN_T95 = {1: 12.706, 5: 2.571, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize("scipy_installed", [True, False])
def test_t_quantiles_match_published_values_with_or_without_scipy(scipy_installed, monkeypatch):
    """The bands' t-quantile: the table it replaced gave 1.96 for df 31-59 (2-4 % narrow)."""
    if scipy_installed:
        pytest.importorskip("scipy.stats")
    else:
        monkeypatch.setitem(sys.modules, "scipy.stats", None)  # `from scipy.stats import t` raises ImportError
    for df, published in KNOWN_T95.items():
        assert round(t_quantile_95(df), 3) == published, df
    assert 2.021 < t_quantile_95(35) < 2.042  # between its neighbours, not the normal's 1.96
    with pytest.raises(ValueError, match="integer >= 1"):
        t_quantile_95(0)


def test_the_t_quantile_without_scipy_is_scipys():
    stats = pytest.importorskip("scipy.stats")
    from nonstop.metrics.tquantile import _t_quantile_exact

    for p in (0.6, 0.9, 0.975, 0.999):
        for df in (1, 2, 3, 7, 31, 59, 200, 10_000):
            assert math.isclose(_t_quantile_exact(p, df), stats.t.ppf(p, df), rel_tol=1e-9), (p, df)


def _sweep(tmp_path: Path, *extra: str, **popen) -> subprocess.Popen:
    env = dict(os.environ, COLUMNS="160")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nonstop.cli",
            "sweep",
            "--budget",
            "tiny",
            "--out",
            str(tmp_path / "sw"),
            "--jobs",
            "2",
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **popen,
    )


@pytest.mark.slow
def test_tiny_sweep_end_to_end_shows_the_paper_effect_resumes_and_extends(tmp_path):
    proc = _sweep(tmp_path)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["cells"] == 4 and doc["cells_complete"] == 4 and doc["failed"] == []
    by = {(r["k"], r["interaction"]): r for r in doc["results"]}
    for k in (1, 29):
        # acting at every tick earns more than acting once per inference, at the same delay
        assert by[(k, "staggered")]["mean_return"] > 2 * max(by[(k, "sequential")]["mean_return"], 1.0)
        assert by[(k, "sequential")]["inaction_fraction"] > 0.75 and by[(k, "staggered")]["inaction_fraction"] < 0.15
    assert by[(29, "staggered")]["delay_mean_ticks"] == pytest.approx(70, abs=1)
    sw = tmp_path / "sw"
    assert (sw / "sweep.png").stat().st_size > 10_000 and (sw / "results.csv").exists() and (sw / "cells.csv").exists()
    cell_dirs = sorted((sw / "cells").iterdir())
    assert len(cell_dirs) == 4 and all((d / "summary.json").exists() for d in cell_dirs)

    again = _sweep(tmp_path)  # everything done: nothing reruns, the tables are rebuilt
    out2, err2 = again.communicate(timeout=120)
    assert again.returncode == 0, err2
    assert "4 done" in err2 and json.loads(out2.strip().splitlines()[-1])["results"] == doc["results"]

    more = _sweep(tmp_path, "--episodes", "3")  # a longer budget resumes every cell from its checkpoint
    out3, err3 = more.communicate(timeout=240)
    assert more.returncode == 0, err3
    assert "4 to resume" in err3
    for d in cell_dirs:
        rows = (d / "episodes.csv").read_text().strip().splitlines()
        assert len(rows) - 1 >= 3
        assert len(list(d.glob("ticklog-before-*"))) == 1  # the first segment was kept beside the resumed one


def _children_of(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and " train " in cmd:
                pids.append(int(entry.name))
    return pids


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to find the cells' processes")
def test_sigterm_checkpoints_the_running_cells_and_leaves_nothing_running(tmp_path):
    proc = _sweep(tmp_path, "--episodes", "40")
    marker = str(tmp_path / "sw")
    deadline = time.monotonic() + 180  # a cell's process imports torch first: slow beside CI's other worker

    def started() -> bool:  # both cells wrote a progress row: their worlds run (they are not still importing)
        return 2 <= sum(
            len(p.read_text().splitlines()) >= 2 for p in (tmp_path / "sw" / "cells").glob("*/progress.csv")
        )

    while time.monotonic() < deadline and not started():
        time.sleep(0.2)
    # the signal must find both cells running, or the count below judges the machine's speed, not the sweep
    assert started(), "the two cells did not both write a progress row within 180 s"
    assert _children_of(marker), "no cell started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 143, err
    assert "run the same command again to resume" in err
    time.sleep(0.5)
    assert _children_of(marker) == []
    cells, _ = plan_cells(BUDGETS["tiny"], SweepPlan(episodes=40, interactions=PAIR))
    states = [cell_state(c, tmp_path / "sw" / "cells" / c.name) for c in cells]
    assert states.count("resume") >= 2  # the two that were running wrote their final checkpoints


def test_sweep_games_table_names_every_budget_game():
    for budget in BUDGETS.values():
        assert set(budget.games) <= set(GAMES)


def test_the_papers_settings_are_flags_with_its_defaults(tmp_path):
    """Appendix A: six Game Boy buttons, an Atari update per 4 transitions, 3 seeds; each a flag."""
    ok = lambda g, a: (True, "")  # noqa: E731 - a ROM "found" for the plan
    cells, _ = _plan("paper", games=["Tetris", "Boxing"], sizes=[1], available=ok)
    assert {c.seed for c in cells} == {0, 1, 2}  # "three random seeds: 0, 1, and 2"
    tetris = next(c for c in cells if c.game == "Tetris").train_argv(tmp_path)
    assert "action_set=paper" in tetris and float(tetris[tetris.index("--updates-per-transition") + 1]) == 1.0
    seven, _ = _plan("paper", games=["Tetris"], sizes=[1], available=ok, gb_actions=7)
    assert "action_set=paper" not in seven[0].train_argv(tmp_path)
    every8, _ = _plan("paper", games=["Boxing"], sizes=[1], available=ok, atari_learn_every=8)
    argv = every8[0].train_argv(tmp_path)
    assert float(argv[argv.index("--updates-per-transition") + 1]) == 1 / 8
    with pytest.raises(ValueError, match="--gb-actions"):
        _plan("paper", games=["Boxing"], available=ok, gb_actions=5)


def test_2xdeep_cells_declare_their_own_longer_delays_and_parallel_learning_is_figure_4s_baseline(tmp_path):
    cells, _ = _plan(
        "tiny", archs=("impala", "2xdeep"), deep_sizes=[0.75, 18.5], interactions=("staggered", "parallel_learning")
    )
    deep = {c.k: c for c in cells if c.arch == "2xdeep" and c.interaction == "staggered"}
    shallow = {c.k: c for c in cells if c.arch == "impala" and c.interaction == "staggered"}
    assert int(deep[0.75].delay[:-1]) > int(shallow[1].delay[:-1]) and int(deep[18.5].delay[:-1]) > int(
        shallow[29].delay[:-1]
    )
    assert "2xdeep" in deep[0.75].name and len({c.name for c in cells}) == len(cells)
    parallel = next(c for c in cells if c.interaction == "parallel_learning").train_argv(tmp_path)
    last = len(parallel) - 1 - parallel[::-1].index("--batch-size")  # argparse keeps the last
    assert parallel[last + 1] == str(33 * 32)  # the delay world's batch, 33x
    assert parallel[parallel.index("--scheduler") + 1] == "max_time"


def test_device_and_dtype_reach_every_cells_train(monkeypatch, tmp_path, capsys):
    """`sweep --device/--dtype` puts each cell's models there: the flags are on every cell's train
    command (a dry run shows the plan without starting any)."""
    import argparse

    import torch

    from nonstop.commands import sweep as sweep_command

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    args = argparse.Namespace(device="cuda", dtype="bf16")
    assert sweep_command._placement_args(args) == ("--device", "cuda", "--dtype", "bf16")
    assert sweep_command._placement_args(argparse.Namespace(device="cpu", dtype=None)) == ()


def test_delay_start_zeros_runs_the_authors_simulation(tmp_path):
    """``--delay-start zeros``: a staggered cell runs the authors' delay simulation (the policy on zero
    frames for the first d steps, every step an agent step), writing what the sweep reads; a sequential
    cell keeps nonstop's realtime cell; the cells are named apart."""
    import subprocess

    from nonstop.studies.delaysim import ZeroStartHistory
    from nonstop.studies.sweep import BUDGETS, SweepPlan, cell_result, plan_cells

    cells, _ = plan_cells(
        BUDGETS["tiny"],
        SweepPlan(sizes=[1], seeds=1, episodes=1, interactions=["staggered", "sequential"], delay_start="zeros"),
    )
    stag = next(c for c in cells if c.interaction == "staggered")
    seq = next(c for c in cells if c.interaction == "sequential")
    assert (
        stag.delay_start == "zeros" and seq.delay_start == "beta" and "zeros" in stag.name and "zeros" not in seq.name
    )
    argv = stag.argv(tmp_path / "cell")
    assert argv[1:3] == ["-m", "nonstop.studies.delaysim"] and argv[argv.index("--delay") + 1] == "5"
    argv[argv.index("p_minimax=0.97") + 2] = "max_steps=300"  # a short episode
    subprocess.run(argv, check=True, timeout=300)
    got = cell_result(stag, tmp_path / "cell")
    assert (
        got["complete"] and got["episodes"] == 1 and got["inaction_fraction"] == 0.0 and got["delay_mean_ticks"] == 5.0
    )
    history = ZeroStartHistory(3, np.ones(2))
    seen = []
    for step in range(5):
        seen.append(float(history.oldest()[0]))
        history.push(np.full(2, step + 2.0))
    assert seen == [0.0, 0.0, 0.0, 1.0, 2.0]  # o_{t−3}: zeros for the first 3 steps
    with pytest.raises(ValueError, match="--delay-start must be one of"):
        SweepPlan(sizes=[1], seeds=1, episodes=1, interactions=["staggered"], delay_start="ones")


def _plan_axes(**kw):
    base = dict(
        games=None,
        sizes=[1],
        seeds=2,
        episodes=1,
        interactions=("staggered",),
        latency_source="paper",
        latency_overrides={},
    )
    return plan_cells(BUDGETS["tiny"], SweepPlan(**{**base, **kw}))[0]


def test_scheduler_cells_act_with_each_scheduler_at_each_n_on_a_lognormal_latency_of_the_declared_mean(tmp_path):
    cells = _plan_axes(schedulers=("fill", "exp_time", "quantile_hold@0.9"), workers=("bound", "2x"), sigma=0.5)
    assert len(cells) == 2 * 3 * 2  # seeds x schedulers x N
    assert {(c.scheduler, c.workers) for c in cells} == {
        (s, n) for s in ("fill", "exp_time", "quantile_hold@0.9") for n in (5, 10)
    }  # the bound of a 5-tick mean is 5
    assert len({c.name for c in cells}) == len(cells)
    argv = next(c for c in cells if c.scheduler == "quantile_hold@0.9" and c.workers == 10).train_argv(tmp_path)
    at = argv.index("--scheduler")
    assert argv[at : at + 6] == [
        "--scheduler",
        "quantile_hold",
        "--scheduler-arg",
        "quantile=0.9",
        "--n-inference",
        "10",
    ]
    spec = argv[argv.index("--latency") + 1]
    median = float(spec.removeprefix("lognormal:").partition("t,")[0])
    assert spec.endswith(",0.5") and math.isclose(median * math.exp(0.5**2 / 2), 5.0, rel_tol=1e-4)  # mean 5 ticks
    fill = next(c for c in cells if c.scheduler == "fill").train_argv(tmp_path)
    assert "--scheduler-arg" not in fill  # fill is given no p: it starts from its prior and fits p from rewards
    plain = _plan_axes()  # without --schedulers: Algorithm 1 at its bound, the declared constant delay
    assert [c.scheduler for c in plain] == ["", ""] and plain[0].train_argv(tmp_path)[
        plain[0].train_argv(tmp_path).index("--latency") + 1
    ] == "5t"


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"schedulers": ("fil",)}, "--schedulers takes"),
        ({"schedulers": ("fill@0.9",)}, "--schedulers takes"),
        ({"schedulers": ("quantile_hold@1.5",)}, "--schedulers takes"),
        ({"schedulers": ("fill",), "workers": ("twice",)}, "--workers takes"),
        ({"schedulers": ("fill",), "workers": ("0",)}, "--workers takes"),
        ({"sigma": -0.5}, "--latency-sigma"),
    ],
)
def test_bad_scheduler_axes_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        _plan_axes(**kw)


def test_the_learned_table_keeps_schedulers_and_n_apart_with_intervals_over_seeds(tmp_path):
    """A tiny learned-policy table end to end: two schedulers at the bound, two seeds each, one
    episode of the delay world; each (scheduler, N) its own row with a 95 % t interval."""
    proc = _sweep(
        tmp_path,
        *("--sizes", "1", "--schedulers", "fill,exp_time", "--workers", "bound", "--latency-sigma", "0.5"),
        *("--seeds", "2", "--episodes", "1"),
    )
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["cells"] == 4 and doc["cells_complete"] == 4  # no sequential cells beside --schedulers
    rows = {(r["scheduler"], r["workers"]): r for r in doc["results"]}
    assert set(rows) == {("fill", 5), ("exp_time", 5)}
    for r in rows.values():
        assert r["seeds"] == 2 and r["ci95"] is not None and r["ci95"] >= 0 and r["sigma"] == 0.5
        assert 0 < r["mean_return"] <= 1200
    assert "learned policies" in err  # the table printed per scheduler
