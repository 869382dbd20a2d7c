"""``nonstop bench delay``: its grid, intervals and verdicts, and one tiny run end to end."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from nonstop.bench.delay import _verdicts, grid, interval, recovered


def test_interval_and_recovery() -> None:
    one = interval([-200.0])
    assert one == {"mean": -200.0, "low": None, "high": None, "n": 1}  # no interval from one seed
    three = interval([-100.0, -200.0, -300.0])
    assert three["low"] == pytest.approx(-200.0 - 4.30265 * 100.0 / 3**0.5)  # t(0.975, 2 dof)
    assert recovered(-169.0, -1352.0, -267.0) == pytest.approx(0.9172, abs=1e-4)
    assert recovered(-200.0, -100.0, -50.0) is None  # no loss: nothing to recover


def cell(env: str, tau: int, algo: str, values: list[float]) -> dict:
    return {"env": env, "tau": tau, "algo": algo, "return": interval(values)}


def test_verdicts_judge_recovery_only_where_sac_shows_the_loss() -> None:
    g = {"envs": ["P"], "taus": [1, 6], "algos": ["sac", "sac+delay", "dcac"]}
    cells = [
        cell("P", 1, "sac", [-170, -180, -175]),
        cell("P", 6, "sac", [-1300, -1350, -1400]),
        cell("P", 6, "sac+delay", [-300, -320, -310]),
        cell("P", 6, "dcac", [-900, -950, -1000]),
    ]
    (v,) = _verdicts(cells, g)
    assert v["sac_shows_loss"] and v["meets_target"]
    assert v["recovered"]["sac+delay"] == pytest.approx((-310 + 1350) / (-175 + 1350))
    # with the runs: the loss and each share also over seeds, paired by seed
    runs = [
        {"env": "P", "tau": t, "algo": a, "seed": k, "return": r}
        for t, a, values in (
            (1, "sac", [-170, -180, -175]),
            (6, "sac", [-1300, -1350, -1400]),
            (6, "sac+delay", [-300, -320, -310]),
        )
        for k, r in enumerate(values)
    ]
    (v,) = _verdicts(cells, g, runs)
    shares = [(-300 + 1300) / (-170 + 1300), (-320 + 1350) / (-180 + 1350), (-310 + 1400) / (-175 + 1400)]
    assert v["sac_loss_interval"]["mean"] == pytest.approx(1175.0) and v["sac_loss_interval"]["n"] == 3
    assert v["recovered_interval"]["sac+delay"] == interval(shares)
    assert v["recovered_interval"]["dcac"]["n"] == 0  # dcac ran no seed here: no share, no interval
    # plain SAC not worse at τ 6 within its intervals: the bench cannot judge a recovery
    cells[1] = cell("P", 6, "sac", [-100, -400, -250])
    (v,) = _verdicts(cells, g)
    assert not v["sac_shows_loss"] and not v["meets_target"]


def test_grid_checks_its_flags() -> None:
    base = dict(budget=None, quick=True, envs=None, taus=None, algos=None, seeds=None, ticks=None, last=None)
    g = grid(argparse.Namespace(**base))
    assert g["budget"] == "tiny" and g["taus"] == [1, 6] and g["algos"] == ["sac", "sac+delay"]
    with pytest.raises(ValueError, match="unknown algorithm"):
        grid(argparse.Namespace(**{**base, "algos": "sac,ppo+delay"}))
    with pytest.raises(ValueError, match="--taus"):
        grid(argparse.Namespace(**{**base, "taus": "1,x"}))
    with pytest.raises(ValueError, match="--seeds"):
        grid(argparse.Namespace(**{**base, "seeds": 0}))
    with pytest.raises(ValueError, match="--jobs"):
        grid(argparse.Namespace(**{**base, "jobs": 0}))


def test_bench_delay_runs_end_to_end_json_last(tmp_path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "nonstop",
        "bench",
        "delay",
        "--json",
        "--envs",
        "CartPole-v1",
        "--algos",
        "dqn,dqn+delay",
        "--taus",
        "1,3",
        "--ticks",
        "300",
        "--last",
        "2",
        "--seeds",
        "1",
        "--plot",
        str(tmp_path / "delay.png"),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1], parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert result["bench"] == "delay" and len(result["cells"]) == 4 and len(result["runs"]) == 4
    by = {(c["tau"], c["algo"]): c for c in result["cells"]}
    assert by[(3, "dqn+delay")]["delay_ticks"] == pytest.approx(3.0, abs=0.2)  # every action lands 3 ticks late
    assert by[(1, "dqn")]["delay_ticks"] == pytest.approx(1.0)
    assert (tmp_path / "delay.png").stat().st_size > 0


def test_bench_delay_quick_is_the_tiny_budget_of_sac() -> None:
    cmd = [sys.executable, "-m", "nonstop", "bench", "delay", "--quick", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["grid"]["budget"] == "tiny" and result["quick"] and "quick_note" in result
    assert {(c["tau"], c["algo"]) for c in result["cells"]} == {
        (1, "sac"),
        (1, "sac+delay"),
        (6, "sac"),
        (6, "sac+delay"),
    }
    assert [v["env"] for v in result["verdicts"]] == ["Pendulum-v1"]  # judged (a tiny run's verdict means nothing)
    assert len(out.stderr.strip().splitlines()) >= 4  # a line per run


def test_judged_cells_in_parallel_runs_plain_sac_at_every_tau_and_the_others_at_the_largest() -> None:
    cmd = [sys.executable, "-m", "nonstop", "bench", "delay", "--quick", "--judged-cells", "--jobs", "2", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["jobs"] == 2 and result["grid"]["judged_cells"]
    assert [(r["tau"], r["algo"]) for r in result["runs"]] == [(1, "sac"), (6, "sac"), (6, "sac+delay")]  # plan order
    assert [(c["tau"], c["algo"]) for c in result["cells"]] == [(1, "sac"), (6, "sac"), (6, "sac+delay")]
    assert "sac+delay" in result["verdicts"][0]["recovered"]
    assert len(out.stderr.strip().splitlines()) >= 3  # a line per run, as each ends


@pytest.mark.slow  # two runs of 1,000 Pendulum ticks, about 20 s
def test_a_run_says_how_far_it_is_without_moving_its_figures(capsys, monkeypatch) -> None:
    """Each run prints about ten progress lines on stderr (a grid of hour-long runs shows its way), the last
    at its whole length; the lines fall on the run's own 50-tick slices, so its figures are those of a run
    that says nothing until it ends (the virtual clock)."""
    from nonstop.bench import delay

    spoken = delay.run_cell("Pendulum-v1", 3, "sac", 0, 1000, 3)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bench delay: Pendulum-v1 τ 3")]
    ticks = [int(line.split(": ")[2].split(" of ")[0].replace(",", "")) for line in lines]
    assert ticks == list(range(100, 1001, 100)), lines
    assert lines[-1].startswith("bench delay: Pendulum-v1 τ 3 sac seed 0: 1,000 of 1,000 ticks, recent return ")
    monkeypatch.setattr(delay, "_tenth", lambda ticks, tick_hz: (ticks + 0.5) / tick_hz)  # one slice: the end
    quiet = delay.run_cell("Pendulum-v1", 3, "sac", 0, 1000, 3)
    keys = ("return", "episodes", "updates", "inaction", "delay_ticks")
    assert spoken["updates"] > 500 and spoken["episodes"] == 5, spoken  # it learned, so the figures say something
    assert {k: spoken[k] for k in keys} == {k: quiet[k] for k in keys}
