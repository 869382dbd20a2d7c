"""`nonstop.metrics.tau_parts`: the parts of a Ray actor's τ_θ, and a diagnosis that blames the
machine only on measured evidence (issue 23). Made-up measurements: each rule can fail."""

from __future__ import annotations

import doctest

import pytest

import nonstop.metrics.tau_parts as tau_parts_module
from nonstop.metrics.tau_parts import cpu_use, diagnose, parse_proc_stat, part_summary, tau_theta_parts

MS = 1e-3
BUSY = {"cores": 2, "busy_cores": 1.95, "steal_cores": 0.0, "idle_cores": 0.05, "source": "/proc/stat"}
IDLE = {"cores": 16, "busy_cores": 2.0, "steal_cores": 0.0, "idle_cores": 14.0, "source": "/proc/stat"}


def parts(forward=25.0, quiet=25.0, overhead=1.0, wait=0.2, together=(), n=40):
    """Constant samples (ms) of each part; the world's τ_θ is their sum."""
    world = wait + overhead + forward
    return tau_theta_parts(
        world=[world * MS] * n,
        forward_world=[forward * MS] * n,
        forward_quiet=[quiet * MS] * 8,
        forward_together=[t * MS for t in together],
        overhead=[overhead * MS] * n,
        overhead_quiet=[0.5 * MS] * 8,
        wait=[wait * MS] * n,
        tau_m=1 / 60,
    )


def causes(d):
    return [c["cause"] for c in d.causes]


def test_doctest():
    failures, tried = doctest.testmod(tau_parts_module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_part_summary_in_ms_and_ticks():
    s = part_summary([0.010, 0.020, 0.030, 0.040], 1 / 50)
    assert s["n"] == 4 and s["mean_ms"] == pytest.approx(25.0) and s["mean_ticks"] == pytest.approx(1.25)
    assert s["p50_ms"] == pytest.approx(25.0) and 39 < s["p99_ms"] <= 40
    assert part_summary([], 1 / 60) == {"n": 0, "p50_ms": None, "p99_ms": None, "mean_ms": None, "mean_ticks": None}
    with pytest.raises(ValueError, match="tau_m must be a positive"):
        part_summary([0.1], 0.0)


def test_proc_stat_readings_give_busy_stolen_and_idle_cores():
    text = "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 10 0 10 80 0 0 0 0 0 0\ncpu1 50 0 0 40 10 0 0 0 0 0\ncpu7 1 1 1 1\nctxt 9\n"
    before = parse_proc_stat(text)
    assert before == {0: (20, 80, 0), 1: (50, 50, 0), 7: (3, 1, 0)}  # the aggregate line and others are left out
    after = {0: (120, 80, 0), 1: (50, 130, 20), 7: (1000, 1, 0)}
    use = cpu_use(before, after, [0, 1])  # CPU 7 is not ours (affinity): not counted
    assert use == {"cores": 2, "busy_cores": 1.0, "steal_cores": 0.2, "idle_cores": 0.8, "source": "/proc/stat"}
    assert cpu_use(before, before, [0, 1])["idle_cores"] is None  # no time passed: no figure, not a made-up one


def test_busy_cores_and_a_slower_forward_pass_make_the_machine_the_limit():
    d = diagnose(parts(forward=36.0, quiet=24.0), BUSY, target_met=False, cluster_note="2 actors share 2 cores")
    assert causes(d) == ["cpu_contention"]
    assert d.causes[0]["slower"] == pytest.approx(0.5)
    assert (
        "0.1 of 2 cores idle" in d.machine_limit
        and "36.00 ms mean in the world against 24.00 ms quiet" in d.machine_limit
    )
    assert "2 actors share 2 cores" in d.machine_limit
    assert diagnose(parts(forward=36.0, quiet=24.0), BUSY, target_met=True).machine_limit is None  # nothing missed


def test_the_issue_case_idle_cores_never_blame_the_machine():
    # issue 23: τ_θ 2.2 ticks in the world against 1.5 quiet with 14 of 16 cores idle printed machine_limit
    d = diagnose(parts(forward=33.0, quiet=25.0, overhead=3.0), IDLE, target_met=False)
    assert d.machine_limit is None
    assert causes(d) == ["forward_slower_in_world"] and "14.0 of 16 cores idle" in d.causes[0]["text"]
    assert "not the machine's load" in d.causes[0]["text"]


def test_busy_cores_with_an_unchanged_forward_pass_are_no_machine_limit():
    # the old rule's false positive: τ_θ in the world > 1.2× quiet, from the call's overhead alone
    d = diagnose(parts(forward=25.0, quiet=24.5, overhead=8.0), BUSY, target_met=False)
    assert d.machine_limit is None and causes(d) == ["ray_call_overhead"]
    c = d.causes[0]
    assert c["p50_ms"] == pytest.approx(8.0) and c["quiet_p50_ms"] == pytest.approx(0.5)
    assert c["share_of_tau_theta"] == pytest.approx(8.0 / 33.2)
    assert "Ray call overhead: 8.00 ms p50 / 8.00 ms p99 per call (24% of τ_θ; 0.50 ms p50 quiet)" == c["text"]


def test_actors_that_slow_each_other_without_the_world_are_named():
    d = diagnose(parts(forward=33.0, quiet=25.0, together=[32.0] * 8), IDLE, target_met=False)
    assert causes(d) == ["actors_slow_each_other"] and d.machine_limit is None
    assert d.causes[0]["together_ms_mean"] == pytest.approx(32.0) and "took 32.00 ms (+28%)" in d.causes[0]["text"]
    # together as fast as alone: the world, not the actors, slowed the pass
    assert causes(diagnose(parts(forward=33.0, quiet=25.0, together=[25.5] * 8), IDLE, target_met=False)) == [
        "forward_slower_in_world"
    ]


def test_an_unmeasured_load_claims_nothing_about_the_machine():
    d = diagnose(parts(forward=36.0, quiet=24.0), {"cores": 2, "idle_cores": None}, target_met=False)
    assert causes(d) == ["forward_slower_in_world"] and d.machine_limit is None
    assert "cannot be told" in d.causes[0]["text"]


def test_a_late_worker_thread_is_named_with_its_share():
    d = diagnose(parts(forward=25.0, quiet=25.0, overhead=0.5, wait=6.0), IDLE, target_met=False)
    assert causes(d) == ["wait_before_call"] and d.causes[0]["p50_ms"] == pytest.approx(6.0)
    assert "6.00 ms p50 / 6.00 ms p99" in d.causes[0]["text"] and "(19% of τ_θ" in d.causes[0]["text"]


def test_causes_come_largest_first_and_small_parts_are_not_named():
    d = diagnose(parts(forward=40.0, quiet=25.0, overhead=6.0, wait=0.5), BUSY, target_met=False)
    assert causes(d) == ["cpu_contention", "ray_call_overhead"]  # 15 ms then 6 ms; the 0.5 ms wait is under 10 %
    shares = [c["share_of_tau_theta"] for c in d.causes]
    assert shares == sorted(shares, reverse=True)


def test_a_miss_no_part_explains_is_said_and_a_clean_run_says_nothing():
    d = diagnose(parts(), IDLE, target_met=False)
    assert causes(d) == ["unexplained"] and d.machine_limit is None
    assert diagnose(parts(), IDLE, target_met=True) == ([], None)
    assert diagnose({}, IDLE, target_met=False) == ([], None)  # no world τ_θ measured: nothing to say


def test_niced_actors_are_told_how_to_run_at_default_priority():
    slowed = parts(forward=36.0, quiet=24.0)
    assert "RAY_worker_niceness=0" in diagnose(slowed, BUSY, target_met=False, actor_niceness=15).causes[0]["text"]
    assert "nice" not in diagnose(slowed, BUSY, target_met=False, actor_niceness=0).causes[0]["text"]
