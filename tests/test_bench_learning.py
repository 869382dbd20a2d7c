"""The learning benchmarks and the default job run end to end (small sizes; figures are not asserted)."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from nonstop.bench import learn, nlstar
from nonstop.cli import main

pytestmark = pytest.mark.slow


def _run(module, argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    args.quick, args.json = True, True
    result = module.run(args)
    json.loads(json.dumps(result, allow_nan=False, default=str))
    return result


def test_learn_quick_reports_both_measurements(no_shm_leak):
    r = _run(learn, ["--ticks", "600", "--compare-ticks", "300", "--latency", "3t"])
    assert r["zero_latency"]["ticks"] == 600 and r["zero_latency"]["episodes"] > 0
    assert set(r["ordering"]) == {"staggered", "infer_then_learn", "learn_then_infer"}
    stag, seq = r["ordering"]["staggered"], r["ordering"]["infer_then_learn"]
    assert stag["inaction_fraction"] < seq["inaction_fraction"]  # staggering acts more often at the same latency
    assert isinstance(r["target_met"], bool)
    with pytest.raises(ValueError, match="at least 100 ticks"):
        _run(learn, ["--ticks", "10"])
    assert r["update_rate"]["updates_timed"] == 3


def test_learn_times_host_adam_against_the_device_learner(no_shm_leak):
    """``--updates-only``: updates per second of both paths at a small k on the CPU, both measured."""
    r = _run(learn, ["--updates-only", "--update-k", "0.25", "--update-count", "2"])
    u = r["update_rate"]
    assert set(r) == {"update_rate"} and u["device"] == "cpu" and u["params"] > 100_000
    assert u["host_apply_updates_per_s"] > 0 and u["device_learner_updates_per_s"] > 0
    assert u["device_over_host"] == pytest.approx(
        u["device_learner_updates_per_s"] / u["host_apply_updates_per_s"], rel=0.01
    )
    with pytest.raises(ValueError, match="--update-count must be at least 1"):
        _run(learn, ["--updates-only", "--update-count", "0"])


def test_nlstar_quick_measures_theory_and_throughput(tmp_path, no_shm_leak):
    r = _run(nlstar, ["--window", "1", "--plot", str(tmp_path / "nl.png")])
    (row,) = r["rows"]
    assert row["tau_l_update_s"] > 0 and row["nlstar_theory"] == max(1, math.ceil(row["tau_l_over_tau_m"]))
    assert float(row["throughput_transitions_per_s"]["1"]) > 0
    assert (tmp_path / "nl.png").stat().st_size > 0
    with pytest.raises(ValueError, match="--batch"):
        _run(nlstar, ["--batch", "0"])


def test_demo_runs_both_parts(tmp_path, capsys, no_shm_leak):
    out = tmp_path / "demo"
    code = main(["demo", "--clock", "virtual", "--seconds", "2", "--train-seconds", "2", "--out", str(out)])
    assert code == 0
    assert (out / "sequential_vs_staggered.png").exists() and (out / "sequential.npz").exists()
    assert (out / "train-staggered" / "summary.json").exists() and (
        out / "train-staggered" / "report" / "report.md"
    ).exists()
    assert (out / "train-sequential" / "summary.json").exists()
    assert (out / "learning_staggered_vs_sequential.png").stat().st_size > 0
    first = capsys.readouterr().out
    assert "staggering" in first and "tensorboard" not in first  # the demo writes no TensorBoard events
    from nonstop.learning.checkpoint import latest_checkpoint, load_checkpoint

    assert (
        load_checkpoint(latest_checkpoint(out / "train-staggered").path).get("replay") is None
    )  # the replay stays out

    # a second demo starts fresh beside the first: no resume, nothing of the first overwritten
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert main(["demo", "--clock", "virtual", "--seconds", "2", "--train-seconds", "2", "--out", str(out)]) == 0
    second = capsys.readouterr().out
    assert "demo-2" in second and "resumed" not in second
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before
    assert (tmp_path / "demo-2" / "train-staggered" / "summary.json").exists()


@pytest.mark.parametrize("tau_l_ticks, batch", [(10, 4), (9, 2)])
def test_nlstar_formula_against_whole_runs_on_the_virtual_clock(tau_l_ticks, batch, no_shm_leak):
    """N_L* = ⌈τ_L/(B·τ_M)⌉ at N_L* ≥ 2, measured by whole training runs (the replay, the learner group and
    the clock of `nonstop train`) at each N_L with a declared τ_L per update: the formula's N_L learns from
    every transition, one fewer does not, and each share is N_L·B·τ_M/τ_L within the window's edges."""
    from nonstop.bench.nlstar import VIRTUAL_SHARE, virtual_nlstar

    row = virtual_nlstar(tau_l_ticks, batch, seconds=10.0)
    assert row["nlstar_theory"] >= 2 and row["nlstar_measured"] == row["nlstar_theory"]
    shares = {int(n): v for n, v in row["shares"].items()}
    assert shares[row["nlstar_measured"] - 1] < VIRTUAL_SHARE
    for n, share in shares.items():
        assert share == pytest.approx(n * batch / tau_l_ticks, rel=0.05)
