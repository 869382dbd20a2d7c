"""The action buffer (`nonstop.inference.inflight`): what a pool knows of its actions in flight, checked
against the tick log at every tick a worker read, on the virtual clock (exact) and the wall clock
(generous bounds)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from nonstop.inference.inflight import ActionBuffer, buffer_slots, due_tick_of
from nonstop.inference.schedulers import make_scheduler
from nonstop.inference.workers import InferencePool
from nonstop.policies import Constant, LatencyPolicy, LogNormal, RandomPolicy
from nonstop.realtime.host import Session

SOURCE_AGENT = 1


class AppliedActions:
    """A host recorder that keeps the action applied at each tick (the tick log has no column for a Box action)."""

    def __init__(self) -> None:
        self.by_tick: dict[int, np.ndarray] = {}

    def on_observation(self, tick: int, obs: Any) -> None:
        pass

    def on_tick(self, tick: int, *, agent: bool, action: Any, **_: Any) -> None:
        if agent:
            self.by_tick[tick] = np.asarray(action, np.float32).reshape(-1)


def run_pool(
    latency: Any, n: int, k: int, *, clock: str, seconds: float, scheduler: str = "max_time"
) -> tuple[ActionBuffer, dict[str, np.ndarray], AppliedActions]:
    applied = AppliedActions()
    with Session("Pendulum-v1", clock=clock, seed=0, recorder=applied, host_mode="thread") as world:
        buf = ActionBuffer(world.action_space, k=k)
        lat = latency(world.tau_m)

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(RandomPolicy(world.action_space, seed=i), lat, seed=i)

        pool = InferencePool(world, policy, make_scheduler(scheduler, n), inflight=buf).start()
        world.run_for(seconds)
        pool.stop()
    return buf, world.tick_log.columns(), applied


def check_against_log(buf: ActionBuffer, log: dict[str, np.ndarray], applied: AppliedActions) -> tuple[int, int, int]:
    """Every slot of every encoding a worker saw, against the log. A slot names a decision of the pool
    (its observation tick and action); the log applies that decision at the decision's due tick, with
    that action, unless that tick superseded actions (then it applied another of them) or the episode
    ended first (stale). A slot's due tick is the one known at the read: a later pad or hold only
    moves it later. And every action the log applies after ``t`` on an observation before ``t`` is in
    the buffer at ``t`` (within its K newest). Returns (slots checked, slots that disagree, slots
    whose due tick moved after the read)."""
    agent = log["source"] == SOURCE_AGENT
    by_tick = {
        int(t): (int(o), int(s), int(e))
        for t, o, s, e, a in zip(log["tick"], log["obs_tick"], log["superseded"], log["episode"], agent)
        if a
    }
    episode_of = dict(zip(log["tick"].tolist(), log["episode"].tolist()))
    episode_of[0] = 0
    final = {(d.episode, d.obs_tick, d.action.tobytes()): d.due_tick for d in buf.decisions()}
    last = int(log["tick"][-1])
    checked = bad = moved = 0
    for t in range(0, last + 1 - 3 * buf.k):  # at the end, decisions were still in their workers' hands
        episode = episode_of[t]
        enc = buf.seen(t, episode=episode)
        if enc is None:
            continue
        slots = [s for s in enc.reshape(buf.k, buf.slot_width) if s[-1] > 0]  # padding has no observation age
        seen = set()
        for s in slots:
            obs_tick, action = t - int(s[-1]), s[:-2]
            seen.add(obs_tick)
            due = final[(episode, obs_tick, action.tobytes())]
            checked += 1
            moved += t + int(s[-2]) != due
            bad += t + int(s[-2]) > due
            if due > last or episode_of[due] != episode:
                continue  # due after the episode ends: the host drops it as stale (counted in the log)
            row = by_tick.get(due)
            if row is None or row[0] != obs_tick or not np.allclose(applied.by_tick[due], action):
                bad += row is None or row[1] == 0  # a superseding tick applies one of several actions
        expect = sorted((o for u, (o, _, e) in by_tick.items() if u > t and o < t and e == episode), reverse=True)
        for o in expect[: buf.k]:
            if len(slots) < buf.k or o >= min(seen):
                checked += 1
                bad += o not in seen
    return checked, bad, moved


def test_encoding_by_hand() -> None:
    buf = ActionBuffer(gym.spaces.Discrete(3, start=1), k=3)
    buf.decided("a", obs_tick=2, episode=0, action=3, due_tick=5)
    buf.decided("b", obs_tick=3, episode=0, action=1, due_tick=6)
    buf.decided("old", obs_tick=1, episode=-1, action=2, due_tick=4)  # another episode: stale, never shown
    buf.moved("b", 7)
    assert buf.encode(4, episode=0).reshape(3, 5).tolist() == [
        [1, 0, 0, 3, 1],  # one-hot of action 1 (start 1), due in 3 ticks, computed 1 tick ago
        [0, 0, 1, 1, 2],
        [0, 0, 0, 0, 0],
    ]
    assert buf.encode(3, episode=0).reshape(3, 5)[:, -1].tolist() == [1, 0, 0]  # obs tick 3 is not before tick 3
    out = buf.augment(np.ones(2, np.float32), tick=4, episode=0)
    assert out.shape == (2 + 15,) and np.array_equal(buf.seen(4, episode=0), out[2:])
    assert buf.augmented_shape((3,)) == (18,)
    with pytest.raises(ValueError, match="vector observations"):
        buf.augmented_shape((84, 84))
    with pytest.raises(ValueError, match="k >= 1"):
        ActionBuffer(gym.spaces.Discrete(2), k=0)
    assert buffer_slots(0.3, 0.05) == 6 and due_tick_of(0.15, origin=0.05, tau_m=0.05) == 2


def test_buffer_matches_the_tick_log_at_every_tick_virtual() -> None:
    buf, log, applied = run_pool(lambda tau_m: Constant(6 * tau_m), 6, 6, clock="virtual", seconds=30.0)
    checked, bad, moved = check_against_log(buf, log, applied)
    assert bad == 0 and moved == 0 and checked > 6 * 500
    # staggered and settled: at each tick the six slots are due in 0..5 ticks, computed 6..1 ticks ago
    enc = buf.seen(300, episode=int(log["episode"][300])).reshape(6, buf.slot_width)
    assert enc[:, -2].tolist() == [5, 4, 3, 2, 1, 0] and enc[:, -1].tolist() == [1, 2, 3, 4, 5, 6]
    assert (log["delay"][log["source"] == SOURCE_AGENT][-100:] == 6).all()


def test_each_buffered_action_carries_its_own_delay_virtual() -> None:
    # a lognormal τ_θ: delays vary, every slot's due tick still names the tick its action landed at
    buf, log, applied = run_pool(lambda tau_m: LogNormal(3 * tau_m, 0.4), 4, 8, clock="virtual", seconds=30.0)
    checked, bad, moved = check_against_log(buf, log, applied)
    delays = log["delay"][log["source"] == SOURCE_AGENT]
    assert len(set(delays.tolist())) >= 3  # the delay really varies
    assert checked > 1000 and bad == 0
    assert 0 < moved < checked  # Algorithm 1 pads a short inference to the running maximum after the read


def test_fill_moves_due_ticks_to_release_slots_virtual() -> None:
    buf, log, applied = run_pool(
        lambda tau_m: LogNormal(3 * tau_m, 0.3), 6, 8, clock="virtual", seconds=20.0, scheduler="fill"
    )
    checked, bad, moved = check_against_log(buf, log, applied)
    assert checked > 500 and bad == 0 and moved > 0


@pytest.mark.wall
def test_buffer_matches_the_tick_log_wall_clock() -> None:
    buf, log, applied = run_pool(lambda tau_m: Constant(3 * tau_m), 3, 3, clock="wall", seconds=3.0)
    checked, bad, _ = check_against_log(buf, log, applied)
    assert checked > 60 and bad <= 0.1 * checked  # threads on a busy machine: a generous bound


class SeeingPolicy(RandomPolicy):
    """A random policy that keeps every observation it was handed (the augmented one)."""

    def __init__(self, space: gym.Space, seed: int, sink: list[np.ndarray]) -> None:
        super().__init__(space, seed=seed)
        self.sink = sink

    def act(self, obs: Any) -> Any:
        self.sink.append(np.array(obs, copy=True))
        return super().act(obs)


def test_the_replay_stores_the_observation_the_actor_saw() -> None:
    from nonstop.learning.inflight import InFlightRecorder
    from nonstop.learning.replay import ReplayBuffer

    with Session("CartPole-v1", clock="virtual", seed=0) as probe:
        space, obs_dim, tau_m = probe.action_space, probe.observation_space.shape[0], probe.tau_m
    buf = ActionBuffer(space, k=3)
    replay = ReplayBuffer.create(capacity=4096, obs_shape=buf.augmented_shape((obs_dim,)), dtype=np.float32)
    try:
        recorder = InFlightRecorder(replay, buf, gamma=0.99)
        seen: list[np.ndarray] = []
        with Session("CartPole-v1", clock="virtual", seed=0, recorder=recorder) as world:
            pool = InferencePool(
                world,
                lambda i: LatencyPolicy(SeeingPolicy(space, i, seen), Constant(3 * tau_m)),
                make_scheduler("max_time", 3),
                inflight=buf,
            ).start()
            world.run_for(400 * tau_m)
            pool.stop()
        n = replay.size
        assert n > 300 and recorder.skipped_old == 0
        frames = replay.frames[replay.cols["s_frame"][:n] % replay.frame_capacity]
        actor_saw = {a.tobytes() for a in seen}
        assert all(f.tobytes() in actor_saw for f in frames)  # every s is an observation an actor acted on
        in_flight = frames[:, obs_dim:].reshape(n, 3, -1)
        full = in_flight[(in_flight[:, :, -1] > 0).all(axis=1)]  # episodes are short: after their first ticks
        settled = (full[:, :, -1] == [1, 2, 3]).all(axis=1) & (full[:, :, -2] == [2, 1, 0]).all(axis=1)
        assert len(full) > n // 2 and settled.mean() > 0.9  # staggered: due in 2, 1, 0 ticks, computed 1..3 ago
    finally:
        replay.unlink()
    with pytest.raises(TypeError, match="host's own process"):
        import pickle

        pickle.dumps(recorder)


def test_train_delay_aware_feeds_the_actor_and_the_replay_the_buffer() -> None:
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.run import Run
    from nonstop.learning.dqn import DQNConfig

    small = DQNConfig.for_family("classic", replay_capacity=2000, learning_starts=100, batch_size=8, hidden=(16,))
    cfg = TrainConfig(
        env="CartPole-v1", clock="virtual", seconds=8.0, latency="3t", delay_aware=True, algo_settings=small
    )
    run = Run(cfg)
    assert run.spec.inflight_k == 3 and run.obs_shape == (4 + 3 * 4,)  # 3 slots of (one-hot of 2, due, age)
    try:
        run.build().start()
        run.advance(8.0)
        replay = run.learning.replay
        n = replay.size
        assert n > 100
        ages = replay.frames[replay.cols["s_frame"][:n] % replay.frame_capacity][:, 4:].reshape(n, 3, 4)[:, :, -1]
        assert (ages == [1, 2, 3]).all(axis=1).mean() > 0.5  # the buffer the pool's workers handed the actor
    finally:
        run.teardown()
    with pytest.raises(ValueError, match="--delay-aware"):
        TrainConfig(env="CartPole-v1", delay_aware=True, self_play=True)


def test_observation_framed_transitions_close_on_the_terminal_observation() -> None:
    from nonstop.learning.inflight import ObservationFramedBuilder
    from nonstop.learning.replay import TERMINAL

    b = ObservationFramedBuilder(gamma=0.5)
    got = []
    # decisions on observations 0 (lands at 2) and 1 (lands at 3); a late one on 0 (lands at 4); the episode ends at 5
    for t, r in zip(range(1, 6), [1.0, 2.0, 4.0, 8.0, 16.0]):
        got += b.on_tick(
            t, agent=t in (2, 3, 4), action=t, obs_tick={2: 0, 3: 1, 4: 0}.get(t, -1), reward=r, terminated=t == 5
        )
    assert [(x.s_tick, x.action, x.reward, x.discount, x.n_ticks, x.next_tick) for x in got] == [
        (0, 2, 1.0, 0.5, 1, 1),  # the reward of tick 1 only
        (1, 3, 2.0 + 0.5 * 4.0 + 0.25 * 8.0 + 0.125 * 16.0, 0.0, 4, TERMINAL),  # ticks 2..5, terminated: no bootstrap
    ]
    assert b.out_of_order == 1 and b.episode == 1


# ---------------------------------------------------------------- issue 39's smaller defects, each on today's code


def test_a_truncated_episode_under_delay_bootstraps_where_its_rewards_stop() -> None:
    """With a 3-tick delay the value at a decision observation counts rewards from 3 ticks later:
    the last decision before a time limit at tick 10 continues from obs(8), not obs(10)."""
    from nonstop.learning.replay import TERMINAL, SemiMDPBuilder

    b = SemiMDPBuilder(gamma=0.5)
    out = []
    for t in range(3, 11):  # an agent action on every tick, each computed 3 ticks before
        out += b.on_tick(t, agent=True, action=t, obs_tick=t - 3, reward=1.0, truncated=t == 10)
    last = out[-1]
    assert (last.s_tick, last.n_ticks, last.discount, last.next_tick) == (7, 1, 0.5, 8)
    b = SemiMDPBuilder(gamma=0.5)  # a 1-tick delay: obs(T) is the one, the terminal observation
    out = [
        x for t in range(1, 4) for x in b.on_tick(t, agent=True, action=t, obs_tick=t - 1, reward=1.0, truncated=t == 3)
    ]
    assert out[-1].next_tick == TERMINAL
    b = SemiMDPBuilder(gamma=0.5)  # terminated: no bootstrap at all, whatever the delay
    out = [
        x
        for t in range(3, 6)
        for x in b.on_tick(t, agent=True, action=t, obs_tick=t - 3, reward=1.0, terminated=t == 5)
    ]
    assert (out[-1].discount, out[-1].next_tick) == (0.0, TERMINAL)


def test_the_next_episodes_first_observation_carries_its_own_buffer_not_the_last_ones() -> None:
    """The terminal observation and the reset one share a tick; a worker that read the first must
    not fix what the replay stores for the second."""
    buf = ActionBuffer(gym.spaces.Discrete(2), k=2)
    buf.decided("a", obs_tick=8, episode=0, action=1, due_tick=11)
    old = buf.augment(np.zeros(1, np.float32), tick=10, episode=0)
    new = buf.augment(np.zeros(1, np.float32), tick=10, episode=1)
    assert old[1:].any() and not new[1:].any()  # episode 1 has nothing in flight
    assert np.array_equal(buf.seen(10, episode=1), new[1:]) and np.array_equal(buf.seen(10, episode=0), old[1:])


def test_a_superseded_decision_is_not_in_flight() -> None:
    """Two decisions due on tick 9: the host applies the one on observation 4 (submitted last) and
    supersedes the other, which then never shows as an action that acted."""
    buf = ActionBuffer(gym.spaces.Box(-1.0, 1.0, (1,)), k=3)
    buf.decided("a", obs_tick=4, episode=0, action=[-0.5], due_tick=9)
    buf.decided("b", obs_tick=5, episode=0, action=[0.5], due_tick=9)
    buf.decided("c", obs_tick=6, episode=0, action=[0.25], due_tick=10)
    buf.landed(9, episode=0, obs_tick=4)
    enc = buf.encode(10, episode=0).reshape(3, buf.slot_width)
    assert enc[:, 0].tolist() == [0.25, -0.5, 0.0] and enc[:, -2].tolist() == [0, -1, 0]
    buf.landed(10, episode=0, obs_tick=None)  # β acted at 10: c was dropped too
    assert buf.encode(11, episode=0).reshape(3, buf.slot_width)[:, 0].tolist() == [-0.5, 0.0, 0.0]


def test_observation_framed_rewards_stay_exact_however_long_between_two_decisions() -> None:
    """600 ticks of β between two decisions (more than any ring the builder once kept): the reward is
    every one of them, discounted."""
    from nonstop.learning.inflight import ObservationFramedBuilder

    b = ObservationFramedBuilder(gamma=1.0)
    out = []
    for t in range(1, 603):
        out += b.on_tick(t, agent=t in (1, 602), action=t, obs_tick={1: 0, 602: 601}.get(t, -1), reward=float(t))
    assert len(out) == 1 and (out[0].s_tick, out[0].n_ticks, out[0].next_tick) == (0, 601, 601)
    assert out[0].reward == sum(range(1, 602))
    assert len(b._rewards) == 1  # only what the open decision can still need is kept
