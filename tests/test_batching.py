"""The batching inference server (docs/design.md §7): batch sizes from the latency curve, earliest deadline
first, late answers counted, τ_θ = queue + batch; on the virtual clock (exact, deterministic) and on
the wall clock with a tiny torch MLP.

On the virtual clock a batch of b takes L(b) = A + C·b virtual seconds, so every time below is exact
arithmetic on the curve.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nonstop.inference.batching import BatchedPolicy, BatchingServer, LaneDecision, ServerClosed
from nonstop.inference.batchsize import LatencyCurve, choose_batch_size, parse_curve
from nonstop.realtime.clock import VirtualClock, WallClock

TAU = 1 / 60
A, C = 0.004, 0.001  # L(b) = 4 ms + 1 ms per observation: L(12) = 16 ms fits a tick, L(13) = 17 ms does not
FAST = settings(max_examples=200, deadline=None, derandomize=True, database=None)


def identity(batch: np.ndarray) -> np.ndarray:
    """The observation's first number is its action: answers show whose frame they came from."""
    return batch[:, 0].astype(np.int64)


def virtual_server(**kw):
    clock = VirtualClock()
    return clock, BatchingServer(identity, LatencyCurve.linear(A, C), clock=clock, **kw)


def submit_at(clock, lane: BatchedPolicy, at: float, value: int, obs_tick: int, seen: list) -> None:
    """A lane that submits ``value``'s frame at ``at`` and records (value, decision, answered at)."""

    def process():
        yield at
        decision = yield from lane.act_timed(np.array([value, 0], np.int64), obs_tick)
        seen.append((value, decision, clock.now()))

    clock.spawn(process())


# ----------------------------------------------------------------------------- (i) .. (v), virtual clock


def test_a_lone_lane_is_served_in_a_batch_of_one_taking_L1():
    clock, server = virtual_server()
    seen: list = []
    submit_at(clock, server.lane(tau_m=TAU), 0.1, 7, 6, seen)
    clock.run()
    [(value, decision, answered)] = seen
    assert isinstance(decision, LaneDecision)
    assert (value, decision.action, decision.batch_size) == (7, 7, 1)
    assert answered == pytest.approx(0.1 + A + C) and decision.tau_theta == pytest.approx(A + C)
    assert decision.latency == pytest.approx(decision.tau_theta) and decision.late_by == 0.0
    assert server.report()["batch_sizes"] == {1: 1}


@pytest.mark.parametrize("n, batches", [(12, {12: 1}), (13, {12: 1, 1: 1})])
def test_lanes_submitting_at_once_share_a_batch_while_L_meets_the_earliest_deadline(n, batches):
    """Tick 6's observation, due at tick 7: 1/60 s of room. L(12) = 16 ms meets it: one batch; L(13)
    = 17 ms does not, so 12 go at once (all on time) and the 13th follows, late."""
    clock, server = virtual_server()
    seen: list = []
    for v in range(n):
        submit_at(clock, server.lane(tau_m=TAU, due_ticks=1), 6 * TAU, v, 6, seen)
    clock.run()
    assert server.report()["batch_sizes"] == batches
    assert sorted(d.action for _, d, _ in seen) == list(range(n))  # every lane got its own frame's answer
    first = [d for _, d, _ in seen if d.batch_size == 12 or n == 12]
    assert all(d.tau_theta == pytest.approx(A + C * min(n, 12)) and d.late_by == 0.0 for d in first)
    if n == 13:  # EDF among equal deadlines: arrival order; the 13th waits out the first batch
        [(value, last, _)] = [s for s in seen if s[1].batch_size == 1]
        assert value == 12 and last.tau_theta == pytest.approx((A + 12 * C) + (A + C))
        assert last.late_by > 0 and server.report()["late"] == 1


def test_earliest_deadline_first_a_request_due_sooner_overtakes_an_older_one():
    """While a batch runs, an old request due in ten ticks and a newer one due next tick wait; the
    newer goes first (max_batch 1 keeps them apart)."""
    clock, server = virtual_server(max_batch=1)
    seen: list = []
    submit_at(clock, server.lane(tau_m=TAU, due_ticks=1), 0.0, 0, 0, seen)  # keeps the server busy 5 ms
    submit_at(clock, server.lane(tau_m=TAU, due_ticks=10), 0.001, 1, 0, seen)  # older, due later
    submit_at(clock, server.lane(tau_m=TAU, due_ticks=1), 0.002, 2, 0, seen)  # newer, due sooner
    clock.run()
    order = [value for value, _, _ in sorted(seen, key=lambda s: s[2])]
    assert order == [0, 2, 1]
    answered = {value: t for value, _, t in seen}
    assert answered[2] == pytest.approx(2 * (A + C)) and answered[1] == pytest.approx(3 * (A + C))


def test_a_deadline_that_cannot_be_met_is_answered_late_and_counted():
    clock = VirtualClock()
    server = BatchingServer(identity, LatencyCurve.linear(0.030, 0.0), clock=clock)  # 30 ms > one tick
    lane = server.lane(tau_m=TAU, due_ticks=1)
    seen: list = []
    submit_at(clock, lane, 0.0, 3, 0, seen)
    clock.run()
    [(_, decision, answered)] = seen
    assert decision.action == 3  # answered, not dropped
    assert decision.late_by == pytest.approx(0.030 - TAU) and answered == pytest.approx(0.030)
    report = server.report()
    assert (report["late"], lane.late) == (1, 1)
    assert report["late_by_max_s"] == pytest.approx(0.030 - TAU) == report["late_by_mean_s"]


def test_tau_theta_is_queue_plus_batch():
    """X at 0 takes the server for L(1) = 5 ms; Y arrives at 2 ms, waits 3 ms, then its own 5 ms."""
    clock, server = virtual_server()
    seen: list = []
    x, y = server.lane(tau_m=TAU), server.lane(tau_m=TAU)
    submit_at(clock, x, 0.0, 0, 0, seen)
    submit_at(clock, y, 0.002, 1, 0, seen)
    clock.run()
    decision = {value: d for value, d, _ in seen}
    assert decision[0].tau_theta == pytest.approx(A + C)
    assert decision[1].tau_theta == pytest.approx((A + C - 0.002) + (A + C))
    assert y.last_answer is not None and y.last_answer.queue_s == pytest.approx(A + C - 0.002)


def test_default_due_tick_is_the_first_a_batch_of_one_can_make():
    clock = VirtualClock()
    server = BatchingServer(identity, LatencyCurve.linear(0.020, 0.0), clock=clock)  # 1.2 ticks
    request = server.lane(tau_m=TAU).request(np.zeros(2, np.int64), obs_tick=0)
    assert (request.obs_tick, request.due_tick) == (0, 2) and request.due == pytest.approx(2 * TAU)
    server.close()


def test_close_answers_every_waiting_lane_and_later_requests_at_once():
    clock, server = virtual_server()
    outcomes: list = []

    def lane_process(lane, value):
        try:
            yield from lane.act_timed(np.array([value, 0]), 0)
            outcomes.append("answered")
        except ServerClosed:
            outcomes.append("closed")

    for v in range(3):
        clock.spawn(lane_process(server.lane(tau_m=TAU), v))
    clock.run_until(0.001)  # the batch is in flight
    server.close()
    clock.run()
    assert outcomes == ["closed"] * 3 and server.report()["answered_closed"] == 3
    with pytest.raises(ServerClosed):
        clock.spawn(server.lane(tau_m=TAU).act_timed(np.zeros(2, np.int64), 0))


def test_a_failed_forward_pass_fails_its_batch_not_the_server():
    clock = VirtualClock()
    calls = []

    def flaky(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise FloatingPointError("boom")
        return identity(batch)

    server = BatchingServer(flaky, LatencyCurve.linear(A, C), clock=clock)
    outcomes: list = []

    def lane_process(at, value):
        yield at
        try:
            decision = yield from server.lane(tau_m=TAU).act_timed(np.array([value, 0]), 0)
            outcomes.append(decision.action)
        except RuntimeError as exc:
            outcomes.append(str(exc))

    clock.spawn(lane_process(0.0, 1))
    clock.spawn(lane_process(0.1, 2))
    clock.run()
    assert outcomes == ["the batch's forward pass failed: FloatingPointError: boom", 2]
    assert server.report()["failed_batches"] == 1


def test_the_lane_refuses_to_declare_a_virtual_latency_and_checks_its_frame():
    clock, server = virtual_server()
    lane = server.lane(tau_m=TAU)
    with pytest.raises(TypeError, match="act_timed"):
        lane.act(np.zeros(2, np.int64))
    clock.spawn(lane.act_timed(np.zeros(2, np.int64), 0))
    with pytest.raises(ValueError, match=r"does not match the server's int64\[2\]"):
        clock.spawn(server.lane(tau_m=TAU).act_timed(np.zeros(3, np.int64), 0))


def test_epsilon_explores_without_changing_the_timing():
    import gymnasium

    clock, server = virtual_server()
    lane = server.lane(gymnasium.spaces.Discrete(4, start=10), tau_m=TAU, epsilon=lambda: 1.0, seed=0)
    seen: list = []
    for k in range(20):
        submit_at(clock, lane, k * 0.1, 0, k, seen)
    clock.run()
    assert {d.action for _, d, _ in seen} <= {10, 11, 12, 13} and len({d.action for _, d, _ in seen}) > 1
    assert all(d.tau_theta == pytest.approx(A + C) for _, d, _ in seen)


# ----------------------------------------------------------------------------- (vi) K worlds x N lanes, virtual clock

TICK_CURVE = (0.6, 0.02)  # L(b) = 0.6 + 0.02·b ticks: 8 worlds' requests, one each, take 0.76 of a tick
SLOW_CURVE = (0.9, 0.05)  # 8 worlds take 1.3 ticks a batch: fewer batches than ticks, whatever N is


def _out_of_phase_worlds(clock, k: int) -> list:
    """``k`` worlds on one clock, world j starting j/k of a tick after world 0 (sessions start when they
    start: their requests reach the server spread over a tick, not at one instant)."""
    from nonstop.realtime.host import Session

    worlds = []
    for j in range(k):
        clock.run_until(j * TAU / k)
        worlds.append(Session("theory/inaction", clock=clock, seed=j).start())
    return worlds


def _grid_lanes(world, server, n: int, hold: int) -> None:
    """A world's ``n`` lanes on the tick grid: just after each tick is published a free lane (if any)
    requests on it, due ``hold`` ticks later, and its answer is released on that tick (quantile hold's
    rule with a fixed hold; the lane is free again as soon as it is answered)."""
    clock, slot, queue = world.clock, world.slot, world.queue
    free = [server.lane(world.action_space, tau_m=world.tau_m, origin=world.origin, due_ticks=hold) for _ in range(n)]

    def infer(lane):
        latest = slot.read()
        decision = yield from lane.act_timed(latest.obs, latest.tick)
        free.append(lane)
        yield latest.time + hold * world.tau_m  # its release tick (answers later than that go at once)
        queue.submit(
            decision.action,
            obs_tick=latest.tick,
            episode=latest.episode,
            worker=lane.lane,
            tau_theta=decision.tau_theta,
            submit_time=clock.now(),
        )

    def ticker():
        tick = 0
        while True:
            yield (world.origin + tick * world.tau_m + clock.tick_grace, 2)  # after the host's tick
            if free:
                clock.spawn(infer(free.pop()))
            tick += 1

    clock.spawn(ticker())


def _grid_trial(n: int, curve: tuple[float, float], k: int = 8, hold: int = 2) -> tuple[float, dict]:
    clock = VirtualClock()
    server = BatchingServer(identity, LatencyCurve.linear(curve[0] * TAU, curve[1] * TAU), clock=clock)
    worlds = _out_of_phase_worlds(clock, k)
    for world in worlds:
        _grid_lanes(world, server, n, hold)
    clock.run_until(3.0)
    server.close()
    inaction = max(w.tick_log.summary(warmup_ticks=30)["inaction_fraction"] for w in worlds)
    for world in worlds:
        world.stop()
    return inaction, server.report()


def test_k_worlds_lose_no_tick_once_each_has_enough_lanes_for_the_curve():
    """8 worlds share one server. A lane's τ_θ is up to a batch of queue plus its own batch: under 2
    ticks with L(8) = 0.76 tick, so 2 lanes a world (a request every tick, each released 2 ticks on)
    leave no tick to β, and more lanes change nothing; 1 lane a world leaves about half. With L(8) =
    1.3 ticks there are fewer batches than ticks, so no number of lanes helps, and the answers that
    miss their release tick are counted late."""
    inaction, report = _grid_trial(1, TICK_CURVE)
    assert inaction > 0.3
    for n in (2, 4):
        inaction, report = _grid_trial(n, TICK_CURVE)
        assert inaction == 0.0, (n, report)
        assert report["late"] == 0 and report["batch_size_mean"] > 4  # requests of several worlds share batches
    for n in (2, 4):
        inaction, report = _grid_trial(n, SLOW_CURVE)
        assert inaction > 0.1 and report["late"] > 0.3 * report["requests"], (n, report)


@pytest.mark.parametrize(
    "scheduler, n, inaction_at_least, inaction_at_most",
    [
        ("quantile_hold", 1, 0.3, 1.0),
        ("quantile_hold", 2, 0.0, 0.0),
        ("quantile_hold", 4, 0.0, 0.0),
        ("exp_time", 4, 0.2, 1.0),
    ],
)
def test_inference_pools_drive_lanes_of_one_server(scheduler, n, inaction_at_least, inaction_at_most):
    """8 worlds × N lanes, an `InferencePool` each, one server. quantile_hold starts one request a world
    per tick and releases each on a grid: at N = 2 no tick goes to β. exp_time does not get there: a
    world's lanes answered by one batch restart together, ride the next batch together, and stay in
    lockstep, so a world gets at most one action a batch (the others are superseded)."""
    from nonstop.inference.workers import InferencePool

    clock = VirtualClock()
    server = BatchingServer(identity, LatencyCurve.linear(TICK_CURVE[0] * TAU, TICK_CURVE[1] * TAU), clock=clock)
    worlds = _out_of_phase_worlds(clock, 8)

    def lanes(world):
        return lambda i: server.lane(world.action_space, tau_m=world.tau_m, origin=world.origin)

    pools = [InferencePool(w, lanes(w), scheduler, n_inference=n).start() for w in worlds]
    clock.run_until(3.0)
    for pool in pools:
        pool.stop()
    server.close()
    inaction = max(w.tick_log.summary(warmup_ticks=60)["inaction_fraction"] for w in worlds)
    for world in worlds:
        world.stop()
    assert inaction_at_least <= inaction <= inaction_at_most, (inaction, server.report())
    assert all(sum(p.report()["deaths"]) == 0 for p in pools)


# ----------------------------------------------------------------------------- the pure parts


def test_the_curve_is_re_measured_per_batch_size():
    curve = LatencyCurve.linear(A, C, alpha=0.5)
    curve.observe(8, 0.020)
    assert curve(8) == 0.020  # the first measurement replaces the model's 12 ms
    curve.observe(8, 0.010)
    assert curve(8) == pytest.approx(0.015)  # then an EMA: 0.02 + 0.5 * (0.01 - 0.02)
    assert curve(9) == pytest.approx(0.015)  # unmeasured, but not faster than the measured 8
    assert curve(4) == pytest.approx(A + 4 * C)  # smaller sizes keep the model
    assert curve.describe()["measurements"] == {8: 2}


def test_parse_curve_reads_the_command_line_forms():
    assert parse_curve("linear:2t,0.5t", tick_hz=60)(2) == pytest.approx(3 / 60)
    assert parse_curve("table:1=2ms,4=5ms")(3) == pytest.approx(0.004)
    with pytest.raises(ValueError, match="is not B=L"):
        parse_curve("table:0=1ms")
    with pytest.raises(ValueError, match="needs tick_hz"):
        parse_curve("linear:1t,1t")


deadline_lists = st.lists(st.floats(0.0, 0.1, allow_nan=False), min_size=1, max_size=40).map(sorted)


@FAST
@given(deadline_lists, st.floats(0.0, 0.02), st.floats(0.0, 0.005), st.integers(1, 48))
def test_batch_size_is_the_largest_that_meets_every_deadline_in_reach(deadlines, a, c, max_batch):
    curve = LatencyCurve.linear(a, c)
    now = 0.0
    b = choose_batch_size(now, deadlines, curve, max_batch=max_batch)
    m = min(len(deadlines), max_batch)
    assert 1 <= b <= m

    def meets(size: int) -> bool:  # every request in the batch that a batch of one could meet, is met
        return all(now + curve(size) <= d for d in deadlines[:size] if now + curve(1) <= d)

    assert meets(b)
    assert b == m or not meets(b + 1)  # the largest such


@FAST
@given(st.dictionaries(st.integers(1, 64), st.floats(0.0, 0.1), min_size=1, max_size=6), st.integers(1, 128))
def test_a_table_curve_passes_through_its_entries_and_never_falls_past_its_end(table, b):
    curve = LatencyCurve.table(table)
    for size, seconds in table.items():
        assert curve(size) == pytest.approx(seconds)
    assert math.isfinite(curve(b)) and curve(b) >= 0.0
    if b > max(table):
        assert curve(b) >= table[max(table)] - 1e-12


# ----------------------------------------------------------------------------- the wall clock, a tiny torch MLP


def _mlp(n_actions: int = 3):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, n_actions))


@pytest.mark.wall
def test_wall_clock_server_answers_each_lane_with_its_own_frames_argmax():
    """8 threads submit 25 frames each; every answer is the MLP's argmax of that thread's frame (the
    stacking keeps each frame with its lane), batches form while the server is busy, and close leaves
    nothing running."""
    import torch

    from nonstop.inference.device import torch_forward

    model = _mlp()
    server = BatchingServer(torch_forward(model, "cpu"), LatencyCurve.linear(0.0, 0.0), clock=WallClock(spin=0.0))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(8, 25, 4), dtype=np.uint8)
    with torch.inference_mode():
        expected = model(torch.from_numpy(frames).float().div(255.0)).argmax(-1).numpy()
    got = np.full((8, 25), -1)
    taus: list[float] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def lane_thread(i: int) -> None:
        try:
            lane = server.lane(tau_m=TAU)
            start.wait()
            for k in range(25):
                decision = lane.act(frames[i, k])
                got[i, k] = decision.action
                taus.append(decision.tau_theta)
                assert decision.latency == 0.0  # on the wall clock the pool measures the time itself
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=lane_thread, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    server.close()
    assert not errors and (got == expected).all()
    report = server.report()
    assert report["requests"] == 200 == sum(b * n for b, n in report["batch_sizes"].items())
    assert max(report["batch_sizes"]) > 1  # 8 lanes at once: some waited for a batch together
    assert report["curve"]["measured_s"]  # the wall clock measured its curve
    assert min(taus) > 0 and server._thread is not None and not server._thread.is_alive()


@pytest.mark.wall
def test_wall_clock_inference_pool_drives_batched_lanes_unchanged():
    """A CartPole world at 50 Hz, 3 lanes of one server under exp_time on the wall clock: the lanes
    act on most ticks, no worker dies, and every action the world took came from the server."""
    from nonstop.inference.device import torch_forward
    from nonstop.inference.workers import InferencePool
    from nonstop.realtime.host import Session

    model = _mlp(n_actions=2)
    with Session("CartPole", clock="wall", seed=0) as world:
        server = BatchingServer(torch_forward(model, "cpu"), LatencyCurve.linear(0.001, 0.0001), clock=world.clock)
        pool = InferencePool(
            world,
            lambda i: server.lane(world.action_space, tau_m=world.tau_m, origin=world.origin),
            "exp_time",
            n_inference=3,
        ).start()
        world.run_for(1.5)
        pool.stop()
        server.close()
    summary = world.tick_log.summary(warmup_ticks=10)
    report = pool.report()
    assert sum(report["deaths"]) == 0, report["events"]
    assert summary["inaction_fraction"] < 0.5, summary
    assert server.report()["requests"] >= sum(report["actions"]) > 20
    assert server._thread is not None and not server._thread.is_alive()


def test_resolve_device_names_what_it_found():
    torch = pytest.importorskip("torch")
    from nonstop.inference.device import resolve_device

    assert resolve_device("cpu").type == "cpu" and resolve_device(" CPU ").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("gpu", "cpu:0", "cuda:x", ""):
        with pytest.raises(ValueError, match="cpu, cuda, cuda:N or auto"):
            resolve_device(bad)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="does not exist: torch finds"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    else:
        for asked in ("cuda", "cuda:1"):
            with pytest.raises(ValueError, match=rf"device '{asked}' needs a CUDA GPU, but torch .* finds none") as err:
                resolve_device(asked)
            assert "\n" not in str(err.value)


def test_a_retired_server_closes_with_its_last_lane():
    """Whoever owns the server may go first (a run tears its parts down newest first): retired, the
    server keeps answering until the pools release their lanes, then closes."""
    clock, server = virtual_server()
    lanes = [server.lane(tau_m=TAU) for _ in range(2)]
    server.retire()
    seen: list = []
    submit_at(clock, lanes[0], 0.0, 5, 0, seen)
    clock.run()
    assert [d.action for _, d, _ in seen] == [5] and not server.closed
    lanes[0].close()
    lanes[0].close()  # idempotent: counted once
    assert not server.closed
    lanes[1].close()
    assert server.closed
    idle = BatchingServer(identity, LatencyCurve.linear(A, C), clock=WallClock(spin=0.0))
    idle.retire()  # no lane open: closes at once, its thread gone
    assert idle.closed and idle._thread is not None and not idle._thread.is_alive()


# ----------------------------------------------------------------------------- the `batched` policy backend


def test_batched_is_a_registered_policy_backend():
    from nonstop.experiment.batchedbackend import batched_policy
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.registry import lookup, names

    assert "batched" in names("policy_backend") and lookup("policy_backend", "batched") is batched_policy
    assert TrainConfig(clock="wall", backend="batched").backend == "batched"


@pytest.mark.wall
def test_batched_backend_serves_a_wall_clock_run_from_one_server():
    """A CartPole run on the wall clock whose 3 workers are lanes of one server: the run has one
    server part, no worker dies, the world acts on most ticks, and the teardown leaves no thread."""
    from nonstop.experiment import Run, TrainConfig
    from nonstop.learning.dqn import DQNConfig

    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(
        TrainConfig(env="CartPole", clock="wall", backend="batched", seconds=1.5, algo_settings=dqn, n_inference=3)
    )
    try:
        run.build().start()
        run.advance(1.5)
    finally:
        run.teardown()
    assert [p.name for p in run.parts].count("batch_server") == 1
    server = run.part("batch_server").server
    report = run.summary(run.world.tick_log)["batch_server"]  # the wall clock's log comes back at the stop
    assert sum(run.pool.report()["deaths"]) == 0
    assert run.world.tick_log.summary(warmup_ticks=10)["inaction_fraction"] < 0.5
    assert report["requests"] >= sum(run.pool.report()["actions"]) > 20 and report["clock"] == "wall"
    assert server.closed and server._thread is not None and not server._thread.is_alive()


def test_batched_backend_serves_a_virtual_clock_run():
    """On the virtual clock: a 0.6-tick model, so L(b) = 0.6 tick by default, 2 lanes: an action on
    every tick, each from the server, while the learners learn from them."""
    from nonstop.experiment import Run, TrainConfig
    from nonstop.learning.dqn import DQNConfig

    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(
        TrainConfig(
            env="CartPole",
            seconds=4.0,
            latency="0.6t",
            algo_settings=dqn,
            scheduler="quantile_hold",
            n_inference=2,
            backend="batched",
        )
    )
    try:
        run.build().start()
        run.advance(4.0)
        summary = run.summary(run.world.tick_log)
    finally:
        run.teardown()
    report = summary["batch_server"]
    assert report["clock"] == "virtual" and report["requests"] > 150 and report["failed_batches"] == 0
    assert run.world.tick_log.summary(warmup_ticks=20)["inaction_fraction"] == 0.0
    assert run.final_updates > 0 and run.part("batch_server").server.closed


def test_the_batch_each_applied_action_rode_in_is_joined_onto_the_tick_log():
    """8 lanes of one CartPole world on the virtual clock, unstaggered, with L(b) = 0.5 + 0.1·b ticks: they
    ask together and ride batches together. Every action the world applied is traced to its batch by the
    tick log's (worker, obs_tick); β ticks have none; the sizes applied are sizes the server formed."""
    from nonstop.experiment import Run, TrainConfig
    from nonstop.inference.batching import applied_batch_sizes
    from nonstop.learning.dqn import DQNConfig

    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(
        TrainConfig(
            env="CartPole",
            seconds=3.0,
            latency="1t",
            algo_settings=dqn,
            scheduler="unstaggered",
            n_inference=8,
            backend="batched",
            batch_curve="linear:0.5t,0.1t",
        )
    )
    try:
        run.build().start()
        run.advance(3.0)
        log = run.world.tick_log
        summary = run.summary(log)
        server = run.part("batch_server").server
        sizes = applied_batch_sizes(log["worker"], log["obs_tick"], log["source"], server.answered_by)
    finally:
        run.teardown()
    agent = np.asarray(log["source"]) == 1
    assert agent.sum() > 20 and (sizes[agent] >= 1).all() and (sizes[~agent] == 0).all()
    report = summary["batch_server"]
    assert sum(report["applied_batch_sizes"].values()) == int(agent.sum())
    assert set(report["applied_batch_sizes"]) <= set(report["batch_sizes"]) and max(report["applied_batch_sizes"]) > 1
    assert report["applied_batch_size_mean"] == pytest.approx(float(sizes[agent].mean()))


@pytest.mark.wall
def test_the_gpu_page_example_runs_as_a_saved_script(tmp_path):
    """docs/gpu.md's example, pasted into a file: it runs and prints the batch sizes it promises."""
    import ast
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    [code] = [
        b
        for b in re.findall(r"```python\n(.*?)```", (root / "docs" / "gpu.md").read_text(), flags=re.DOTALL)
        if "BatchingServer(" in b
    ]
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:]
    sizes = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert isinstance(sizes, dict) and sum(sizes.values()) > 50 and all(1 <= b <= 3 for b in sizes)
