"""``nonstop bench lanes`` (staggering on the device) in quick mode on the virtual clock: exact and
fast. It must agree with `tests/test_batching.py` (vi) and with the device's throughput."""

from __future__ import annotations

import argparse
import json

import pytest

from nonstop.bench import lanes


def _run(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    lanes.add_arguments(parser)
    args = parser.parse_args(argv)
    args.quick, args.json = True, True
    return lanes.run(args)


def hold_served(result: dict) -> int:
    return next(r["worlds_served"] for r in result["rows"] if r["scheduler"] == "quantile_hold")


def test_quantile_hold_needs_the_lanes_test_vi_found_and_fewer_than_exp_time():
    """L(b) = 0.6 + 0.02·b ticks, 8 worlds: quantile_hold needs 2 lanes a world (test (vi)), and 1 leaves
    inaction; exp_time's lanes stay in lockstep and do not get there within the scan."""
    result = _run(["--batch-curve", "linear:0.6t,0.02t", "--scheduler", "quantile_hold,exp_time", "--max-lanes", "4"])
    rows = {r["scheduler"]: r for r in result["rows"]}
    hold, exp = rows["quantile_hold"], rows["exp_time"]
    assert result["device_keeps_up"] and result["consistent"] is True and result["meets_target"] is True
    assert result["worlds_served"] == 8 and hold_served(result) == 8
    assert hold["nstar_lanes"] == 2 and hold["inaction_at_nstar"] == 0.0
    assert hold["inaction_at_nstar_minus_1"] > 0.3 and hold["holds_at_n_plus_1"] is True
    assert hold["formula_tau_mean"] <= 2 <= hold["formula_tau"] and hold["between_formulas"]
    assert hold["batch_size_mean"] > 4 and hold["deaths"] == 0  # several worlds share a batch
    assert hold["delay_mean_ticks"] >= 2.0  # the hold's price: released 2 ticks after the observation
    assert exp["nstar_lanes"] is None and exp["nstar_above"] == 4 and exp["inaction_at_nstar"] > 0.0
    json.loads(json.dumps(result, allow_nan=False))


def test_a_device_slower_than_the_worlds_ask_leaves_inaction_at_any_n():
    """L(b) = 0.5 + 0.15·b ticks: at most 6.3 answers a tick (b = 64) for 8 worlds asking 8, so no
    batch size keeps up and no scheduler reaches zero inaction at any N in the scan."""
    result = _run(["--batch-curve", "linear:0.5t,0.15t", "--scheduler", "quantile_hold,fill", "--max-lanes", "4"])
    assert result["device_keeps_up"] is False and result["steady_batch"] is None
    assert result["schedulers_reaching_zero"] == [] and result["consistent"] is True
    assert result["meets_target"] is False and result["worlds_served"] < 8  # consistent, and no target met
    assert all(r["nstar_lanes"] is None and r["inaction_at_nstar"] > 0.05 for r in result["rows"])


def test_the_h100_curve_serves_8_worlds_with_one_lane_each():
    """The default curve (H100, k = 29, bf16): 8 out-of-phase worlds each get their own batch of one
    (L(1) = 0.07 tick), so one lane a world acts every tick with one tick of delay."""
    result = _run(["--scheduler", "quantile_hold", "--max-lanes", "2"])
    hold = result["rows"][0]
    assert result["steady_batch"] == 1 and hold["nstar_lanes"] == 1
    assert hold["delay_mean_ticks"] == pytest.approx(1.0) and hold["late"] == 0


def test_bad_options_fail_before_any_run():
    with pytest.raises(ValueError, match="unknown"):
        _run(["--scheduler", "fastest"])
    with pytest.raises(ValueError, match="bad latency curve"):
        _run(["--batch-curve", "quadratic:1,2"])
