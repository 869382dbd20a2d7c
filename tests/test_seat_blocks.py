"""A thousand seats through one batching server (issue 43 item 2): a team's seats travel as one
**block** request (a row a seat), served whole in one batch, so the driver makes a request a team a
tick, not one a seat; dead agents' rows leave the block. Virtual clock: every figure exact."""

from __future__ import annotations

import numpy as np
import pytest

from nonstop.inference.batching import BatchingServer, Request
from nonstop.inference.batchsize import LatencyCurve
from nonstop.inference.seatlanes import SeatLanes, TeamForward
from nonstop.realtime.clock import VirtualClock
from nonstop.realtime.host import Session
from nonstop.realtime.tickcolumns import SOURCE_ABSENT, SOURCE_AGENT

STAY = 6


def _serve(server: BatchingServer, clock: VirtualClock, requests: list[Request]) -> list:
    """Submit ``requests`` at one instant, as one lane's timed process; their answers in order."""
    answers: list = []

    def lane():
        with server.together():
            tickets = [server.submit(r) for r in requests]
        for ticket in tickets:
            answers.append((yield from server.wait_timed(ticket)))

    clock.spawn(lane())
    clock.run()
    return answers


def _block(server: BatchingServer, rows: np.ndarray) -> Request:
    lanes = np.array([server.lane(tau_m=1.0).lane for _ in rows], np.int64)
    return Request(int(lanes[0]), rows, 0, 1, 1.0, 0.0, lanes)


def test_a_block_is_answered_row_by_row_in_one_batch_beside_single_rows() -> None:
    clock = VirtualClock()
    seen: list[tuple[int, list[int]]] = []

    def forward(batch: np.ndarray, lanes: list[int]) -> np.ndarray:
        seen.append((len(batch), list(lanes)))
        return batch.sum(axis=1)

    forward.takes_lanes = True  # type: ignore[attr-defined]
    server = BatchingServer(forward, LatencyCurve.linear(0.01, 0.001), clock=clock, max_batch=8)
    block = _block(server, np.arange(6).reshape(3, 2))
    single = server.lane(tau_m=1.0)
    one = Request(single.lane, np.array([10, 1]), 0, 1, 1.0, 0.0)
    answers = _serve(server, clock, [block, one])
    assert seen == [(4, [*block.lanes.tolist(), single.lane])]  # one pass: the block's rows, then the row
    assert answers[0].action.tolist() == [1, 5, 9] and answers[1].action == 11
    assert answers[0].batch_size == answers[1].batch_size == 4
    assert server.report()["batch_sizes"] == {4: 1} and server.report()["requests"] == 2
    server.close()


def test_a_block_is_taken_whole_and_refused_past_max_batch() -> None:
    clock = VirtualClock()
    # L(1) = 0.3, L(2) = 0.6, L(3) = 0.9: a deadline at 1.0 fits no more than 3 rows, the block's three
    server = BatchingServer(lambda x: x[:, 0], LatencyCurve.linear(0.0, 0.3), clock=clock, max_batch=4)
    block = _block(server, np.ones((3, 2)))
    late = server.lane(tau_m=1.0)
    after = Request(late.lane, np.zeros(2), 0, 1, 1.0, 0.0)
    answers = _serve(server, clock, [block, after])
    assert [a.batch_size for a in answers] == [3, 1]  # the block whole, the row in the next batch
    with pytest.raises(ValueError, match="1..4 rows"):
        server.submit(_block(server, np.ones((5, 2))))
    server.close()


def test_seat_lanes_make_one_request_a_team_a_tick() -> None:
    pytest.importorskip("magent2")
    world = Session("multi/battle", clock="virtual", seed=0, env_kwargs={"map_size": 20}).start()
    forward = TeamForward({"red": lambda x: np.full(len(x), STAY), "blue": lambda x: np.full(len(x), STAY)})
    server = BatchingServer(forward, LatencyCurve.linear(0.005, 0.0001), clock=world.clock, max_batch=8)
    lanes = SeatLanes(world, server, forward=forward).start()
    assert [len(b) for b in lanes.blocks] == [8, 4, 8, 4]  # 12 a team, in blocks of max_batch rows
    world.run_for(2.0)
    lanes.stop()
    server.close()
    world.stop()
    report, source = server.report(), world.tick_log.block("source")
    rounds = lanes.requests // 24  # a row a seat a tick
    assert lanes.requests == 24 * rounds and rounds >= 38
    assert report["requests"] == 4 * rounds  # a request a block (the old driver: one a seat, 24 a tick)
    assert set(report["batch_sizes"]) <= {4, 8}  # a block is never split, nor two of 8 and 4 joined past 8
    assert (source[1:] == SOURCE_AGENT).all()


def test_epsilon_explores_each_teams_rows_at_its_rate() -> None:
    pytest.importorskip("magent2")
    world = Session("multi/battle", clock="virtual", seed=0, env_kwargs={"map_size": 45}).start()
    stay = lambda x: np.full(len(x), STAY)  # noqa: E731
    forward = TeamForward({"red": stay, "blue": stay})
    server = BatchingServer(forward, LatencyCurve.linear(0.005, 0.0), clock=world.clock, max_batch=256)
    lanes = SeatLanes(world, server, forward=forward, epsilon={"red": 0.0, "blue": 0.5}, seed=3).start()
    world.run_for(2.0)
    lanes.stop()
    server.close()
    world.stop()
    action, seats = world.tick_log.block("action")[2:], world.seats
    red = [i for i, s in enumerate(seats) if s.startswith("red_")]
    blue = [i for i, s in enumerate(seats) if s.startswith("blue_")]
    assert (action[:, red] == STAY).all()
    explored = (action[:, blue] != STAY).mean()  # ε 0.5, a uniform draw of 21 that is STAY 1 time in 21
    assert explored == pytest.approx(0.5 * 20 / 21, abs=0.03)


def test_a_lone_block_is_the_forward_input_itself_no_copy_into_staging() -> None:
    """The copy of observations into the server: a team's block, read from the seats' slots into its
    rows, is the batch when it rides alone; beside other requests it is copied into the staging buffer."""
    clock = VirtualClock()
    inputs: list[np.ndarray] = []

    def forward(batch: np.ndarray) -> np.ndarray:
        inputs.append(batch)
        return batch[:, 0]

    server = BatchingServer(forward, LatencyCurve.linear(0.01, 0.0), clock=clock, max_batch=8)
    block = _block(server, np.arange(8.0).reshape(4, 2))
    (answer,) = _serve(server, clock, [block])
    assert np.shares_memory(inputs[-1], block.obs) and answer.action.tolist() == [0.0, 2.0, 4.0, 6.0]
    other = _block(server, np.ones((2, 2)))
    _serve(server, clock, [block, other])
    assert not np.shares_memory(inputs[-1], block.obs) and inputs[-1].shape == (
        6,
        2,
    )  # two requests: stacked in staging
    server.close()


def test_a_thousand_seats_whose_agents_die_leave_their_teams_blocks() -> None:
    """1,058 agents of `multi/battle-1000` advance on each other and attack when an enemy is next to
    them: agents die, their rows leave their team's block (the batches shrink), their log says absent,
    and every seat still in the world acts at every tick (no inaction), one tick late."""
    pytest.importorskip("magent2")
    rng = np.random.default_rng(0)

    def advance(step: int):
        def forward(batch: np.ndarray) -> np.ndarray:
            near = batch[:, 5:8, 5:8, 3].sum(axis=(1, 2)) > 0  # channel 3: the other team, the agent at (6, 6)
            return np.where(near, rng.integers(13, 21, len(batch)), step)

        return forward

    world = Session("multi/battle-1000", clock="virtual", seed=0).start()
    forward = TeamForward({"red": advance(7), "blue": advance(5)})  # 7: a step right, 5: a step left
    server = BatchingServer(forward, LatencyCurve.linear(0.005, 0.00001), clock=world.clock, max_batch=1058)
    lanes = SeatLanes(world, server, forward=forward).start()
    world.run_for(3.0)
    lanes.stop()
    server.close()
    world.stop()
    log = world.tick_log
    source, delay = log.block("source"), log.block("delay")
    sizes = server.report()["batch_sizes"]
    assert source.shape[1] == 1058 and (source == SOURCE_ABSENT).any(axis=0).sum() >= 5, "too few died to show it"
    served = sum(b * n for b, n in sizes.items())
    assert min(sizes) < 1058 == max(sizes) and 0 <= lanes.requests - served <= 1058  # the last round: unserved
    present = source[1:] != SOURCE_ABSENT
    assert (source[1:][present] == SOURCE_AGENT).all() and (delay[1:][present] == 1).all()
    assert (delay[source == SOURCE_ABSENT] == -1).all()
