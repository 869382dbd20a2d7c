"""Request lanes in other processes (docs/gpu.md, "Lanes in other processes"): frames reach one batching
server through a shared-memory lane ring, answers come back by sequence number, nothing is pickled per
frame, the ring is unlinked however the lanes end, and the server stages the next batch's frames while
a forward runs without touching the running batch."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from conftest import process_alive, segments_of

from nonstop.inference.batching import BatchingServer, ServerClosed
from nonstop.inference.batchsize import LatencyCurve
from nonstop.inference.lanering import LaneRing, LaneTimeout, RemoteLane, RemoteLanes
from nonstop.realtime.clock import VirtualClock, WallClock

SHAPE = (8, 8)
N_ACTIONS = 6
SPACE = gym.spaces.Discrete(N_ACTIONS)


def _weights() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((int(np.prod(SHAPE)), N_ACTIONS)).astype(np.float32)


def _scores(batch: np.ndarray) -> np.ndarray:
    """The model: fixed random scores per frame (the server takes their argmax)."""
    return batch.reshape(len(batch), -1).astype(np.float32) @ _weights()


def _expected(frame: np.ndarray) -> int:
    return int(_scores(frame[None])[0].argmax())


def _slow_scores(batch: np.ndarray) -> np.ndarray:
    time.sleep(0.003)  # a forward that takes a while, so requests of several lanes meet in one batch
    return _scores(batch)


def _lane_seats(lanes: list[RemoteLane], seed: int, n: int, results: mp.Queue) -> None:
    """A child process: one thread per lane, each acting ``n`` times on frames of its own; counts the
    answers that are not the model's argmax for that very frame, and every pickling on the way."""
    from multiprocessing.reduction import ForkingPickler

    pickled = [0]

    def counting(original):
        def wrapper(*args, **kwargs):
            pickled[0] += 1
            return original(*args, **kwargs)

        return wrapper

    pickle.dumps = counting(pickle.dumps)  # type: ignore[assignment]
    ForkingPickler.dumps = counting(ForkingPickler.dumps)  # type: ignore[method-assign]
    RemoteLane.__reduce__ = counting(RemoteLane.__reduce__)  # type: ignore[method-assign]
    LaneRing.__reduce__ = counting(LaneRing.__reduce__)  # type: ignore[method-assign]
    wrong, sizes = [0] * len(lanes), [[] for _ in lanes]

    def seat(j: int) -> None:
        rng = np.random.default_rng(seed * 100 + j)
        for _ in range(n):
            frame = rng.integers(0, 256, SHAPE, dtype=np.uint8)
            decision = lanes[j].act(frame)
            wrong[j] += decision.action != _expected(frame)
            sizes[j].append(decision.batch_size)

    threads = [threading.Thread(target=seat, args=(j,)) for j in range(len(lanes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    count = pickled[0]
    for lane in lanes:
        lane.close()
    results.put((seed, wrong, [max(s) for s in sizes], count))


def _act_forever(lane: RemoteLane, ready: mp.Event) -> None:
    frame = np.zeros(SHAPE, np.uint8)
    lane.act(frame)
    ready.set()
    while True:
        lane.act(frame)


@pytest.fixture
def server():
    s = BatchingServer(_slow_scores, LatencyCurve.linear(0.003, 0.0001), clock=WallClock(), max_batch=16)
    yield s
    s.close()


@pytest.mark.wall
def test_two_processes_of_two_lanes_each_get_their_own_frames_answers_from_one_server(server, no_shm_leak):
    """2 child processes × 2 lanes, every lane its own random frames: every answer is the model's argmax for
    the lane's own frame (a mix-up of lanes or of requests fails), lanes of different processes meet in
    batches, and nothing in a child pickles while it acts."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=4) as lanes:
        children = [
            ctx.Process(
                target=_lane_seats,
                args=([lanes.lane(2 * c + j, SPACE, tau_m=1 / 60) for j in range(2)], c, 60, results),
            )
            for c in range(2)
        ]
        for p in children:
            p.start()
        got = sorted(results.get(timeout=120) for _ in children)
        for p in children:
            p.join(timeout=10)
        report = lanes.report()
    for seed, wrong, _largest, pickled in got:
        assert wrong == [0, 0], f"child {seed}: answers that were not its own frame's argmax: {wrong}"
        assert pickled == 0, f"child {seed} pickled {pickled} times while acting"
    assert report["fed"] == 4 * 60 and server.report()["requests"] == 4 * 60
    assert max(server.report()["batch_sizes"]) >= 2, server.report()["batch_sizes"]  # lanes shared batches
    assert all(p.exitcode == 0 for p in children)


def test_the_request_path_hands_the_server_a_preallocated_view_and_pickles_nothing(server, monkeypatch):
    """In one process (lanes as threads): 40 requests of one lane reach the server as the one private
    buffer of that lane, and neither the lane nor the ring is pickled after the lane is made."""
    reduced = []
    monkeypatch.setattr(RemoteLane, "__reduce__", lambda self: reduced.append(self) or (object, ()))
    monkeypatch.setattr(LaneRing, "__reduce__", lambda self: reduced.append(self) or (object, ()))
    with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=2) as lanes:
        seen: list[int] = []
        submit = server.submit
        monkeypatch.setattr(
            server, "submit", lambda request, on_settle=None: seen.append(id(request.obs)) or submit(request, on_settle)
        )
        lane = lanes.lane(1, SPACE, tau_m=1 / 60)
        rng = np.random.default_rng(0)
        for _ in range(40):
            frame = rng.integers(0, 256, SHAPE, dtype=np.uint8)
            assert lane.act(frame).action == _expected(frame)
        assert set(seen) == {id(lanes._private[1])}
    assert reduced == []


def test_an_answer_to_a_request_the_lane_gave_up_on_is_never_taken_for_the_next(no_shm_leak):
    """The first batch hangs until released; the lane gives up (`LaneTimeout`) and asks again with
    another frame. When the server moves on, the late answer to the first request arrives first: the lane
    waits past it and returns the second frame's action."""
    gate, calls = threading.Event(), []

    def gated(batch: np.ndarray) -> np.ndarray:
        calls.append(batch.copy())
        if len(calls) == 1:
            gate.wait(10)
        return _scores(batch)

    rng = np.random.default_rng(3)
    first = rng.integers(0, 256, SHAPE, dtype=np.uint8)
    second = first.copy()
    while _expected(second) == _expected(first):
        second = rng.integers(0, 256, SHAPE, dtype=np.uint8)
    with BatchingServer(gated, LatencyCurve.linear(0.001, 0.0), clock=WallClock()) as srv:
        with RemoteLanes(srv, np.zeros(SHAPE, np.uint8), n_lanes=1) as lanes:
            lane = lanes.lane(0, SPACE, tau_m=1 / 60, wait_s=0.2)
            with pytest.raises(LaneTimeout, match="no answer within 0.2s"):
                lane.act(first)
            got = []
            t = threading.Thread(target=lambda: got.append(lane.act(second)))
            t.start()
            time.sleep(0.05)
            gate.set()
            t.join(timeout=10)
    assert len(calls) == 2 and (calls[0][0] == first).all() and (calls[1][0] == second).all()
    assert got and got[0].action == _expected(second) != _expected(first)


@pytest.mark.wall
def test_a_lane_waiting_when_the_server_closes_raises_server_closed_at_once(no_shm_leak):
    gate = threading.Event()
    srv = BatchingServer(lambda b: gate.wait(10) and _scores(b), LatencyCurve.linear(0.001, 0.0), clock=WallClock())
    lanes = RemoteLanes(srv, np.zeros(SHAPE, np.uint8), n_lanes=1)
    lane = lanes.lane(0, SPACE, tau_m=1 / 60, wait_s=None)
    errors: list[BaseException] = []

    def act() -> None:
        try:
            lane.act(np.zeros(SHAPE, np.uint8))
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=act)
    t.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    lanes.close()
    t.join(timeout=5)
    took = time.monotonic() - t0
    gate.set()
    srv.close()
    assert errors and isinstance(errors[0], ServerClosed), errors
    assert took < 2.0, f"the waiting lane took {took:.2f}s to notice"
    with pytest.raises(ServerClosed):
        lane.act(np.zeros(SHAPE, np.uint8))


@pytest.mark.wall
def test_the_ring_is_unlinked_after_close_even_when_a_child_holding_a_lane_was_sigkilled(server):
    """A child acts in a loop and is SIGKILLed mid-stream: the server's other lane is still answered
    right, and closing the lanes removes the ring from /dev/shm (it was there until then)."""
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    lanes = RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=2)
    try:
        child = ctx.Process(target=_act_forever, args=(lanes.lane(0, SPACE, tau_m=1 / 60), ready))
        child.start()
        assert ready.wait(60), "the child never got an answer"
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=10)
        assert child.exitcode == -signal.SIGKILL and not process_alive(child.pid)
        lane = lanes.lane(1, SPACE, tau_m=1 / 60)
        rng = np.random.default_rng(5)
        for _ in range(10):
            frame = rng.integers(0, 256, SHAPE, dtype=np.uint8)
            assert lane.act(frame).action == _expected(frame)
        assert any("lanes" in name for name in segments_of(os.getpid()))
    finally:
        lanes.close()
    assert not any("lanes" in name for name in segments_of(os.getpid()))


def test_bad_arguments_are_refused_in_one_line(server):
    with pytest.raises(ValueError, match="wall-clock server"):
        RemoteLanes(
            BatchingServer(_scores, LatencyCurve.linear(0.001, 0.0), clock=VirtualClock()), np.zeros(2), n_lanes=1
        )
    with pytest.raises(ValueError, match="n_lanes must be an int >= 1"):
        RemoteLanes(server, np.zeros(2), n_lanes=0)
    with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=2) as lanes:
        with pytest.raises(ValueError, match=r"no lane 2: the ring has lanes 0..1"):
            lanes.lane(2, SPACE, tau_m=1 / 60)
        with pytest.raises(ValueError, match="does not fit the ring's uint8"):
            lanes.lane(0, SPACE, tau_m=1 / 60).act(np.zeros((4, 4), np.uint8))
        with pytest.raises(ValueError, match="tau_m must be a positive number"):
            lanes.lane(0, SPACE, tau_m=0)


# ----------------------------------------------------------------------------- vector actions (SAC's)

BOX = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)


def _vectors(batch: np.ndarray) -> np.ndarray:
    """A model that answers each frame with a float32 vector of its own: (its mean, its first pixel, -1.5)."""
    flat = batch.reshape(len(batch), -1).astype(np.float32)
    return np.stack([flat.mean(axis=1) / 128 - 1, flat[:, 0] / 256, np.full(len(batch), -1.5, np.float32)], axis=1)


def _vector_seat(lanes: list[RemoteLane], n: int, results: mp.Queue) -> None:
    """A child process: each lane acts ``n`` times on frames of its own; the largest error of an answer
    against the model's vector for that very frame, and the answers' dtypes and shapes."""
    worst, kinds = 0.0, set()
    rng = np.random.default_rng(5)
    for _ in range(n):
        for lane in lanes:
            frame = rng.integers(0, 256, SHAPE, dtype=np.uint8)
            action = lane.act(frame).action
            kinds.add((str(action.dtype), action.shape))
            worst = max(worst, float(np.abs(action - _vectors(frame[None])[0]).max()))
    for lane in lanes:
        lane.close()
    results.put((worst, sorted(kinds)))


@pytest.mark.wall
def test_a_ring_carries_each_lanes_float_vector_to_a_process_of_its_own(no_shm_leak):
    """A server whose answers are (b, 3) float32 vectors (a Box's shape and dtype): two lanes in a child
    process get exactly their own frame's vector, as float32 arrays of the space's shape."""
    server = BatchingServer(_vectors, LatencyCurve.linear(0.002, 0.0), clock=WallClock(), action_shape=(3,))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    try:
        with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=2, action_space=BOX) as lanes:
            assert lanes.ring.action_shape == (3,) and lanes.ring.action_dtype == np.float32
            child = ctx.Process(
                target=_vector_seat, args=([lanes.lane(j, BOX, tau_m=1 / 60) for j in range(2)], 30, results)
            )
            child.start()
            worst, kinds = results.get(timeout=120)
            child.join(timeout=10)
    finally:
        server.close()
    assert worst == 0.0 and kinds == [("float32", (3,))]
    assert child.exitcode == 0 and server.report()["failed_batches"] == 0


def test_a_vector_server_refuses_a_wrong_answer_and_a_ring_of_another_shape(no_shm_leak):
    server = BatchingServer(_vectors, LatencyCurve.linear(0.001, 0.0), clock=WallClock(), action_shape=(3,))
    try:
        with pytest.raises(ValueError, match=r"actions of shape \(3,\), the lanes' space .* has \(2,\)"):
            RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=1, action_space=gym.spaces.Box(-1, 1, (2,)))
        with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=1, action_space=BOX) as lanes:
            action = lanes.lane(0, BOX, tau_m=1 / 60).act(np.full(SHAPE, 7, np.uint8)).action
            assert action.dtype == np.float32 and action.tolist() == pytest.approx([7 / 128 - 1, 7 / 256, -1.5])
    finally:
        server.close()
    objects = BatchingServer(
        lambda b: np.array([None] * len(b), object),
        LatencyCurve.linear(0.001, 0.0),
        clock=WallClock(),
        action_shape=(3,),
    )
    try:
        lane = objects.lane(BOX, tau_m=1 / 60)
        with pytest.raises(RuntimeError, match=r"want \(1, 3\) actions"):
            lane.act(np.zeros(SHAPE, np.uint8))
    finally:
        objects.close()


# ----------------------------------------------------------------------------- overlap: staging the next batch


@pytest.mark.wall
@pytest.mark.parametrize("overlap", [True, False])
def test_the_next_batch_is_staged_during_the_forward_without_touching_the_running_one(overlap):
    """The first batch (one frame of 1s) holds its forward until three more requests (frames of 2s, 3s, 4s)
    are queued and, with overlap, staged; it then finds its input unchanged. The second batch is those
    three, answered right, and with overlap all three rows were in place before it began."""
    release, entered, seen = threading.Event(), threading.Event(), []

    def forward(batch: np.ndarray) -> np.ndarray:
        first = not seen
        snapshot = batch.copy()
        if first:
            entered.set()
            assert release.wait(10)
            assert np.array_equal(batch, snapshot), "the running batch's input changed under its forward"
        seen.append(snapshot)
        return batch.reshape(len(batch), -1)[:, 0].astype(np.int64)

    clock = WallClock()
    srv = BatchingServer(forward, LatencyCurve.linear(0.001, 0.0), clock=clock, max_batch=8, overlap=overlap)
    lanes = [srv.lane(tau_m=1 / 60, due_ticks=1) for _ in range(4)]
    answers: dict[int, int] = {}

    def ask(j: int) -> None:
        answers[j] = lanes[j].act(np.full(SHAPE, j + 1, np.uint8)).action

    threads = [threading.Thread(target=ask, args=(0,))]
    threads[0].start()
    assert entered.wait(10)
    for j in (1, 2, 3):
        threads.append(threading.Thread(target=ask, args=(j,)))
        threads[-1].start()
    deadline = time.monotonic() + 10
    while srv.requests < 4 or (overlap and sum(t is not None for t in srv._staged) < 3):
        assert time.monotonic() < deadline, "the three requests were never staged"
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(timeout=10)
    srv.close()
    assert answers == {0: 1, 1: 2, 2: 3, 3: 4}
    assert len(seen) == 2 and sorted(seen[1][:, 0, 0].tolist()) == [2, 3, 4]
    assert srv.report()["staged_ahead"] == (3 if overlap else 0) and srv.report()["overlap"] is overlap


# ----------------------------------------------------------------------------- a run's process workers as lanes


def test_batched_process_is_a_registered_backend_and_batched_on_the_virtual_clock():
    from nonstop.experiment.batchedbackend import batched_process_policy
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.registry import lookup

    assert lookup("policy_backend", "batched_process") is batched_process_policy
    assert TrainConfig(clock="wall", backend="batched_process").inference_backend == "batched_process"
    assert TrainConfig(backend="batched_process").inference_backend == "batched"
    saved = TrainConfig(clock="wall", backend="batched_process", max_batch=8).to_dict()
    assert saved["max_batch"] == 8 and saved["device"] == "cpu"  # the server's settings are kept for resume


@pytest.mark.wall
def test_a_wall_clock_run_serves_its_process_workers_as_remote_lanes(no_shm_leak):
    """CartPole on the wall clock, 2 workers in processes of their own (no torch loaded in them), lanes of
    the run's server: the ring fed every request the server answered, actions were applied from batches,
    no worker died, and the teardown reaps the workers and unlinks the ring."""
    from nonstop.experiment import Run, TrainConfig
    from nonstop.learning.dqn import DQNConfig

    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(
        TrainConfig(
            env="CartPole", clock="wall", backend="batched_process", seconds=3.0, algo_settings=dqn, n_inference=2
        )
    )
    try:
        run.build().start()
        run.advance(3.0)
        pids = [p.worker._process.pid for p in run.pool._policies.values()]
        maps = [open(f"/proc/{pid}/maps").read() for pid in pids]
    finally:
        run.teardown()
    assert len(pids) == 2
    assert not any("libtorch" in m for m in maps), "a lane's process loaded torch: it holds no model"
    report = run.summary(run.world.tick_log)["batch_server"]
    assert sum(run.pool.report()["deaths"]) == 0, run.pool.report()["events"]
    assert report["remote_lanes"]["fed"] == report["requests"] > 10 and report["remote_lanes"]["lanes"] == 2
    assert report["applied_batch_sizes"] and min(report["applied_batch_sizes"]) >= 1
    assert not any(process_alive(pid) for pid in pids)


def test_batched_process_needs_a_worker_count():
    from nonstop.experiment import Run, TrainConfig

    run = Run(TrainConfig(env="CartPole", clock="wall", backend="batched_process", seconds=1.0, n_inference="auto"))
    try:
        with pytest.raises(ValueError, match="--backend batched_process makes one ring slot a worker"):
            run.build().start()
    finally:
        run.teardown()


@pytest.mark.wall
def test_a_killed_worker_process_is_restarted_on_its_slot_and_served_again(no_shm_leak):
    """Worker 0's process is SIGKILLed mid-run: the pool restarts it, its new lane takes slot 0 of the
    ring (a late answer to the dead one's request is not taken for the new one's), and it acts again."""
    from nonstop.experiment import Run, TrainConfig
    from nonstop.learning.dqn import DQNConfig

    dqn = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)
    run = Run(
        TrainConfig(
            env="CartPole", clock="wall", backend="batched_process", seconds=60.0, algo_settings=dqn, n_inference=2
        )
    )
    try:
        run.build().start()
        run.advance(1.5)
        before = after = run.pool.report()["actions"][0]
        run.pool.kill(0)
        for _ in range(60):  # a new worker process takes a few seconds to start on a busy machine
            run.advance(0.5)
            after = run.pool.report()["actions"][0]
            if after > before + 10:
                break
        events = [e[2] for e in run.pool.report()["events"] if e[1] == 0]
    finally:
        run.teardown()
    assert events[:2] == ["died", "restarted"], events
    assert after > before + 10, (before, after)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job starts with SIGINT ignored


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.wall
def test_a_signal_ends_a_batched_process_train_with_its_ring_unlinked_and_workers_reaped(tmp_path, signum, code):
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nonstop.cli",
            "train",
            "--env",
            "CartPole",
            "--clock",
            "wall",
            "--backend",
            "batched_process",
            "--n-inference",
            "2",
            "--learning-starts",
            "50",
            "--batch-size",
            "8",
            "--progress-every",
            "0.5",
            "--seconds",
            "600",
            "--out",
            str(run),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 180
        while not (
            any("lanes" in n for n in segments_of(proc.pid))
            and (run / "progress.csv").exists()
            and len((run / "progress.csv").read_text().splitlines()) >= 3
        ):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never got going"
            time.sleep(0.1)
        children = {
            int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent_of(int(p.name)) == proc.pid
        }
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert not segments_of(proc.pid), segments_of(proc.pid)
    assert len(children) >= 2  # the workers' processes (and the resource tracker), all gone within seconds
    deadline = time.monotonic() + 10
    while any(process_alive(pid) for pid in children):
        assert time.monotonic() < deadline, [pid for pid in children if process_alive(pid)]
        time.sleep(0.1)


def _parent_of(pid: int) -> int:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


@pytest.mark.wall
def test_bench_gpu_serves_worlds_in_processes_of_their_own_through_the_ring(capsys, no_shm_leak):
    """`bench gpu`'s third design on this CPU: 2 Boxing worlds, each in its own process, 2 lanes each,
    one server here: every world's requests were served, and the JSON's last line names the design."""
    import json

    from nonstop.cli import main

    assert (
        main(
            [
                "bench",
                "gpu",
                "--quick",
                "--device",
                "cpu",
                "--dtypes",
                "fp32",
                "--batch-sizes",
                "1,2",
                "--worlds",
                "2",
                "--seconds",
                "2",
                "--no-baseline",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    remote = [row for row in r["served"] if row["design"] == "batched_remote"]
    assert len(remote) == 1 and remote[0]["worlds"] == 2
    # 2 worlds x 2.5 s at 60 Hz: well over a hundred requests, each answered through the ring
    assert remote[0]["requests"] > 100 and 0.0 <= remote[0]["inaction_max"] <= 1.0
    assert remote[0]["delay_p50_ticks"] is not None and "worlds_batched_remote" in r
    trip = r["lane_round_trip"]  # what the ring adds to a request: well under a 60 Hz tick even on 2 busy cores
    assert trip["requests"] == 400 and 0 < trip["remote_us"]["p50"] < 5000, trip


def test_an_exception_in_the_servers_process_still_unlinks_the_ring(server, no_shm_leak):
    with pytest.raises(KeyError):
        with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=3) as lanes:
            assert lanes.lane(0, SPACE, tau_m=1 / 60).act(np.ones(SHAPE, np.uint8)).batch_size == 1
            raise KeyError("boom")
    assert not any("lanes" in name for name in segments_of(os.getpid()))


@pytest.mark.wall
def test_a_feeder_that_fails_tells_the_waiting_lanes_at_once(server, monkeypatch, no_shm_leak):
    """A request the feeder cannot read (here: its submit raises) stops the ring: the lane raises
    ServerClosed at once rather than waiting out its wait_s, and the report names what happened."""
    with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=1) as lanes:
        monkeypatch.setattr(server, "submit", lambda *a, **k: 1 / 0)
        t0 = time.monotonic()
        with pytest.raises(ServerClosed):
            lanes.lane(0, SPACE, tau_m=1 / 60, wait_s=30).act(np.ones(SHAPE, np.uint8))
        assert time.monotonic() - t0 < 5
        assert lanes.report()["error"] == "ZeroDivisionError: division by zero"


def test_a_closed_lane_refuses_to_act(server):
    with RemoteLanes(server, np.zeros(SHAPE, np.uint8), n_lanes=1) as lanes:
        lane = lanes.lane(0, SPACE, tau_m=1 / 60)
        lane.close()
        with pytest.raises(ServerClosed, match="lane 0 is closed"):
            lane.act(np.zeros(SHAPE, np.uint8))
