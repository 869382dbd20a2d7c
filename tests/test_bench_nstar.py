"""``nonstop bench nstar`` end to end on the virtual clock (fast, exact), and its argument checks.
The wall-clock figures live in the benchmark's own output, never in timed unit tests."""

from __future__ import annotations

import argparse
import json

import pytest

from nonstop.bench import nstar


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    nstar.add_arguments(parser)
    return parser.parse_args(argv)


def test_quick_virtual_nstar_equals_theory_and_reports_the_machine():
    result = nstar.run(_args(["--quick", "--tau-theta", "1,3,5", "--plot", ""]))
    assert [(r["scheduler"], r["tau_theta_ticks"], r["nstar_measured"]) for r in result["rows"]] == [
        ("max_time", 1, 1), ("max_time", 3, 3), ("max_time", 5, 5),
        ("exp_time", 1, 1), ("exp_time", 3, 3), ("exp_time", 5, 5),
    ]  # fmt: skip
    assert result["all_match_theory"]
    for row in result["rows"]:
        if row["nstar_measured"] > 1:  # one worker short does leave β ticks
            assert row["inaction_at_nstar_minus_1"] > 0
        assert row["inaction_at_nstar"] == 0.0 and row["tau_i_cv"] == 0.0
    assert len(result["loadavg_before"]) == 3 and result["machine"]["cpu_count"]
    json.loads(json.dumps(result, allow_nan=False))


@pytest.mark.parametrize(
    "argv, match",
    [(["--tau-theta", "1,x"], "--tau-theta takes comma-separated"), (["--tau-theta", "0"], "positive finite")],
)
def test_bad_tau_theta_fails_before_any_run(argv, match):
    with pytest.raises(ValueError, match=match):
        nstar.run(_args(argv + ["--plot", ""]))
