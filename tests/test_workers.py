"""Inference workers against the real host: staggering, sequential inaction,
worker death and restart, and the process backend."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from nonstop.inference.schedulers import make_scheduler
from nonstop.inference.workers import InferencePool, ProcessPolicy
from nonstop.policies import Constant, ConstantPolicy, Empirical, LatencyPolicy, MLP, TorchPolicy
from nonstop.realtime.host import Session

TAU = 1 / 60


def _run(tau_ticks: float, n: int, scheduler: str, seconds: float, *, kill: tuple[float, int] | None = None):
    with Session("theory/inaction", clock="virtual", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(tau_ticks * TAU), seed=i)

        pool = InferencePool(world, policy, make_scheduler(scheduler, n)).start()
        if kill is not None:
            at, worker = kill
            world.run_for(at)
            pool.kill(worker)
            world.run_for(seconds - at)
        else:
            world.run_for(seconds)
        pool.stop()
    return world.tick_log, pool


@pytest.mark.parametrize("scheduler", ["max_time", "exp_time"])
@pytest.mark.parametrize("k", [3, 7])
def test_k_staggered_workers_act_every_tick_and_one_fewer_does_not(scheduler, k):
    log, _ = _run(k, k, scheduler, 200 * TAU)
    s = log.summary(warmup_ticks=3 * k + 5)
    assert s["inaction_ticks"] == 0
    assert s["tau_i_mean_ticks"] == pytest.approx(1.0)
    assert s["tau_i_cv"] == pytest.approx(0.0, abs=1e-9)
    assert s["delay_max_ticks"] == k
    short = _run(k, k - 1, scheduler, 200 * TAU)[0].summary(warmup_ticks=3 * k + 5)
    assert short["inaction_fraction"] > 0.5 / k


@pytest.mark.parametrize("k", [2, 3, 5])
def test_sequential_integer_latency_leaves_one_minus_one_over_k(k):
    s = _run(k, 1, "sequential", 300 * TAU)[0].summary(warmup_ticks=k)
    assert s["inaction_fraction"] == pytest.approx(1 - 1 / k, abs=1.5 / s["ticks"])


def test_sequential_fractional_latency_restarts_at_once():
    # τ_θ = 2.5 ticks: inference restarts right after each submit, so the agent
    # acts 2 times per 5 ticks: inaction 1 − τ_M/τ_θ = 0.6, not 1 − 1/⌈2.5⌉ = 0.667
    s = _run(2.5, 1, "sequential", 400 * TAU)[0].summary(warmup_ticks=5)
    assert s["inaction_fraction"] == pytest.approx(1 - 1 / 2.5, abs=0.01)
    assert s["inaction_fraction"] < 1 - 1 / 3 - 0.03


def test_killed_worker_is_covered_by_beta_restarted_and_staggering_reconverges():
    k = 4
    log, pool = _run(k, k, "max_time", 300 * TAU, kill=(100 * TAU, 2))
    kinds = [(e.worker, e.kind) for e in pool.events]
    assert (2, "died") in kinds and (2, "restarted") in kinds
    assert pool.workers[2].deaths == 1
    tick = log["tick"]
    beta = (log["source"] == 0) & (tick > 100) & (tick < 130)
    assert beta.sum() >= 1, "the dead worker's ticks fall to β"
    tail = log.summary(warmup_ticks=200)
    assert tail["inaction_ticks"] == 0, "after the restart the workers are staggered again"


def test_bad_worker_counts_and_names_fail_before_anything_starts():
    with pytest.raises(ValueError):
        make_scheduler("max_time", 0)
    with pytest.raises(ValueError, match="valid names"):
        make_scheduler("fastest", 2)
    with pytest.raises(ValueError):
        make_scheduler("sequential", 2)


def _mlp_policy(obs_dim: int, n_actions: int):
    import torch

    torch.manual_seed(0)
    return TorchPolicy(MLP(obs_dim, n_actions), gym.spaces.Discrete(n_actions))


@pytest.mark.slow
def test_process_backend_runs_a_real_model_and_survives_a_killed_process():
    factory = functools.partial(_mlp_policy, 4, 2)
    with Session("CartPole", clock="wall", seed=0) as world:
        pool = InferencePool(world, lambda i: ProcessPolicy(factory), make_scheduler("sequential", 1)).start()
        try:
            world.run_for(1.5)
            acted = pool.workers[0].actions
            kill_tick = world.slot.read().tick
            pool.kill(0)
            # a new model process takes seconds to start (torch import); β covers meanwhile
            for _ in range(240):
                world.run_for(0.25)
                if pool.workers[0].actions > acted + 25:
                    break
        finally:
            pool.stop()
    log = world.tick_log
    first = log["tick"][log["source"] == 1].min()  # the session ticked while the model process started
    before_kill = log["source"][(log["tick"] > first) & (log["tick"] < first + 40)]
    assert before_kill.mean() > 0.5, "a 1-thread MLP in its own process acts on most 50 Hz ticks"
    assert pool.workers[0].deaths == 1
    assert "restarted" in [e.kind for e in pool.events]
    after = log["source"][log["tick"] > kill_tick + 1]
    assert after.sum() > 10, "the restarted process acts again"
    assert np.isfinite(log["tau_theta"][log["source"] == 1]).all()


@pytest.mark.wall
def test_wall_pool_stop_wakes_workers_sleeping_a_long_latency():
    """Regression: worker threads sleeping a 5 s latency used to outlive pool.stop() and pile up
    across bench nstar trials until 'can't start new thread'. The stop event interrupts waits."""
    import threading
    import time

    before = threading.active_count()
    with Session("theory/inaction", clock="wall", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(5.0), seed=i)

        pool = InferencePool(world, policy, make_scheduler("max_time", 4)).start()
        world.run_for(0.1)
        t0 = time.perf_counter()
        pool.stop()
        stopped_in = time.perf_counter() - t0
    assert stopped_in < 1.0, f"pool.stop() took {stopped_in:.2f} s"
    assert all(not w.handle.is_alive() for w in pool.workers)
    assert threading.active_count() <= before
    assert not [e for e in pool.events if e.kind == "stuck"]


@pytest.mark.wall
def test_wall_clock_interrupt_ends_a_sleeping_process():
    import threading

    from nonstop.realtime.clock import WallClock

    stop = threading.Event()
    clock = WallClock(spin=0.0, interrupt=stop)
    reached = []

    def sleeper():
        yield clock.now() + 30.0
        reached.append("woke")  # never: the interrupt ends the process at its wait

    thread = clock.spawn(sleeper())
    stop.set()
    thread.join(2.0)
    assert not thread.is_alive() and reached == [] and thread.error is None
    with pytest.raises(TypeError, match="threading.Event"):
        WallClock(interrupt=True)


class _PhasedLatency:
    """Declares ``first`` seconds per decision until ``switch_at`` virtual seconds, then ``then``
    (a model whose inference gets faster, e.g. after a hardware change)."""

    def __init__(self, clock, first: float, then: float, switch_at: float) -> None:
        self.clock, self.first, self.then, self.switch_at = clock, first, then, switch_at

    def act(self, obs):
        from nonstop.policies.base import Decision

        return Decision(1, self.first if self.clock.now() < self.switch_at else self.then)


def test_auto_pool_grows_from_one_worker_until_inaction_is_gone():
    """n_inference='auto': one worker with a 5-tick latency leaves 4 ticks in 5 to β; after its
    first action the pool grows to ceil(τ̄_θ/τ_M) = 5 workers and inaction falls to zero."""
    with Session("theory/inaction", clock="virtual", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(5 * TAU), seed=i)

        pool = InferencePool(world, policy, "auto", n_inference="auto").start()
        assert pool.n_inference == 1
        world.run_for(300 * TAU)
        pool.stop()
    log = world.tick_log
    assert pool.n_inference == 5 and [e.kind for e in pool.events] == ["grew"]
    source, tick = log["source"], log["tick"]
    assert source[tick < 5].sum() == 0 and source[tick == 5].sum() == 1  # the lone first inference: β meanwhile
    assert log.summary(warmup_ticks=20)["inaction_ticks"] == 0
    assert all(w.actions > 0 for w in pool.workers)


def test_auto_pool_shrinks_when_inference_gets_faster():
    with Session("theory/inaction", clock="virtual", seed=0) as world:
        clock = world.clock
        pool = InferencePool(
            world, lambda i: _PhasedLatency(clock, 8 * TAU, 2 * TAU, switch_at=100 * TAU), "auto", n_inference="auto"
        ).start()
        world.run_for(100 * TAU)
        assert pool.n_inference == 8
        world.run_for(500 * TAU)
        pool.stop()
    # τ̄_θ is the running mean over every inference, so it falls slowly and the pool shrinks in steps
    assert pool.n_inference < 8 and "shrank" in [e.kind for e in pool.events]
    s = world.tick_log.summary(warmup_ticks=30)
    assert s["inaction_ticks"] == 0, s["inaction_ticks"]
    assert sum(w.actions for w in pool.workers[pool.n_inference :]) > 0  # retired ones did act before


def test_n_inference_auto_needs_the_auto_scheduler():
    with Session("theory/inaction", clock="virtual", seed=0) as world:
        policy = lambda i: ConstantPolicy(world.action_space, 1)  # noqa: E731
        with pytest.raises(ValueError, match="only the 'auto' scheduler"):
            InferencePool(world, policy, "max_time", n_inference="auto")
        with pytest.raises(ValueError, match="needs n_inference"):
            InferencePool(world, policy, "exp_time")
        with pytest.raises(ValueError, match="contradicts"):
            InferencePool(world, policy, make_scheduler("max_time", 3), n_inference=4)
        assert InferencePool(world, policy, "max_time", n_inference=3).n_inference == 3


def test_quantile_hold_pool_frees_workers_and_releases_one_action_per_tick_virtual():
    """Constant 3-tick latency: 3 workers suffice, every tick after warm-up is an agent's, each
    action is 3 ticks old; the scheduler is bound to the session's τ_M and tick grid."""
    with Session("theory/inaction", clock="virtual", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(3 * TAU), seed=i)

        pool = InferencePool(world, policy, "quantile_hold", n_inference=3).start()
        world.run_for(200 * TAU)
        pool.stop()
    assert pool.scheduler.period == pytest.approx(TAU) and pool.frees_workers and not pool.align_to_ticks
    s = world.tick_log.summary(warmup_ticks=10)
    assert s["inaction_ticks"] == 0 and s["delay_max_ticks"] == 3 and s["delay_mean_ticks"] == 3
    assert pool.scheduler.skipped_slots == 0


@pytest.mark.wall
def test_quantile_hold_pool_on_the_wall_clock_holds_actions_in_the_releaser():
    """The wall path: held actions are submitted by the clock's timer thread at their release ticks.
    Generous bounds (a loaded 2-core machine wakes threads late): most ticks are the agent's."""
    with Session("theory/inaction", clock="wall", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(3 * TAU), seed=i)

        pool = InferencePool(world, policy, "quantile_hold", n_inference=5).start()
        world.run_for(1.5)
        pool.stop()
    timers = pool._timing._timers
    assert timers is not None and not timers.alive and timers.error is None  # the pool stopped its clock's timers
    s = world.tick_log.summary(warmup_ticks=15)
    assert s["agent_ticks"] > 0.6 * (s["agent_ticks"] + s["inaction_ticks"])
    assert sum(w.actions for w in pool.workers) > 40


@pytest.mark.wall
def test_wall_tau_theta_as_the_world_sees_it_counts_the_lag_before_the_call():
    """τ_θ is the call; the world's τ_θ runs from the start the schedule counts (a tick's publish,
    for an aligned pool) to the action in hand, so a worker that reaches its call late is busy for
    that long too (a Ray actor's sleep, a model's compute: the call itself takes the time). A slot
    read made 5 ms slow puts 5 ms between the two on every inference."""
    import time

    from nonstop.policies.base import Decision

    class SlowRead:
        def __init__(self, slot):
            self.slot = slot

        def read(self):
            time.sleep(0.005)
            return self.slot.read()

    class Computes:  # the call takes 2.5 ticks (a model's forward pass, a remote call)
        def act(self, obs):
            time.sleep(2.5 * TAU)
            return Decision(1)

    with Session("theory/inaction", clock="wall", seed=0) as world:
        slow = world.slots[0] = SlowRead(world.slots[0])
        pool = InferencePool(world, lambda i: Computes(), "exp_time", n_inference=3).start()
        try:
            assert pool.align_to_ticks
            world.run_for(1.0)
        finally:
            pool.stop()
            world.slots[0] = slow.slot  # the session unlinks its own slot
    pairs = [(w, t) for state in pool.workers for w, t in zip(state.world_taus, state.tau_thetas)]
    assert len(pairs) > 20
    lags = np.array([w - t for w, t in pairs])
    assert lags.min() >= 0.004  # the slow read, less the half-millisecond an aligned start counts after the publish
    assert np.median(lags) < 3 * TAU  # not some other origin
    report = pool.report()
    assert report["tau_theta_world_mean_s"] > report["tau_theta_mean_s"] + 0.004


class _StartsLater:
    """A policy built without waiting, like ProcessPolicy/RayPolicy(wait=False): it records when it
    was built and waited for, and can fail its start."""

    def __init__(self, i, journal, space, fail=False):
        self.i, self.journal, self.fail, self.closed = i, journal, fail, False
        self.inner = ConstantPolicy(space, 1)
        journal.append(("built", i))

    def wait_started(self):
        self.journal.append(("waited", self.i))
        if self.fail:
            raise RuntimeError(f"policy {self.i} did not start")
        return self

    def act(self, obs):
        return self.inner.act(obs)

    def close(self):
        self.closed = True


def test_pool_starts_every_policy_before_waiting_for_any():
    """Process and Ray workers start together: N model processes cost about one start on N cores,
    not N starts one after another while β plays. Measured on 2 cores: 4 process workers left
    4.8 s of β before the first action, 2.6 s started together; 4 Ray actors 5.7 s, 3.5 s."""
    journal, built = [], {}
    with Session("CartPole", clock="virtual", seed=0) as world:

        def policy(i):
            built[i] = _StartsLater(i, journal, world.action_space)
            return built[i]

        pool = InferencePool(world, policy, make_scheduler("max_time", 3)).start()
        try:
            world.run_for(1.0)
        finally:
            pool.stop()
    assert journal[:3] == [("built", 0), ("built", 1), ("built", 2)]
    assert sorted(journal[3:]) == [("waited", 0), ("waited", 1), ("waited", 2)]
    assert all(w.actions > 0 for w in pool.workers)


def test_pool_whose_policy_fails_to_start_releases_every_policy_it_built():
    journal, built = [], {}
    with Session("CartPole", clock="virtual", seed=0) as world:

        def policy(i):
            built[i] = _StartsLater(i, journal, world.action_space, fail=(i == 1))
            return built[i]

        pool = InferencePool(world, policy, make_scheduler("max_time", 3))
        with pytest.raises(RuntimeError, match="policy 1 did not start"):
            pool.start()
    assert all(p.closed for p in built.values()) and len(built) == 3
    assert pool._policies == {}


def test_process_policy_built_without_waiting_waits_on_its_first_act():
    policy = ProcessPolicy(functools.partial(_mlp_policy, 4, 2), wait=False)
    try:
        decision = policy.act(np.zeros(4, np.float32))  # a restarted worker's first call: it waits for the start
        assert decision.action in (0, 1)
        assert policy.wait_started() is policy  # already started: returns at once
    finally:
        policy.close()


def _wall_inaction(scheduler: str, n: int, latency, *, seconds: float, warmup: int) -> dict:
    """The tick-log summary of ``n`` thread workers (latency policies: they sleep, no CPU) on the
    wall clock, after ``warmup`` ticks from when they started, with the pool's report."""
    with Session("theory/inaction", clock="wall", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), latency, seed=i)

        pool = InferencePool(world, policy, make_scheduler(scheduler, n)).start()
        try:
            started = world.slot.read().tick
            world.run_for(seconds)
            end = world.slot.read().tick  # the ticks made while the pool stops are β's
        finally:
            pool.stop()
    return {
        **world.tick_log.summary(warmup_ticks=started + warmup, end_tick=end),
        "pool": world.tick_log.meta["workers"],
    }


@pytest.mark.wall
@pytest.mark.parametrize("scheduler", ["max_time", "exp_time"])
def test_wall_stagger_of_a_latency_between_ticks_covers_every_tick_at_theory(scheduler):
    """On the wall clock starts snap to ticks, so τ_θ = 5.4 ticks cycles in 6. Spaced relatively,
    by 5.4/N = 0.9 ticks, the snapped starts left one tick in six to β at N = 6..9 (16.6 %
    inaction; theory ⌈5.4⌉ = 6). Each worker now holds its phase of the 6-tick cycle."""
    s = _wall_inaction(scheduler, 6, Constant(5.4 * TAU), seconds=4.0, warmup=30)
    assert s["inaction_fraction"] < 0.05, s  # a loaded machine's late wake-ups may cost a tick now and then
    assert s["delay_mean_ticks"] == pytest.approx(6.0, abs=0.5)  # every action lands 6 ticks after its observation
    assert s["pool"]["tick_cycle"] == 6


@pytest.mark.wall
@pytest.mark.parametrize("scheduler", ["max_time", "exp_time"])
def test_wall_stagger_of_a_ray_like_latency_holds_phases(scheduler):
    """5 ticks + a lognormal call overhead (p50 0.2, p99 0.56 ticks, as a Ray actor's): aligned
    cycles of 5 or 6 ticks. Algorithm 2 spaced relatively left 30 % inaction at N = 6 (it needed
    33 to 36 workers); re-spaced by whole-tick jumps Algorithm 1 left 33 %. On phases of a 6-tick
    cycle both cover every tick with 7 workers (one spare for a loaded machine's wake-ups)."""
    rng = np.random.default_rng(0)
    sigma = np.log(0.56 / 0.2) / 2.326
    ray_like = Empirical((5.0 + 0.2 * np.exp(sigma * rng.standard_normal(2000))) * TAU, source="ray-like")
    s = _wall_inaction(scheduler, 7, ray_like, seconds=5.0, warmup=60)
    assert s["inaction_fraction"] < 0.05, s
