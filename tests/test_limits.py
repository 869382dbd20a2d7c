"""`machine_limits`: a wall-clock run limited by its machine says so, with what to change."""

from __future__ import annotations

import doctest

import pytest

import nonstop.metrics.limits as limits_module
from nonstop.metrics.limits import machine_limits

HEALTHY = {
    "ticks": 3600,
    "overruns": 3,
    "lateness_p99_us": 900.0,
    "inaction_fraction": 0.02,
    "tau_i_mean_ticks": 1.02,
    "tau_m_s": 1 / 60,
}
KW = {"clock": "wall", "scheduler": "exp_time", "n_inference": 6, "latency_mean_ticks": 6.0, "processes": 8, "cores": 2}


def test_doctest():
    failures, tried = doctest.testmod(limits_module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_a_healthy_run_gets_no_hint():
    assert machine_limits(HEALTHY, **KW) == []


def test_late_ticks_alone_are_named_with_the_fix():
    lines = machine_limits({**HEALTHY, "overruns": 200, "lateness_p99_us": 25_000.0}, **KW)
    assert len(lines) == 2 and "200 of 3,600 ticks" in lines[0] and "25.0 ms" in lines[0]
    assert "--clock virtual" in lines[1] and "8 busy processes on 2 cores" in lines[1]


def test_starved_workers_alone_are_named():
    lines = machine_limits({**HEALTHY, "tau_i_mean_ticks": 2.5, "inaction_fraction": 0.6}, **KW)
    assert len(lines) == 2 and "every 2.50 ticks" in lines[0] and "should act every 1.00" in lines[0]


def test_a_slow_declared_latency_is_not_starvation():
    # 3 workers for a 12-tick model act every 4 ticks by design: 75 % inaction, and not the machine's fault
    figures = {**HEALTHY, "tau_i_mean_ticks": 4.0, "inaction_fraction": 0.75}
    assert machine_limits(figures, **{**KW, "n_inference": 3, "latency_mean_ticks": 12.0}) == []
    assert machine_limits({**figures, "tau_i_mean_ticks": 6.0}, **{**KW, "n_inference": 3, "latency_mean_ticks": 12.0})
    assert (
        machine_limits(
            {**HEALTHY, "tau_i_mean_ticks": 6.0, "inaction_fraction": 0.8}, **{**KW, "scheduler": "sequential"}
        )
        == []
    )


def test_the_virtual_clock_never_blames_the_machine():
    worst = {**HEALTHY, "overruns": 3600, "tau_i_mean_ticks": 9.0, "inaction_fraction": 0.9}
    assert machine_limits(worst, **{**KW, "clock": "virtual"}) == []


@pytest.mark.parametrize(
    "change,match",
    [
        ({"clock": "real"}, "clock"),
        ({"cores": 0}, "cores"),
        ({"n_inference": True}, "n_inference"),
        ({"latency_mean_ticks": float("nan")}, "latency_mean_ticks"),
    ],
)
def test_bad_arguments_are_refused(change, match):
    with pytest.raises(ValueError, match=match):
        machine_limits(HEALTHY, **{**KW, **change})


def test_the_run_is_named_by_its_fields_and_a_missing_or_misspelt_one_is_refused():
    """``machine_limits`` reads the run as `RunShape` (what `limit_findings` takes): each field by name."""
    with pytest.raises(TypeError, match="scheduler"):
        machine_limits(HEALTHY, **{k: v for k, v in KW.items() if k != "scheduler"})
    with pytest.raises(TypeError, match="schedular"):
        machine_limits(HEALTHY, **KW, schedular="exp_time")
