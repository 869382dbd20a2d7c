"""RTAC is refused in one line wherever its premise fails: the reward between two decisions' observations
must not depend on the action just decided, which needs that action to land 2 ticks on or later."""

from __future__ import annotations


import pytest

from nonstop.cli import main


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--latency", "1t", "--scheduler", "max_time", "--n-inference", "1"], "gives 1 tick:"),
        (["--latency", "0"], "gives 0 ticks:"),
        (["--latency", "40ms"], "gives 1 tick:"),  # under one 50 ms tick of Pendulum's 20 Hz
        (["--latency", "3t", "--scheduler", "sequential"], "--scheduler max_time"),
    ],
)
def test_rtac_is_refused_in_one_line_where_its_premise_fails(flags, said, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    code = main(["train", "--algo", "rtac", "--env", "Pendulum-v1", "--seconds", "1", *flags, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "RTAC" in err and said in err
    assert not out.exists()


def test_rtac_at_two_ticks_and_sac_at_one_are_let_through() -> None:
    from nonstop.learning.rtac import RTAC
    from nonstop.learning.sac import SAC

    RTAC.check_timing(2.0, "max_time")
    RTAC.check_timing(1.5, "staggered")  # lands on the second tick
    SAC.check_timing(1.0, "sequential")


def test_bench_delay_leaves_rtac_out_at_one_tick_and_says_why() -> None:
    from nonstop.bench.delay import _premised

    plan = [("Pendulum-v1", tau, algo, 0, 100, 1, {}) for tau in (1, 3) for algo in ("sac", "rtac")]
    kept, skipped = _premised(plan)
    assert [(p[1], p[2]) for p in kept] == [(1, "sac"), (3, "sac"), (3, "rtac")]
    assert len(skipped) == 1 and skipped[0]["tau"] == 1 and "2 ticks" in skipped[0]["why"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--latency", "1t", "--scheduler", "max_time", "--n-inference", "1"], "gives 1 tick:"),
        (["--latency", "3t", "--scheduler", "sequential"], "--scheduler max_time"),
    ],
)
def test_dcac_is_refused_where_its_state_value_has_no_target_and_dcac_q_is_let_through(flags, said, tmp_path, capsys):
    """The paper's DCAC resamples a_0 as well: where it lands on the next tick its reward felt it, and no run
    gives a target. DCAC-Q keeps a_0 and learns at any delay."""
    from nonstop.learning.dcacq import DCACQ

    out = tmp_path / "run"
    code = main(["train", "--algo", "dcac", "--env", "Pendulum-v1", "--seconds", "1", *flags, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "DCAC" in err and said in err and "--algo dcac-q" in err
    assert not out.exists()
    DCACQ.check_timing(1.0, "sequential")
