"""Asynchronous learning: shared weights, the DQN update, learners, the sequential baselines."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import threading
import time

import numpy as np
import pytest
import torch

from nonstop.learning.dqn import DQNConfig, compute_gradient, epsilon_at
from nonstop.learning.optim import apply_gradient, init_training
from nonstop.learning import weights as weights_module
from nonstop.learning.learners import (
    GradientSlots,
    Learner,
    LearnerProcesses,
    LearnerSettings,
    Segments,
    VirtualLearners,
)
from nonstop.learning.replay import Batch, ReplayBuffer
from nonstop.learning.weights import SharedWeights, TrainingState, flat_parameters, load_flat
from nonstop.policies.models import MLP
from nonstop.realtime.atomics import FUTEX
from nonstop.realtime.clock import VirtualClock
from nonstop.experiment import TrainConfig, train

CLASSIC = DQNConfig.for_family("classic", learning_starts=50, batch_size=8)


# ----------------------------------------------------------------------------- weights


def _publish_uniform(weights: SharedWeights, seconds: float, ready) -> None:
    ready.set()
    end = time.monotonic() + seconds
    v = 0
    while time.monotonic() < end:
        v += 1
        weights.publish(np.full(weights.n_params, v, np.float32))
    weights.close()


@pytest.mark.slow
def test_weights_are_never_read_half_written_across_processes(no_shm_leak):
    weights = SharedWeights.create(200_000)  # 800 kB: a copy takes long enough to be overtaken
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    writer = ctx.Process(target=_publish_uniform, args=(weights, 1.0, ready), daemon=True)
    writer.start()
    try:
        assert ready.wait(60)
        out = np.empty(weights.n_params, np.float32)
        versions = []
        while writer.is_alive():
            v = weights.read_into(out)
            if v == 0:
                continue
            assert out.min() == out.max() == v, "a reader saw a half-written model"
            versions.append(v)
        writer.join(10)
        assert len(versions) > 10 and versions == sorted(versions)
    finally:
        if writer.is_alive():
            writer.kill()
        weights.unlink()


def test_flat_parameters_round_trip():
    a, b = MLP(4, 2), MLP(4, 2)
    flat = flat_parameters(a)
    load_flat(b, flat)
    x = torch.randn(3, 4)
    assert torch.equal(a(x), b(x))
    flat[:] = 0  # the model holds a copy: reusing the buffer for the next version cannot change it
    assert torch.equal(a(x), b(x))
    with pytest.raises(ValueError, match="parameters"):
        load_flat(b, np.zeros(3, np.float32))


# ----------------------------------------------------------------------------- DQN


def _batch(n: int = 8, discount: float = 0.0, seed: int = 0) -> Batch:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    return Batch(
        obs,
        rng.integers(0, 2, n),
        rng.normal(size=n).astype(np.float32),
        np.full(n, discount, np.float32),
        rng.normal(size=(n, 4)).astype(np.float32),
        np.ones(n, np.int32),
    )


def test_done_masking_makes_the_target_the_reward():
    torch.manual_seed(0)
    online, target = MLP(4, 2, (8,)), MLP(4, 2, (8,))
    batch = _batch(discount=0.0)
    _, loss = compute_gradient(online, target, batch, CLASSIC)
    q = online(torch.from_numpy(batch.obs)).gather(1, torch.from_numpy(batch.action).long()[:, None]).squeeze(1)
    expected = torch.nn.functional.smooth_l1_loss(q, torch.from_numpy(batch.reward))
    assert loss == pytest.approx(float(expected.detach()), rel=1e-5)


def test_updates_reduce_the_loss_and_sync_the_target(no_shm_leak):
    torch.manual_seed(0)
    cfg = DQNConfig.for_family("classic", lr=1e-2, target_update=5)
    model = MLP(4, 2, (16,))
    n = sum(p.numel() for p in model.parameters())
    state, weights = TrainingState.create(n), SharedWeights.create(n)
    try:
        init_training(model, state, weights)
        batch = _batch(discount=0.0)
        first = None
        for _ in range(40):
            load_flat(model, state.params)
            grad, loss = compute_gradient(model, MLP(4, 2, (16,)), batch, cfg)
            first = first if first is not None else loss
            apply_gradient(state, weights, grad, cfg)
        assert loss < first / 2
        assert state.updates == 40 and weights.version == 41  # the initial publish + one per update
        assert state.target_version == 40 // 5 * 2  # a seqlock: two steps per sync
        assert np.array_equal(state.target, state.params)  # synced at update 40
    finally:
        state.unlink()
        weights.unlink()


@pytest.mark.slow
def test_shared_memory_adam_matches_torch_optim_adam(no_shm_leak):
    """The hand-written Adam on the shared master parameters is torch.optim.Adam, step for step
    (bias correction included), so a user's optimiser intuitions carry over."""
    torch.manual_seed(3)
    cfg = DQNConfig.for_family("classic", lr=3e-3, adam_eps=1e-6, target_update=1000)
    model, reference = MLP(4, 3, (8,)), MLP(4, 3, (8,))
    reference.load_state_dict(model.state_dict())
    optimiser = torch.optim.Adam(reference.parameters(), lr=cfg.lr, betas=(0.9, 0.999), eps=cfg.adam_eps)
    n = sum(p.numel() for p in model.parameters())
    state, weights = TrainingState.create(n), SharedWeights.create(n)
    try:
        init_training(model, state, weights)
        rng = np.random.default_rng(0)
        for _ in range(25):
            grad = (rng.normal(0, 1, n) * rng.choice([1e-3, 1.0, 30.0])).astype(np.float32)  # scales Adam must absorb
            apply_gradient(state, weights, grad, cfg)
            offset = 0
            for p in reference.parameters():
                p.grad = torch.from_numpy(grad[offset : offset + p.numel()].copy()).reshape(p.shape)
                offset += p.numel()
            optimiser.step()
            expected = torch.cat([p.detach().reshape(-1) for p in reference.parameters()]).numpy()
            np.testing.assert_allclose(state.params, expected, rtol=1e-5, atol=1e-6)
        assert not np.allclose(state.params, flat_parameters(model))  # it moved: the comparison is not vacuous
    finally:
        state.unlink()
        weights.unlink()


def test_epsilon_anneal_and_config_validation():
    cfg = DQNConfig(epsilon_ticks=100)
    assert [round(epsilon_at(t, cfg), 3) for t in (0, 50, 100, 1000)] == [1.0, 0.525, 0.05, 0.05]
    with pytest.raises(ValueError, match="batch_size"):
        DQNConfig(batch_size=0)
    with pytest.raises(ValueError, match="unknown DQN settings"):
        DQNConfig.from_dict({"lr": 1e-3, "learning_rate": 1})
    with pytest.raises(ValueError, match="interaction"):
        TrainConfig(interaction="sideways")
    with pytest.raises(ValueError, match="learner_mode"):
        TrainConfig(learner_mode="lockstep")
    with pytest.raises(ValueError, match="n_learners"):
        TrainConfig(n_learners=0)


# ----------------------------------------------------------------------------- learners


def _filled_replay(n: int = 200) -> ReplayBuffer:
    rb = ReplayBuffer.create(capacity=256, obs_shape=(4,), dtype=np.float32)
    rng = np.random.default_rng(0)
    prev = rb.add_frame(rng.normal(size=4).astype(np.float32))
    for _ in range(n):
        f = rb.add_frame(rng.normal(size=4).astype(np.float32))
        rb.add_transition(prev, int(rng.integers(2)), 1.0, 0.9, 1, f)
        prev = f
    return rb


@pytest.fixture
def parts(no_shm_leak):
    """Master state, published weights and a filled replay for a tiny MLP (4 → 8 → 2), initialised."""
    torch.manual_seed(0)
    model = MLP(4, 2, (8,))
    n = sum(p.numel() for p in model.parameters())
    state, weights, replay = TrainingState.create(n), SharedWeights.create(n), _filled_replay()
    try:
        init_training(model, state, weights)
        yield state, weights, replay
    finally:
        for seg in (state, weights, replay):
            seg.unlink()


@contextlib.contextmanager
def _learner_processes(parts, cfg: DQNConfig, *, n_learners: int, mode: str, **kw):
    settings = LearnerSettings((4,), 2, cfg, n_learners=n_learners, mode=mode, seed=0)
    group = LearnerProcesses(settings, Segments(*parts), **kw)
    try:
        yield group.start()
    finally:
        group.stop()


def _wait(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


#: tiny updates are fast; no updates-per-transition cap, or the capped total (191 for this replay)
#: could be reached before a test's kill, leaving no room for the updates it waits for after it
TINY = DQNConfig.for_family("classic", learning_starts=10, batch_size=8, hidden=(8,), updates_per_transition=0)


@pytest.mark.parametrize("mode", ["round_robin", "hogwild", "parallel"])
def test_virtual_learners_apply_in_the_mode_order(mode, parts):
    state, weights, replay = parts
    clock = VirtualClock()
    settings = LearnerSettings((4,), 2, TINY, n_learners=3, mode=mode, tau_l=0.05)
    learners = [Learner(i, settings, Segments(*parts), seed=i) for i in range(3)]
    group = VirtualLearners(clock, 1 / 60, settings, learners=learners, segments=Segments(*parts)).start()
    clock.run_until(1.04)  # learner i applies at i·τ_L/3 + τ_L·j: 20 updates each by now
    if mode == "parallel":  # one averaged update per τ_L, all learners contributing
        assert state.updates == 20 and all(lr.gradients == 21 for lr in learners)
    else:  # each learner: one update per τ_L = 0.05 s, staggered by τ_L/3
        assert state.updates == 60
        assert group.applied_by[:9] == [0, 1, 2] * 3
    assert weights.version == state.updates + 1


@pytest.mark.wall
@pytest.mark.slow
def test_learner_processes_survive_a_kill_and_keep_the_turn(parts):
    state = parts[0]
    with _learner_processes(parts, TINY, n_learners=2, mode="round_robin") as group:
        _wait(lambda: state.updates >= 20)
        assert state.updates >= 20, "learners made no progress"
        group.kill(1)
        before = state.updates
        _wait(lambda: group.restarts[1] > 0 and state.updates >= before + 40)
        assert group.restarts[1] == 1 and state.updates >= before + 40, (group.report(), state.updates)
        assert np.isfinite(state.params).all()


@pytest.mark.wall
@pytest.mark.parametrize("mode", ["hogwild", "parallel"])
@pytest.mark.slow
def test_learner_processes_make_progress_in_every_mode(mode, parts):
    state, weights, _ = parts
    with _learner_processes(parts, TINY, n_learners=2, mode=mode):
        _wait(lambda: state.updates >= 30)
        assert state.updates >= 30 and np.isfinite(state.params).all()
        assert weights.version >= state.updates  # every update was published to the workers


def test_after_a_resume_without_replay_learners_pace_from_the_new_transitions(parts):
    state, weights, replay = parts
    cfg = DQNConfig.for_family("classic", learning_starts=10, hidden=(8,))  # one update per transition
    learner = Learner(0, LearnerSettings((4,), 2, cfg), Segments(state, weights, replay), seed=0)
    state.restore_counts(updates=5000, target_version=0)  # restored from a checkpoint...
    assert learner.ahead  # ...without its replay: 5000 updates for 190 fresh transitions
    state.mark_update_base(5000)  # what TrainingRun.restore records then
    assert not learner.ahead


@pytest.mark.wall
@pytest.mark.slow
def test_a_learner_dead_for_good_does_not_stall_the_round_robin(parts):
    state = parts[0]
    with _learner_processes(parts, TINY, n_learners=3, mode="round_robin", restart=False) as group:
        _wait(lambda: state.updates >= 10)
        group.kill(1)
        before = state.updates
        _wait(lambda: state.updates >= before + 30)
        assert state.updates >= before + 30, group.report()  # the other two keep taking turns
        assert group.processes[1] is None and group.restarts[1] == 0


def _pass_turn_later(state: TrainingState, passed, delay: float) -> None:
    time.sleep(delay)
    passed.value = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
    state.pass_turn(0)
    state.close()


@pytest.mark.wall
def test_a_learner_waiting_for_its_turn_wakes_when_another_process_passes_it(no_shm_leak):
    state = TrainingState.create(4)
    ctx = mp.get_context("spawn")
    passed = ctx.Value("d", 0.0)
    try:
        p = ctx.Process(target=_pass_turn_later, args=(state, passed, 0.3))
        p.start()
        try:
            deadline, rounds = time.monotonic() + 60.0, 0
            while state.turn == 0 and time.monotonic() < deadline:  # a wait may return early (a signal)
                state.wait_turn(0, timeout=30.0)
                rounds += 1
            woke = time.monotonic()
        finally:
            p.join(30)
        assert p.exitcode == 0 and state.turn == 1 and passed.value > 0
        assert woke - passed.value < 2.0  # woken by the pass, not by the 30 s timeout
        if FUTEX:  # slept in the kernel until the pass: not a polling loop's thousands of rounds
            assert rounds <= 3
    finally:
        state.unlink()


def _took(wait, move) -> float:
    """Seconds ``wait()`` took while ``move()`` ran on another thread 0.2 s after the wait began."""
    timer = threading.Timer(0.2, move)
    timer.start()
    t0 = time.monotonic()
    try:
        wait()
    finally:
        timer.join()
    return time.monotonic() - t0


@pytest.mark.wall
def test_the_turn_the_round_a_gradient_a_death_and_a_stop_each_wake_who_waits_for_them(no_shm_leak):
    """Each waits 30 s at most; what it waits for wakes it (a sleep loop would poll; a wait that missed
    its wake-up would take the 30 s). A wait whose event has come returns at once."""
    state, grads, alone = TrainingState.create(4), GradientSlots.create(2 * 3), GradientSlots.create(2 * 3)
    ones = np.ones(3, np.float32)
    try:
        assert _took(lambda: state.wait_turn(0, 30.0), lambda: state.finish_round(0)) < 5.0 and state.turn == 1
        assert _took(lambda: state.wait_turn(1, 30.0), state.request_stop) < 5.0 and state.stop_requested
        assert _took(lambda: state.wait_turn(0, 30.0), lambda: None) < 1.0  # the turn is 1 already
        grads.hand_in(0, 0, ones)
        assert _took(lambda: grads.wait_for_hand_in(0, 2, 30.0), lambda: grads.hand_in(1, 0, ones)) < 5.0
        assert not grads.missing(0, 2)
        grads.hand_in(0, 1, ones)
        assert _took(lambda: grads.wait_for_hand_in(1, 2, 30.0), lambda: grads.mark_dead(1)) < 5.0
        assert not grads.missing(1, 2) and grads.handed_in(1, 2) == [0]
        assert _took(lambda: grads.wait_for_hand_in(1, 2, 30.0), lambda: None) < 1.0  # none missing
        alone.hand_in(0, 0, ones)
        assert _took(lambda: alone.wait_for_hand_in(0, 2, 30.0), alone.wake_waiters) < 5.0  # stopping
        assert alone.missing(0, 2)
    finally:
        for seg in (state, grads, alone):
            seg.unlink()


@pytest.mark.wall
def test_a_learner_waits_for_a_target_copy_being_written_to_end(no_shm_leak):
    state = TrainingState.create(4)
    try:
        assert _took(lambda: state.wait_for_target(30.0), lambda: None) < 1.0  # complete: no wait
        state._hdr.store(weights_module._TARGET_VERSION, 1)  # a writer killed mid-copy left the version odd
        assert _took(lambda: state.wait_for_target(30.0), state.write_target) < 5.0  # the next copy ends it
        assert state.target_version == 2
    finally:
        state.unlink()


# ----------------------------------------------------------------------------- whole runs


def _run(interaction: str, **kw):
    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    cfg = TrainConfig(
        env="CartPole", seconds=6.0, interaction=interaction, latency="3t", tau_l=2 / 50, algo_settings=dqn, **kw
    )
    return train(cfg)


def test_sequential_baselines_act_every_tau_theta_plus_tau_l(no_shm_leak):
    """τ_θ = 3 ticks, τ_L = 2 ticks: both loops act every 5 ticks, except that an action
    computed in an episode that ended meanwhile is dropped as stale (CartPole's early
    episodes are short); infer-then-learn acts 3 ticks after its observation, learn-then-infer 5."""
    for interaction, delay in (("infer_then_learn", 3), ("learn_then_infer", 5)):
        r = _run(interaction)
        log = r["tick_log"]
        agent_ticks = log["tick"][log["source"] == 1]
        gaps = np.diff(agent_ticks)
        assert (gaps % 5 == 0).all() and np.median(gaps) == 5, (interaction, gaps)
        inside = (log["tick"] > agent_ticks[0]) & (log["tick"] < agent_ticks[-1])
        assert int((gaps // 5 - 1).sum()) == int(log["stale"][inside].sum()), (
            interaction
        )  # each lost slot: a stale drop
        assert (log["delay"][log["source"] == 1] == delay).all(), interaction
        assert r["updates"] > 20


def test_staggered_learning_never_costs_an_action(no_shm_leak):
    """Same model latency, N_I = 3 staggered workers, learners updating every 2 ticks:
    after the first round the agent acts at every tick, except where an action in flight
    was computed in an episode that has just ended (dropped as stale, never applied)."""
    r = _run("staggered")
    log = r["tick_log"]
    late = log["tick"] > 10
    beta = late & (log["source"] == 0)
    assert (log["stale"][beta] > 0).all()
    assert beta.sum() <= 2 * log["terminated"].sum()  # at most τ_θ/τ_M − 1 per episode end
    assert r["n_inference"] == 3 and r["updates"] > 100
    assert r["transitions"] > 250  # one decision per tick


def test_auto_inference_grows_to_act_at_every_tick(no_shm_leak):
    cfg = TrainConfig(
        env="CartPole",
        seconds=8.0,
        latency="4t",
        n_inference="auto",
        tau_l=0.1,
        algo_settings=DQNConfig.for_family("classic", learning_starts=20, batch_size=8),
    )
    assert cfg.scheduler == "auto"
    r = train(cfg)
    log = r["tick_log"]
    late = log["tick"] > 200
    beta = late & (log["source"] == 0)
    assert beta.sum() <= (log["stale"][late] > 0).sum()  # past the growth, only stale drops at episode ends
    assert r["summary"]["agent_ticks"] > 300


def test_an_inference_worker_killed_mid_training_is_covered_and_restarted(no_shm_leak):
    from nonstop.experiment import TrainingRun

    cfg = TrainConfig(
        env="CartPole",
        seconds=1.0,
        latency="3t",
        tau_l=0.04,
        algo_settings=DQNConfig.for_family("classic", learning_starts=20, batch_size=8),
    )
    run = TrainingRun(cfg)
    try:
        run.build().start()
        run.advance(2.0)
        run.pool.kill(1)
        run.advance(4.0)
        updates = run.updates
    finally:
        run.teardown()
    log = run.world.tick_log
    events = [e[2] for e in log.meta["workers"]["events"]]
    assert events == ["died", "restarted"]
    after = log["tick"] > 200  # well after the restart: the stagger re-converged, only stale drops remain
    assert ((log["source"][after] == 1) | (log["stale"][after] > 0)).all()
    assert updates > 50  # learning went on throughout


@pytest.mark.parametrize("tau_l_ticks, batch", [(15, 4), (6, 2), (5, 8), (26, 3)])
def test_nlstar_formula_matches_a_measured_sweep_of_learners(tau_l_ticks, batch, parts):
    """N_L* = ⌈τ_L/(B·τ_M)⌉ against a measurement: on the virtual clock a producer adds one transition
    per tick to the replay and N_L `VirtualLearners` each take τ_L per update of B transitions; after
    two updates each, over 30·τ_L, a trial keeps pace when updates × B reach the transitions made (to
    within the window's one-tick edge). `find_nstar` searches N_L from 1: the measured N_L* is the
    formula's, one learner fewer falls measurably behind, and the share learned is N_L·B·τ_M/τ_L."""
    from nonstop.metrics.nstar import find_nstar, theoretical_nlstar

    state, weights, replay = parts
    tau_m, tau_l = 1 / 60, tau_l_ticks / 60
    cfg = DQNConfig.for_family("classic", learning_starts=10, batch_size=batch, hidden=(8,), updates_per_transition=0)
    rng = np.random.default_rng(0)
    start, window = 2 * tau_l + 0.3 * tau_m, 30 * tau_l  # off the ticks and the learners' phases

    def producer(clock: VirtualClock, made: list[int]):
        prev = replay.add_frame(rng.normal(size=4).astype(np.float32))
        t = clock.now()
        while True:
            t += tau_m
            yield (t, 1)
            frame = replay.add_frame(rng.normal(size=4).astype(np.float32))
            replay.add_transition(prev, int(rng.integers(2)), 1.0, 0.9, 1, frame)
            prev = frame
            made[0] += 1

    def learned_share(n: int) -> float:
        clock, made = VirtualClock(), [0]
        settings = LearnerSettings((4,), 2, cfg, n_learners=n, mode="hogwild", tau_l=tau_l)
        segments = Segments(state, weights, replay)
        learners = [Learner(i, settings, segments, seed=i) for i in range(n)]
        clock.spawn(producer(clock, made), name="producer", priority=1)
        group = VirtualLearners(clock, tau_m, settings, learners=learners, segments=segments).start()
        clock.run_until(start)
        updates, transitions = state.updates, made[0]
        clock.run_until(start + window)
        group.stop()
        return (state.updates - updates) * batch / (made[0] - transitions)

    edge = 1.5 / (window / tau_m)  # one transition more or less in the window
    nstar, trials = find_nstar(learned_share, guess=1, passes=lambda share: share >= 1 - edge)
    assert nstar == theoretical_nlstar(tau_l, batch, tau_m)
    if nstar > 1:
        assert trials[nstar - 1] < 0.95  # one learner fewer learns from visibly fewer transitions
    for n, share in trials.items():
        assert share == pytest.approx(n * batch / tau_l_ticks, rel=edge)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("n_learners", 0),
        ("mode", "lockstep"),
        ("obs_shape", (4, 0)),
        ("torch_threads", 0),
        ("tau_l", -1.0),
        ("seed", 1.5),
    ],
)
def test_learner_settings_refuse_a_bad_field_in_one_line_that_names_it(field, bad):
    with pytest.raises(ValueError) as err:
        LearnerSettings(**{"obs_shape": (4,), "action_space": 2, "cfg": TINY, field: bad})
    line = str(err.value)
    assert "\n" not in line and (field in line or repr(bad) in line)


def test_learner_settings_are_frozen_and_hold_the_shape_as_a_tuple():
    settings = LearnerSettings([84, 84], 18, TINY)
    assert settings.obs_shape == (84, 84)
    with pytest.raises(AttributeError):
        settings.mode = "hogwild"  # type: ignore[misc]
