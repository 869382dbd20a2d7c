"""Staggering schedulers (docs/design.md §2): the invariants Riemer et al. (2025) prove for
Algorithms 1 and 2, checked on the pure event-loop `simulate` and on raw call sequences."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.inference.schedulers import (
    SCHEDULER_NAMES,
    ExpectedTimeScheduler,
    MaxTimeScheduler,
    Scheduler,
    make_scheduler,
    simulate,
    simulate_iterations,
)

FAST = settings(max_examples=50, deadline=None)
TOL = 1e-9
STAGGERED = ("max_time", "exp_time", "quantile_hold", "auto")
GRID = ("quantile_hold", "auto")  # schedulers that start one inference per period
TICKED = (*GRID, "fill")  # schedulers that count in ticks of a period (the pool binds τ_M)


def constant(tau: float):
    return lambda worker, k: tau


def table(taus: np.ndarray):
    """Latencies from an (n_workers, n_loops) array: the same draw whatever the event order
    (a worker that outruns the others wraps around its row)."""
    return lambda worker, k: float(taus[worker, k % taus.shape[1]])


def gaps(times: list[float]) -> np.ndarray:
    return np.diff(np.asarray(times))


def build(name: str, n: int, **kwargs) -> Scheduler:
    if name in TICKED:
        kwargs.setdefault("period", 0.01)
    return make_scheduler(name, 1 if name == "sequential" else n, **kwargs)


# --------------------------------------------------------------------------- validation


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(
        ValueError,
        match="unknown scheduler 'nope': valid names are sequential, unstaggered, "
        "max_time, exp_time, quantile_hold, auto, fill",
    ):
        make_scheduler("nope", 2)
    with pytest.raises(TypeError, match="name must be a str"):
        make_scheduler(3, 2)  # type: ignore[arg-type]
    assert SCHEDULER_NAMES == ("sequential", "unstaggered", "max_time", "exp_time", "quantile_hold", "auto", "fill")


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_n_workers_is_validated(name):
    for bad in (True, 2.0, "2", None):
        with pytest.raises(TypeError, match="n_workers must be an int"):
            make_scheduler(name, bad)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"n_workers must be >= 1"):
            make_scheduler(name, bad)
    assert make_scheduler(name, np.int64(1)).n_workers == 1


def test_sequential_runs_exactly_one_worker():
    with pytest.raises(ValueError, match="exactly 1 worker, got n_workers=3"):
        make_scheduler("sequential", 3)


@pytest.mark.parametrize("name", STAGGERED)
def test_initial_estimate_is_validated(name):
    for bad in (math.nan, -0.1, math.inf):
        with pytest.raises(ValueError, match="initial_estimate must be a finite number of seconds >= 0"):
            make_scheduler(name, 2, initial_estimate=bad)
    for bad in ("1", True):
        with pytest.raises(TypeError, match="initial_estimate must be a number of seconds"):
            make_scheduler(name, 2, initial_estimate=bad)


def test_unknown_options_are_refused():
    with pytest.raises(TypeError, match="'unstaggered' got an unexpected option.*initial_estimate"):
        make_scheduler("unstaggered", 2, initial_estimate=1.0)
    with pytest.raises(TypeError, match="'max_time' got an unexpected option.*hysteresis"):
        make_scheduler("max_time", 2, hysteresis=0.1)


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_worker_and_tau_are_validated(name):
    s = build(name, 3)
    n = s.n_workers
    for method in (s.start_delay, s.take_delay, lambda w: s.after_inference(w, 0.1)):
        for bad in (-1, n):
            with pytest.raises(ValueError, match=rf"worker {bad} out of range: valid workers are 0..{n - 1}"):
                method(bad)
        for bad in (0.0, True, "0"):
            with pytest.raises(TypeError, match="worker must be an int"):
                method(bad)
    for bad in (math.nan, -1e-3, math.inf):
        with pytest.raises(ValueError, match="tau_theta must be a finite number of seconds >= 0"):
            s.after_inference(0, bad)
    with pytest.raises(TypeError, match="tau_theta must be a number of seconds"):
        s.after_inference(0, True)
    assert s.pending_delays == (0.0,) * n  # nothing changed by the refused calls


def test_auto_options_are_validated():
    with pytest.raises(ValueError, match=r"max_workers=2 is below min_workers=3"):
        make_scheduler("auto", 3, min_workers=3, max_workers=2)
    with pytest.raises(ValueError, match=r"n_workers=9 is outside \[min_workers, max_workers\] = \[1, 8\]"):
        make_scheduler("auto", 9, max_workers=8)
    with pytest.raises(ValueError, match=r"n_workers=1 is outside .* = \[2, inf\]"):
        make_scheduler("auto", 1, min_workers=2)
    for bad in (1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match=r"hysteresis must be in \[0, 1\)"):
            make_scheduler("auto", 2, hysteresis=bad)
    with pytest.raises(TypeError, match="min_workers must be an int"):
        make_scheduler("auto", 2, min_workers=1.0)
    s = make_scheduler("auto", 2, max_workers=4, period=0.01)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="tau_m must be a finite number of seconds > 0"):
            s.target_workers(bad)
    with pytest.raises(ValueError, match=r"n_workers=5 is outside"):
        s.resize(5)
    with pytest.raises(ValueError, match="worker 2 out of range"):
        s.resize(3, anchor=2)
    with pytest.raises(ValueError, match="n_actions must be an int >= 0"):
        simulate(s, constant(1.0), -1)


# --------------------------------------------------------------------------- waits are never negative

call = st.tuples(
    st.sampled_from(["take", "after", "after", "start"]),
    st.integers(0, 7),
    st.floats(0.0, 10.0, allow_nan=False),
)


@FAST
@given(
    name=st.sampled_from(SCHEDULER_NAMES),
    n=st.integers(1, 8),
    initial=st.one_of(st.none(), st.floats(0.0, 5.0)),
    calls=st.lists(call, max_size=80),
)
def test_waits_are_never_negative_for_any_call_sequence(name, n, initial, calls):
    kwargs = {"initial_estimate": initial} if name in STAGGERED else {}
    s = build(name, n, **kwargs)
    for kind, worker, tau in calls:
        worker %= s.n_workers
        if kind == "take":
            wait = s.take_delay(worker)
        elif kind == "start":
            wait = s.start_delay(worker)
        else:
            wait = s.after_inference(worker, tau)
        assert wait >= 0.0
        assert min(s.pending_delays) >= 0.0


@FAST
@given(
    n=st.integers(1, 8),
    calls=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 9), st.floats(0.0, 1.0)), max_size=60),
)
def test_auto_waits_are_never_negative_across_resizes(n, calls):
    s = make_scheduler("auto", n, max_workers=9, period=0.05)
    for worker, size, tau in calls:
        if tau < 0.2:  # resize now and then, anchored on the last worker or not at all
            s.resize(size, anchor=None if tau < 0.1 else worker % s.n_workers)
            assert all(s.start_delay(m) >= 0.0 for m in range(s.n_workers))
        else:
            assert s.take_delay(worker % s.n_workers) >= 0.0
            assert s.after_inference(worker % s.n_workers, tau) >= 0.0
        assert min(s.pending_delays) >= 0.0


@FAST
@given(
    name=st.sampled_from(SCHEDULER_NAMES),
    n=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
    sigma=st.floats(0.0, 1.5),
)
def test_waits_are_never_negative_in_simulation(name, n, seed, sigma):
    s = build(name, n)
    taus = np.random.default_rng(seed).lognormal(-3.0, sigma, size=(s.n_workers, 40))
    its = simulate_iterations(s, table(taus), 20 * s.n_workers)
    assert len(its) == 20 * s.n_workers
    assert all(it.delay >= 0.0 and it.wait >= 0.0 for it in its)
    assert all(s.start_delay(w) >= 0.0 for w in range(s.n_workers))
    times = [it.fire_time for it in its]
    assert times == sorted(times)


# --------------------------------------------------------------------------- constant latency


@FAST
@given(
    name=st.sampled_from(["max_time", "exp_time"]),
    n=st.integers(1, 12),
    tau=st.floats(1e-3, 10.0),
    initial_fraction=st.one_of(st.none(), st.floats(0.0, 5.0)),
)
def test_constant_latency_spacing_converges_to_tau_over_n(name, n, tau, initial_fraction):
    """Appendix B: equal spacing τ/N_I once the estimate stops changing.

    max_time's estimate is an upper bound, so an initial estimate e > τ keeps the
    spacing at e/N; exp_time re-spaces from any e to τ/N (the δ < 0 branch)."""
    initial = None if initial_fraction is None else initial_fraction * tau
    s = make_scheduler(name, n, initial_estimate=initial)
    period = max(tau, initial or 0.0) if name == "max_time" else tau
    its = simulate_iterations(s, constant(tau), 10 * n)
    warm = its[3 * n :]  # first round plus a margin
    assert np.allclose(gaps([it.fire_time for it in warm]), period / n, rtol=0.0, atol=TOL)
    # the cycle order is the worker order, each worker fires once per period
    assert [it.worker for it in warm] == [(warm[0].worker + k) % n for k in range(len(warm))]
    for w in range(n):
        mine = [it.fire_time for it in warm if it.worker == w]
        assert np.allclose(gaps(mine), period, rtol=0.0, atol=TOL)


def test_max_time_first_round_then_stagger():
    s = make_scheduler("max_time", 4)
    times = [t for t, _ in simulate(s, constant(0.1), 12)]
    assert times[:4] == [0.1] * 4  # no estimate yet: all start together
    assert np.allclose(times[4:], 0.2 + 0.025 * np.arange(8), atol=TOL)
    assert s.tau_max_estimate == 0.1


@FAST
@given(
    name=st.sampled_from(["max_time", "exp_time"]),
    n=st.integers(1, 12),
    tau_m=st.floats(1e-3, 0.05),
    ratio=st.one_of(st.just(1.0), st.floats(1.0, 4.0)),
)
def test_at_most_one_action_per_tick_when_n_le_tau_over_tau_m(name, n, tau_m, ratio):
    """N ≤ τ/τ_M: once converged, no two workers fire in the same tick [kτ_M, (k+1)τ_M)."""
    tau = n * tau_m * ratio  # so n = τ/(τ_M·ratio) ≤ τ/τ_M
    times = [t for t, _ in simulate(make_scheduler(name, n), constant(tau), 10 * n)][3 * n :]
    # Two points in one half-open interval of length τ_M are less than τ_M apart, so
    # gaps ≥ τ_M put every action in its own tick. Float rounding can make a gap that
    # is exactly τ_M in real arithmetic read τ_M − ε, hence the tolerance.
    assert np.all(gaps(times) >= tau_m - TOL)
    if ratio >= 1.0 + 1e-6:  # away from the boundary floor() is safe too
        ticks = np.floor(np.asarray(times) / tau_m)
        assert np.all(np.diff(ticks) >= 1)


@FAST
@given(n=st.integers(1, 12), tau=st.floats(1e-3, 10.0))
def test_unstaggered_fires_all_workers_together_every_tau(n, tau):
    timeline = simulate(make_scheduler("unstaggered", n), constant(tau), 6 * n)
    for k in range(6):
        batch = timeline[k * n : (k + 1) * n]
        assert sorted(w for _, w in batch) == list(range(n))
        assert len({t for t, _ in batch}) == 1  # the very same instant
        assert math.isclose(batch[0][0], (k + 1) * tau, rel_tol=0.0, abs_tol=TOL)


def test_sequential_acts_every_tau():
    times = [t for t, _ in simulate(make_scheduler("sequential", 1), constant(0.3), 5)]
    assert np.allclose(times, 0.3 * np.arange(1, 6), atol=TOL)


# --------------------------------------------------------------------------- Algorithm 1, random latencies


@FAST
@given(
    n=st.integers(1, 8),
    initial=st.one_of(st.none(), st.floats(0.0, 2.0)),
    calls=st.lists(st.tuples(st.integers(0, 7), st.floats(0.0, 3.0)), min_size=1, max_size=60),
)
def test_max_time_estimate_is_the_max_seen(n, initial, calls):
    s = make_scheduler("max_time", n, initial_estimate=initial)
    seen = initial or 0.0
    for worker, tau in calls:
        before = s.tau_max_estimate
        wait = s.after_inference(worker % n, tau)
        seen = max(seen, tau)
        assert s.tau_max_estimate == seen
        assert wait == max(before - tau, 0.0)  # Alg 1: pad to the max, or 0 on a new max


@FAST
@given(n=st.integers(1, 6), seed=st.integers(0, 2**32 - 1), sigma=st.floats(0.05, 1.0))
def test_max_time_cycle_equals_max_once_it_stops_changing(n, seed, sigma):
    # Clipped lognormal: the cap is the true τ_θmax and is hit often, so the estimate
    # stops changing early and plenty of the run comes after it.
    rng = np.random.default_rng(seed)
    cap = math.exp(-3.0 + 0.8 * sigma)
    taus = np.minimum(rng.lognormal(-3.0, sigma, size=(n, 60)), cap)
    taus[0, 1] = cap  # surely reached within the first two rounds
    s = make_scheduler("max_time", n)
    its = simulate_iterations(s, table(taus), 40 * n)
    tau_max = s.tau_max_estimate
    assert tau_max == cap == max(it.tau_theta for it in its)
    settled = min(it.done_time for it in its if it.tau_theta == tau_max)  # last change of τ̂max
    checked = 0
    for w in range(n):
        after = [it for it in its if it.worker == w and it.start > settled]
        for prev, it in zip(after, after[1:]):  # after[0] may still carry the last delay
            assert it.delay == 0.0
            assert math.isclose(it.delay + it.tau_theta + it.wait, tau_max, abs_tol=TOL)
            assert math.isclose(it.fire_time - prev.fire_time, tau_max, abs_tol=TOL)
            checked += 1
    assert checked >= n  # not vacuous
    # So the pattern is periodic: every N consecutive gaps span exactly τ̂max, i.e. the
    # average interaction time is τ̂max/N (Appendix B), even where single gaps differ.
    regime = max(  # from here on every worker is in its delay-free cycle
        [it for it in its if it.worker == w and it.start > settled][1].fire_time for w in range(n)
    )
    times = [it.fire_time for it in its if it.fire_time >= regime]
    assert len(times) > n
    assert np.allclose(np.subtract(times[n:], times[:-n]), tau_max, rtol=0.0, atol=TOL)


def test_max_time_new_max_while_another_worker_pads_leaves_unequal_gaps():
    """Pins a property of Algorithm 1 as written: a new max δ that lands while another
    worker is already padding to the old max still gives that worker only dist·δ/N,
    though its current cycle keeps the old length. It ends up off its ideal phase and,
    with nothing to pull it back, stays there: gaps alternate 0.85 / 0.65 instead of
    0.75 (still two actions per τ̂max = 1.5, so the average τ_I is τ̂max/N)."""

    def latency(worker, k):
        return 0.2 if worker == 1 else (1.5 if k == 5 else 1.0)

    s = make_scheduler("max_time", 2)
    times = [t for t, _ in simulate(s, latency, 40)][-8:]
    assert s.tau_max_estimate == 1.5
    assert np.allclose(gaps(times), [0.85, 0.65] * 3 + [0.85], atol=TOL)


def test_max_time_delays_conserve_the_spread_under_threads():
    """Each new max δ spreads Σ_d d·δ/N = δ(N−1)/2 over the others; with 8 threads
    racing, the total taken + pending must still be (N−1)/2 · τ̂max."""
    n, per_thread = 8, 2000
    s = make_scheduler("max_time", n)
    taken = [0.0] * n
    taus = np.random.default_rng(0).lognormal(0.0, 1.0, size=(n, per_thread))

    def worker_loop(w):
        for tau in taus[w]:
            taken[w] += s.take_delay(w)
            s.after_inference(w, float(tau))

    threads = [threading.Thread(target=worker_loop, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert s.tau_max_estimate == taus.max()
    assert math.isclose(sum(taken) + sum(s.pending_delays), (n - 1) / 2 * taus.max(), rel_tol=1e-9)


# --------------------------------------------------------------------------- Algorithm 2, random latencies


@FAST
@given(
    n=st.integers(1, 8),
    calls=st.lists(st.tuples(st.integers(0, 7), st.floats(0.0, 3.0)), min_size=1, max_size=60),
)
def test_exp_time_estimate_is_the_running_mean_and_waits_shrink(n, calls):
    s = make_scheduler("exp_time", n)
    taus: list[float] = []
    for k, (worker, tau) in enumerate(calls, start=1):
        old_mean, before = s.tau_mean_estimate, sum(s.pending_delays)
        assert s.after_inference(worker % n, tau) == 0.0  # Alg 2 never pads
        taus.append(tau)
        mean = math.fsum(taus) / k
        assert math.isclose(s.tau_mean_estimate, mean, rel_tol=1e-9, abs_tol=1e-12)
        # the extra wait this action added: (N∓1)/2 · |δ| with δ = new mean − old mean
        delta = s.tau_mean_estimate - old_mean
        added = sum(s.pending_delays) - before
        factor = (n - 1) / 2 if delta >= 0 else (n + 1) / 2
        assert math.isclose(added, factor * abs(delta), rel_tol=1e-9, abs_tol=1e-12)
        if k >= 2:  # |δ_k| = |τ_k − τ̄_{k−1}|/k, so the added wait is O(1/k) → 0
            assert added <= (n + 1) / 2 * (max(taus) - min(taus)) / k + 1e-12


def test_exp_time_waits_vanish_with_lognormal_latencies():
    n, loops = 6, 400
    taus = np.random.default_rng(1).lognormal(-3.0, 0.5, size=(n, loops))
    s = make_scheduler("exp_time", n)
    its = simulate_iterations(s, table(taus), n * (loops - 1))
    waits = np.array([it.delay for it in its])
    head, tail = waits[2 * n : 2 * n + 200].mean(), waits[-200:].mean()
    assert tail < head / 5
    assert tail < 0.01 * s.tau_mean_estimate  # per action, against a τ̄ of ~0.06 s
    assert all(it.wait == 0.0 for it in its)


@pytest.mark.parametrize("initial", [0.35, 0.1, 0.0])
def test_exp_time_shrinking_mean_re_spaces_the_cycle(initial):
    """δ < 0 (the estimate starts above τ): the (N − dist)·|δ|/N delays bring the
    spacing down from initial/N to τ/N."""
    n, tau = 4, 0.1
    s = make_scheduler("exp_time", n, initial_estimate=initial)
    times = [t for t, _ in simulate(s, constant(tau), 6 * n)]
    assert np.allclose(gaps(times[2 * n :]), tau / n, atol=TOL)


class _PaperLiteralExpTime(ExpectedTimeScheduler):
    """Alg 2 as extracted, shrink branch for num ≠ processnum only (the current worker is skipped)."""

    def _record(self, worker, tau):
        old = self._mean()
        self._a_tot += 1
        self._tau_tot += tau
        delta = self._mean() - old
        n = self._n
        for d in range(1, n):
            self._delays[(worker + d) % n] += (d if delta >= 0 else n - d) * abs(delta) / n


def test_skipping_the_current_worker_when_shrinking_breaks_the_spacing():
    """Why the shrink branch also delays the current worker by |δ| (see the comment in
    ExpectedTimeScheduler._record): without it, that worker stays |δ| ahead forever."""
    n, tau = 4, 0.1
    literal = _PaperLiteralExpTime(n, initial_estimate=0.35)
    times = [t for t, _ in simulate(literal, constant(tau), 6 * n)]
    assert not np.allclose(gaps(times[2 * n :]), tau / n, atol=1e-3)


def test_the_pure_rules_import_alone_and_start_nothing():
    # beyond the nonstop package itself, the rules load only their checks, and the front door only
    # the other pure parts: no process or thread starts, no torch, no Ray
    code = (
        "import sys, threading, json\n"
        "import nonstop\n"
        "def loaded(): return set(sys.modules)\n"
        "before = loaded()\n"
        "import nonstop.inference.rules\n"
        "rules = loaded() - before\n"
        "import nonstop.inference.schedulers\n"
        "front = loaded() - before - rules\n"
        "print(json.dumps([sorted(rules), sorted(front), threading.active_count()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    rules, front, threads = json.loads(out.stdout)
    assert rules == ["nonstop.inference", "nonstop.inference.checks", "nonstop.inference.rules"]
    assert front and all(m.startswith("nonstop.inference.") for m in front), front
    assert not any(m.split(".")[0] in ("torch", "ray") for m in rules + front) and threads == 1


def _tick_inaction(sched, tau: float, jitter: float, horizon: float, warmup: float, seed: int = 0) -> float:
    """The share of ticks (τ_M = 1) after ``warmup`` on which no worker submitted, by `simulate`."""
    rng = np.random.default_rng(seed)
    fires = simulate(
        sched,
        lambda worker, k: tau * math.exp(rng.normal(0.0, jitter)),
        int(horizon / tau * sched.n_workers * 1.3) + 50,
    )
    acted = np.zeros(int(horizon), bool)
    for t, _ in fires:
        if math.ceil(t) < horizon:
            acted[math.ceil(t)] = True
    return float(1.0 - acted[int(warmup) :].mean())


@pytest.mark.parametrize("n", [6, 10, 20])
def test_exp_time_under_jitter_loses_its_phases_and_acts_like_random_phases(n):
    """Why Algorithm 2 needs several times Algorithm 1's workers at ε = 0 (`nonstop paper 7`): it never
    pads, so nothing pulls a worker back to its phase; 1 % jitter is enough for the phases to wander
    until they are independent and uniform over the cycle, and a tick then goes unserved with
    probability (1 − τ_M/τ̄)^N. Algorithm 1 pads every cycle to τ̂max and keeps its phases: no inaction.
    With constant latency both keep their spacing."""
    tau = 5.0
    random_phases = (1.0 - 1.0 / tau) ** n
    measured = _tick_inaction(ExpectedTimeScheduler(n), tau, 0.01, horizon=30_000, warmup=3_000)
    assert abs(measured - random_phases) < 0.25 * random_phases + 0.004, (measured, random_phases)
    assert _tick_inaction(ExpectedTimeScheduler(n), tau, 0.0, horizon=3_000, warmup=300) == 0.0
    assert _tick_inaction(MaxTimeScheduler(n), tau, 0.01, horizon=30_000, warmup=3_000) == 0.0


def test_a_rule_with_only_the_three_waits_runs_in_a_pool_on_the_interfaces_defaults():
    """The pool asks every scheduler the declared interface (`Scheduler`: bind, early_release, resize,
    tick_rule, observe_reward, report… each with a default), never probes one with getattr/hasattr,
    and names no clock: a rule that writes only the three waits runs in it."""
    import ast
    from pathlib import Path

    from nonstop.inference.workers import InferencePool
    from nonstop.policies import Constant, ConstantPolicy, LatencyPolicy
    from nonstop.realtime.host import Session

    class EveryCall(Scheduler):
        name = "every_call"

        def start_delay(self, worker: int) -> float:
            return 0.0

        def take_delay(self, worker: int, now: float | None = None) -> float:
            return 0.0

        def after_inference(self, worker: int, tau_theta: float) -> float:
            return 0.0

    with Session("theory/inaction", clock="virtual", seed=0) as world:
        act = LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(1 / 60))
        pool = InferencePool(world, lambda i: act, EveryCall(1)).start()
        world.run_for(1.0)
        pool.stop()
    report = pool.report()
    assert report["scheduler"] == "every_call" and report["actions"][0] >= 55 and not pool.resizable
    src = Path(__file__).resolve().parents[1] / "src" / "nonstop"
    for path in (src / "inference").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
            ):
                assert "sched" not in ast.unparse(node.args[0]), f"{path.name}: {ast.unparse(node)}"
    for path in (src / "inference" / "workers.py", src / "experiment" / "drivers.py"):
        text = path.read_text()
        assert "is_virtual" not in text and "VirtualClock" not in text and "WallClock" not in text, path.name
