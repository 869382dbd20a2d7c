"""One batching server acting for every seat of a many-seat world (issue 32 item 3), on the virtual
clock: a lane per seat (or N_I staggered lanes per seat), one batch per tick across seats, one θ per team."""

from __future__ import annotations

import numpy as np
import pytest

from nonstop.inference.batching import BatchingServer
from nonstop.inference.batchsize import LatencyCurve
from nonstop.inference.seatlanes import SeatLanes, TeamForward
from nonstop.realtime.host import Session
from nonstop.realtime.tickcolumns import SOURCE_ABSENT, SOURCE_AGENT

pytest.importorskip("magent2")

TICK = 1 / 20
STAY = 6  # battle's move to the agent's own cell


def blue_policy(batch: np.ndarray) -> np.ndarray:
    """A θ of its own for blue: a move that depends on the window (never an attack, so nobody dies)."""
    return (batch[:, :, :, 1].sum(axis=(1, 2)).astype(np.int64) % 13 + 1) % 13


def _battle(map_size: int = 16) -> Session:
    return Session("multi/battle", clock="virtual", seed=0, env_kwargs={"map_size": map_size}).start()


def test_one_batch_per_tick_across_every_seat_one_theta_per_team() -> None:
    world = _battle()
    seats = world.seats
    assert seats is not None and len(seats) == 12
    red_calls: list[int] = []

    def red(batch: np.ndarray) -> np.ndarray:
        red_calls.append(len(batch))
        return np.full(len(batch), STAY)

    forward = TeamForward({"red": red, "blue": blue_policy})
    server = BatchingServer(forward, LatencyCurve.linear(0.010, 0.0005), clock=world.clock, max_batch=256)
    lanes = SeatLanes(world, server, forward=forward).start()
    history = []
    for _ in range(40):
        history.append(np.stack([slot.read().obs for slot in world.slots]))
        world.run_until(world.clock.now() + TICK)
    lanes.stop()
    server.close()
    world.stop()
    log = world.tick_log
    report = server.report()
    assert report["batch_sizes"] == {12: report["batches"]}  # every batch: every seat, nothing else
    assert forward.passes == 2 * forward.batches  # one pass per team per batch
    assert set(red_calls) == {6}  # red's θ saw red's six seats only
    source, delay, action, obs_tick = (log.block(q) for q in ("source", "delay", "action", "obs_tick"))
    assert (source[1:] == SOURCE_AGENT).all() and (delay[1:] == 1).all()  # every seat, every tick, one tick late
    blue = [i for i, s in enumerate(seats) if s.startswith("blue_")]
    red_seats = [i for i, s in enumerate(seats) if s.startswith("red_")]
    assert (action[1:, red_seats] == STAY).all()
    for t in range(1, 30):  # blue's actions are its θ's answers to the observations they were computed on
        for i in blue:
            obs = history[int(obs_tick[t, i])][i]
            assert action[t, i] == blue_policy(obs[None])[0]
    summary = log.summary(teams={s: s.split("_")[0] for s in seats}, warmup_ticks=1)
    assert summary["teams"]["red"]["inaction_fraction_max"] == 0.0 == summary["teams"]["blue"]["inaction_fraction_max"]


def test_staggered_lanes_per_seat_keep_the_server_busy_when_a_batch_takes_longer_than_a_tick() -> None:
    """A batch takes 1.6 ticks. One lane a seat waits for its answer, then for the next tick: the
    seats act on half the ticks. Two staggered lanes a seat (lane 1 from tick 1) keep the one server
    busy back to back: the seats act on 1/1.6 of the ticks, each action two to four ticks late."""
    acted = {}
    for n_inference in (1, 2):
        world = _battle()
        server = BatchingServer(
            lambda x: np.full(len(x), STAY), LatencyCurve.linear(1.6 * TICK, 0.0), clock=world.clock
        )
        lanes = SeatLanes(world, server, n_inference=n_inference).start()
        world.run_for(8.0)
        lanes.stop()
        server.close()
        world.stop()
        log = world.tick_log
        source, delay, worker = (log.block(q)[10:] for q in ("source", "delay", "worker"))
        acted[n_inference] = (source == SOURCE_AGENT).mean()
        assert server.report()["batch_sizes"] == {12: server.report()["batches"]}
        assert set(np.unique(worker[source == SOURCE_AGENT]).tolist()) == set(range(n_inference))
        delays = set(np.unique(delay[source == SOURCE_AGENT]).tolist())
        assert delays == {2} if n_inference == 1 else delays <= {2, 3, 4}  # two lanes' requests queue behind each other
    assert acted[1] == pytest.approx(0.5, abs=0.02) and acted[2] == pytest.approx(1 / 1.6, abs=0.02)


def test_seats_whose_agents_die_get_no_requests() -> None:
    """Both teams brawl (attack when an enemy is next to them): agents die; each batch holds the seats
    present at its tick, and a dead seat's log says absent, never inaction."""
    rng = np.random.default_rng(0)

    def brawl(batch: np.ndarray) -> np.ndarray:
        near = batch[:, 5:8, 5:8, 3].sum(axis=(1, 2)) > 0
        return np.where(near, rng.integers(13, 21, len(batch)), rng.integers(0, 13, len(batch)))

    world = _battle(12)
    server = BatchingServer(brawl, LatencyCurve.linear(0.005, 0.0), clock=world.clock)
    lanes = SeatLanes(world, server).start()
    world.run_for(6.0)
    lanes.stop()
    server.close()
    world.stop()
    log = world.tick_log
    source, episode = log.block("source"), log["episode"]
    assert (source == SOURCE_ABSENT).any(), "nobody died: the test shows nothing"
    first = episode == 0
    present = (source[first] != SOURCE_ABSENT).sum(axis=1)
    # the action applied at tick t+1 was computed at tick t, from the seats present then
    assert lanes.requests >= int(present[:-1].sum())
    assert ((source != SOURCE_ABSENT) | (log.block("delay") == -1)).all()
    assert not ((source == SOURCE_ABSENT) & (log.block("action") == log.block("action"))).any()  # NaN: no action
    assert max(server.report()["batch_sizes"]) <= 4
