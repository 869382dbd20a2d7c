"""The GPU serving path's logic, on a machine without CUDA (issue 33): the CUDA calls go through an ops
object (`nonstop.inference.cudaops`) and a fake of it (`fakecuda.FakeCudaOps`) records them, so capture at
start, the server's own stream, the shared pool, thread-local capture, the device set per thread, the
learner's version event, the latency curve on replays only, the bf16 copy, the pinned staging and the
wake-ups are each checked here; the real CUDA runs are tests/test_device.py's ``needs_cuda`` tests."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from fakecuda import FakeCudaOps

from nonstop.inference import batching
from nonstop.inference.batching import BatchingServer, Request
from nonstop.inference.batchsize import LatencyCurve
from nonstop.inference.cudaops import CudaOps
from nonstop.inference.device import GraphOutOfMemory, TorchForward, flat_parameters
from nonstop.learning.devicelearner import DeviceLearner, DeviceTrainingState
from nonstop.learning.learners import LearnerSettings, Segments
from nonstop.learning.dqn import DQNConfig, build_q_network, init_training
from nonstop.realtime.clock import WallClock


def _net(n_actions: int = 6) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_q_network((84, 84), n_actions, DQNConfig(k=0.25))


def _frames(b: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (b, 84, 84), dtype=np.uint8)


def _eager(frames: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return _net().eval()(torch.from_numpy(frames).float().div(255.0).unsqueeze(1)).argmax(1).numpy()


def _ask(server: BatchingServer, frame: np.ndarray, lane: int = 0) -> batching._Ticket:
    now = server.clock.now()
    return server.submit(Request(lane, frame, 0, 1, now + 30.0, now))


# ----------------------------------------------------------------------------- 1. capture at start


def test_every_graph_size_is_captured_on_the_servers_thread_and_stream_from_one_pool_before_serving():
    ops = FakeCudaOps()
    forward = TorchForward(_net(), "cpu", dtype="fp32", graph_sizes=(1, 2, 4, 8), ops=ops)
    server = BatchingServer(
        forward,
        LatencyCurve.linear(0.001, 0.0),
        clock=WallClock(spin=0.0),
        max_batch=8,
        example=np.zeros((84, 84), np.uint8),
    )
    try:
        assert server.wait_ready(30)
        # every size captured before any request, on the server's thread and the forward's own stream,
        # from one pool, the device set on that thread first
        assert [g[0] for g in ops.graphs] == [1, 2, 4, 8]
        assert {g[3] for g in ops.graphs} == {"nonstop-batch-server"}
        assert {g[2] for g in ops.graphs} == {forward.stream} and forward.stream is not None
        assert len({g[1] for g in ops.graphs}) == 1
        on_server = [entry[1] for entry in ops.log if entry[0] == "nonstop-batch-server"]
        assert on_server[0] == "set_device" and on_server.index("set_device") < on_server.index("capture")
        assert server.requests == 0
        frames = _frames(3, seed=5)
        answers = [server.wait(_ask(server, frames[j], j)) for j in range(3)]
        assert [a.action for a in answers] == _eager(frames).tolist()
        assert len(ops.graphs) == 4  # served by replays: nothing captured while serving
    finally:
        server.close()


def test_a_size_that_runs_out_of_memory_is_named_with_the_largest_that_fits():
    forward = TorchForward(_net(), "cpu", dtype="fp32", graph_sizes=(1, 4, 16, 64), ops=FakeCudaOps(oom_at=16))
    with pytest.raises(
        GraphOutOfMemory,
        match="capturing the CUDA graph for a batch of 16: the largest batch that fits is 4 .use --max-batch 4.",
    ) as err:
        forward.prepare(np.zeros((84, 84), np.uint8))
    assert "\n" not in str(err.value) and err.value.fits == 4
    server = BatchingServer(
        TorchForward(_net(), "cpu", dtype="fp32", graph_sizes=(1, 4, 16), ops=FakeCudaOps(oom_at=1)),
        LatencyCurve.linear(0.001, 0.0),
        clock=WallClock(spin=0.0),
        max_batch=16,
        example=np.zeros((84, 84), np.uint8),
    )
    try:
        with pytest.raises(GraphOutOfMemory, match="not even the smallest"):
            server.wait_ready(30)
        with pytest.raises(RuntimeError, match="batch of 1: not even the smallest"):
            server.wait(_ask(server, _frames(1)[0]))
        assert server.report()["failed_batches"] == 1 and "batch of 1" in server.report()["prepare_error"]
    finally:
        server.close()


def test_the_real_ops_capture_thread_local_from_the_pool_and_set_the_device(monkeypatch):
    """`CudaOps` itself, with torch.cuda's calls replaced: what it asks of them."""
    seen: dict[str, object] = {}

    class Graph:
        def __init__(self, graph: object, **kw: object) -> None:
            seen.update(kw, graph=graph)

        def __enter__(self) -> None:
            seen["inside"] = True

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "graph", Graph)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: seen.setdefault("device", d))
    ops = CudaOps(torch.device("cuda:1"))
    ops.set_device()
    assert ops.capture("g", "pool", "stream", lambda: "out") == "out"
    assert seen == {
        "device": torch.device("cuda:1"),
        "graph": "g",
        "pool": "pool",
        "stream": "stream",
        "capture_error_mode": "thread_local",
        "inside": True,
    }


def test_the_server_thread_binds_its_device_before_its_first_batch():
    calls: list[str] = []

    class Forward:
        def bind_thread(self) -> None:
            calls.append(threading.current_thread().name)

        def __call__(self, batch: np.ndarray) -> np.ndarray:
            calls.append("forward")
            return np.zeros(len(batch), np.int64)

    with BatchingServer(Forward(), LatencyCurve.linear(0.001, 0.0), clock=WallClock(spin=0.0)) as server:
        server.wait(_ask(server, np.zeros(3, np.float32)))
    assert calls == ["nonstop-batch-server", "forward"]


# ----------------------------------------------------------------------------- 2. L(b) on replays only


class _SlowFirst:
    """A stub forward whose first call is slow, as one bearing a CUDA graph's capture is (100-1,000x a
    replay); it pads to 1, 4 and 8 as a graphed forward does. Each call waits for the test's go, so the
    test decides which requests share a batch."""

    graph_sizes = (1, 4, 8)

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.entered = threading.Semaphore(0)
        self.go = threading.Semaphore(0)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        self.sizes.append(len(batch))
        self.entered.release()
        assert self.go.acquire(timeout=10)
        time.sleep(0.3 if len(self.sizes) == 1 else 0.002)
        return np.zeros(len(batch), np.int64)


def test_the_first_capture_bearing_batch_never_enters_the_curve_which_is_keyed_by_the_padded_size():
    forward, frame = _SlowFirst(), np.zeros(4, np.float32)
    curve = LatencyCurve.linear(0.002, 0.0)
    with BatchingServer(forward, curve, clock=WallClock(spin=0.0), max_batch=8, measure=True) as server:
        for k in (3, 2, 3, 3):  # each round: a batch of one, then k requests queued behind it as one batch
            first = _ask(server, frame)
            assert forward.entered.acquire(timeout=10)
            rest = [_ask(server, frame, j) for j in range(1, k + 1)]
            forward.go.release()
            forward.go.release()
            for t in [first, *rest]:
                server.wait(t)
            assert forward.entered.acquire(timeout=10)
    assert forward.sizes == [1, 3, 1, 2, 1, 3, 1, 3]
    assert curve.measured[1][1] == 3 and curve.measured[4][1] == 3  # the first batch of each size left out
    assert set(curve.measured) == {1, 4}  # batches of 2 and 3 ran as 4: kept there
    assert max(ema for ema, _ in curve.measured.values()) < 0.1, curve.measured  # the 0.3 s first batch never entered
    assert curve(3) == curve(4) == curve.measured[4][0]


def test_a_forward_call_that_captured_is_not_measured_and_the_device_time_is_kept_beside():
    ops = FakeCudaOps()
    forward = TorchForward(_net(), "cpu", dtype="fp32", graph_sizes=(1, 2), ops=ops)
    forward(_frames(1))  # not prepared: this call captures
    assert forward.last is not None and not forward.last.measurable and forward.last.size == 1
    forward(_frames(1))
    assert (
        forward.last.measurable and forward.last.device_s is not None and forward.last.host_s >= forward.last.device_s
    )
    curve = LatencyCurve.linear(0.001, 0.0)
    server = BatchingServer(forward, curve, clock=WallClock(spin=0.0), max_batch=2, measure=True)
    try:
        for _ in range(4):
            server.wait(_ask(server, _frames(1)[0]))
    finally:
        server.close()
    d = curve.describe()
    assert d["padding"] == [1, 2] and d["measurements"] == {1: 3} and 0 < d["device_s"][1] <= d["measured_s"][1]


# ----------------------------------------------------------------------------- 4. the host side and the weights


def test_a_bf16_copy_beside_the_fp32_master_is_recast_once_per_version():
    new = [False]

    def refresh(model: torch.nn.Module) -> bool:
        if not new[0]:
            return False
        new[0] = False
        with torch.no_grad():
            flat_parameters(model).mul_(-1.0)  # a new version: one flat write into the master
        return True

    frames = _frames(8, seed=2)
    forward = TorchForward(_net(), "cpu", dtype="bf16", refresh=refresh)
    master = {p.dtype for p in forward.model.parameters()}
    serving = {p.dtype for p in forward.serving.parameters()}
    assert (
        master == {torch.float32} and serving == {torch.bfloat16} and forward.describe()["serving_dtype"] == "bfloat16"
    )
    for _ in range(5):
        forward(frames)
    assert forward.weight_casts == 1  # at construction only: no cast per pass
    before = forward.q_values(frames)
    new[0] = True
    forward(frames)
    forward(frames)
    assert forward.weight_casts == 2  # once for the one new version
    after = forward.q_values(frames)
    assert not torch.allclose(before, after)  # the serving copy took the new weights
    want = TorchForward(forward.model, "cpu", dtype="fp32").q_values(frames)
    assert torch.allclose(after, want, atol=0.05, rtol=0.05)


def test_frames_go_from_the_request_into_pinned_staging_with_no_other_host_copy():
    ops = FakeCudaOps()
    forward = TorchForward(_net(), "cpu", dtype="fp32", graph_sizes=(1, 2, 4), ops=ops)
    server = BatchingServer(
        forward,
        LatencyCurve.linear(0.001, 0.0),
        clock=WallClock(spin=0.0),
        max_batch=4,
        overlap=True,
        example=np.zeros((84, 84), np.uint8),
    )
    try:
        server.wait_ready(30)
        pinned = [t.numpy() for t in ops.pinned_tensors]
        assert server._staging is not None and server._spare is not None
        assert any(np.shares_memory(server._staging, p) for p in pinned)
        assert any(np.shares_memory(server._spare, p) for p in pinned)
        frames = _frames(6, seed=7)
        got = [server.wait(_ask(server, f, j)).action for j, f in enumerate(frames)]
        assert got == _eager(frames).tolist()
    finally:
        server.close()
    assert forward.host_copies == 0  # uploaded from the staging buffer itself
    forward(frames[:3])  # a batch from elsewhere (not a staging buffer) is copied once, into pinned memory
    assert forward.host_copies == 1


def test_a_request_wakes_the_server_only_when_it_is_idle_not_once_per_request(monkeypatch):
    notified = [0]

    class Counting(threading.Condition):
        def notify(self, n: int = 1) -> None:
            notified[0] += 1
            super().notify(n)

        def notify_all(self) -> None:
            notified[0] += 1
            super().notify_all()

    monkeypatch.setattr(batching.threading, "Condition", Counting)
    gate, started = threading.Event(), threading.Event()

    def forward(batch: np.ndarray) -> np.ndarray:
        started.set()
        gate.wait(10)
        return np.zeros(len(batch), np.int64)

    server = BatchingServer(forward, LatencyCurve.linear(0.001, 0.0), clock=WallClock(spin=0.0), max_batch=64)
    try:
        first = _ask(server, np.zeros(2, np.float32))
        assert started.wait(10)
        before = notified[0]
        tickets = [_ask(server, np.zeros(2, np.float32), j) for j in range(20)]  # the server is busy
        assert notified[0] == before  # twenty requests, no wake-up
        gate.set()
        for t in [first, *tickets]:
            server.wait(t)
        assert server.report()["batches"] == 2 and server.wakeups <= 1
    finally:
        server.close()


# ----------------------------------------------------------------------------- 3. the learner off the server's stream


def _learner_parts(ops: FakeCudaOps | None = None) -> tuple[list, DeviceLearner]:
    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.weights import SharedWeights, TrainingState

    cfg = DQNConfig.for_family("classic", learning_starts=10, batch_size=16)
    rng = np.random.default_rng(0)
    replay = ReplayBuffer.create(capacity=400, obs_shape=(4,), dtype=np.float32)
    frames = [replay.add_frame(rng.normal(size=4).astype(np.float32)) for _ in range(101)]
    for i in range(100):
        replay.add_transition(frames[i], int(rng.integers(2)), float(rng.normal()), 0.99, 1, frames[i + 1])
    torch.manual_seed(1)
    model = build_q_network((4,), 2, cfg)
    n = sum(p.numel() for p in model.parameters())
    state, weights = TrainingState.create(n), SharedWeights.create(n)
    init_training(model, state, weights)
    dstate = DeviceTrainingState.from_host(state, "cpu", ops=ops)
    return [state, weights, replay], DeviceLearner(
        LearnerSettings((4,), 2, cfg), dstate, Segments(state, weights, replay), seed=5
    )


def test_the_learner_writes_on_its_own_stream_and_the_server_waits_for_its_version_event(no_shm_leak):
    """Learner and server on two streams: the server's copy waits on the event the learner's step recorded,
    and the learner's next step waits on the event the server's copy recorded; the copy is one flat copy."""
    from nonstop.experiment.devicelearners import DeviceRefresh

    ops = FakeCudaOps()
    segs, learner = _learner_parts(ops)
    try:
        dstate = learner.dstate
        forward = TorchForward(
            build_q_network((4,), 2, learner.cfg), "cpu", dtype="fp32", refresh=DeviceRefresh(dstate), ops=ops
        )
        assert learner.stream is not None and forward.stream is not None and learner.stream is not forward.stream
        worker = threading.Thread(target=lambda: _steps(learner, 1), name="learner")
        worker.start()
        worker.join()
        mark = len(ops.log)
        forward(np.zeros((3, 4), np.float32))
        worker = threading.Thread(target=lambda: _steps(learner, 1), name="learner")
        worker.start()
        worker.join()
        log = [e for e in ops.log[mark:] if e[1] in ("wait", "record")]
        version = str(dstate.handoff.written.n)
        server_read = [e for e in log if e[0] == "MainThread" and e[1] == "record"][0][2]
        assert log[0] == ("MainThread", "wait", version, str(forward.stream))  # the server waits for the version
        assert ("learner", "wait", server_read, str(learner.stream)) in log  # the learner waits for the copy
        assert log[-1] == ("learner", "record", version, str(learner.stream))  # and records its new version
        sets = [e[0] for e in ops.log if e[1] == "set_device"]
        assert "learner" in sets  # the device set on the learner's thread too
        assert torch.equal(flat_parameters(forward.model), _THETAS[1])  # the server took version 1 whole
    finally:
        for seg in segs:
            seg.unlink()


_THETAS: dict[int, torch.Tensor] = {}


def _steps(learner: DeviceLearner, n: int) -> None:
    with learner.on_stream():
        for _ in range(n):
            learner.apply(learner.gradient())
            _THETAS[learner.dstate.version] = learner.dstate.theta.clone()


def test_a_version_crosses_into_the_servers_model_as_one_flat_copy(monkeypatch, no_shm_leak):
    segs, learner = _learner_parts()
    try:
        forward = TorchForward(build_q_network((4,), 2, learner.cfg), "cpu", dtype="fp32")
        calls = [0]
        real = torch.Tensor.copy_

        def counted(self: torch.Tensor, *a: object, **kw: object) -> torch.Tensor:
            calls[0] += 1
            return real(self, *a, **kw)

        learner.apply(learner.gradient())
        monkeypatch.setattr(torch.Tensor, "copy_", counted)
        learner.dstate.copy_into(forward.model)
        monkeypatch.undo()
        assert calls[0] == 1 and torch.equal(flat_parameters(forward.model), learner.dstate.theta)
    finally:
        for seg in segs:
            seg.unlink()


def test_a_checkpoint_copies_without_holding_the_learners_lock(no_shm_leak):
    """The host's copy is written from a device snapshot after the lock is let go: while the (slow)
    download and host write run, the learner takes its lock and steps on."""
    segs, learner = _learner_parts()
    try:
        learner.apply(learner.gradient())
        dstate, state = learner.dstate, segs[0]
        theta1 = dstate.theta.clone()
        writing, release = threading.Event(), threading.Event()

        class SlowState:
            """The host state, whose params take a while to write (a large model's download)."""

            def __init__(self) -> None:
                self.updates, self.adam_m, self.adam_v, self.target = (
                    state.updates,
                    state.adam_m,
                    state.adam_v,
                    state.target,
                )
                self.params = self

            def __setitem__(self, key: object, value: np.ndarray) -> None:
                writing.set()
                assert release.wait(10)
                state.params[key] = value  # type: ignore[index]

            def restore_counts(self, **kw: int) -> None:
                state.restore_counts(**kw)

        saver = threading.Thread(target=lambda: dstate.to_host(SlowState()))  # type: ignore[arg-type]
        saver.start()
        assert writing.wait(10)
        got = dstate.lock.acquire(timeout=2)  # today's code holds it through the downloads
        if got:
            dstate.lock.release()
        stepped = got and learner.apply(learner.gradient()) > 0
        release.set()
        saver.join(10)
        assert got and stepped and dstate.version == 2 and dstate.host_writes == 1
        np.testing.assert_array_equal(state.params, theta1.numpy())  # the version of the snapshot, whole
        assert not torch.equal(dstate.theta, theta1)
    finally:
        for seg in segs:
            seg.unlink()


# ----------------------------------------------------------------------------- 5. bench gpu


def test_bench_gpu_starts_worlds_at_once_frees_each_k_serves_at_an_explicit_dtype_within_max_batch(
    monkeypatch, capsys, no_shm_leak
):
    """One quick run on the CPU, watched from inside: the worlds' starts overlap, each k's model is gone
    before the next is built, the fp32 reference runs with TF32 off, the ceilings stop at --max-batch,
    the worlds are served at the dtype the result names, the learner's effect is reported, and
    --budget-s leaves out (and names) what does not fit."""
    import json
    import weakref

    from nonstop.bench import gpu as bench_gpu
    from nonstop.cli import main
    from nonstop.policies import models
    from nonstop.realtime import host

    running, most = [0], [0]
    lock = threading.Lock()
    real_start = host.Session.start

    def start(self: host.Session, *a: object, **kw: object) -> object:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            time.sleep(0.3)  # long enough that starts made one after another never overlap
            return real_start(self, *a, **kw)
        finally:
            with lock:
                running[0] -= 1

    built: list[weakref.ref] = []
    alive_at_build: list[list[bool]] = []
    real_impala = models.impala_resnet

    def impala(*a: object, **kw: object) -> torch.nn.Module:
        alive_at_build.append([r() is not None for r in built])
        model = real_impala(*a, **kw)
        built.append(weakref.ref(model))
        return model

    tf32_at_reference: list[bool] = []
    real_q = TorchForward.q_values

    def q_values(self: TorchForward, batch: np.ndarray) -> torch.Tensor:
        tf32_at_reference.append(torch.backends.cudnn.allow_tf32)
        return real_q(self, batch)

    monkeypatch.setattr(host.Session, "start", start)
    monkeypatch.setattr(models, "impala_resnet", impala)
    monkeypatch.setattr(TorchForward, "q_values", q_values)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
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
                "--k",
                "0.25,0.5",
                "--batch-sizes",
                "1,2,4",
                "--worlds",
                "3",
                "--seconds",
                "1",
                "--no-baseline",
                "--no-remote",
                "--max-batch",
                "2",
                "--learner-seconds",
                "0.3",
                "--budget-s",
                "600",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert most[0] == 3  # the three worlds started at once
    assert alive_at_build[1] == [False]  # k=0.25's model was freed before k=0.5's was built
    assert tf32_at_reference[0] is False and torch.backends.cudnn.allow_tf32 is True  # off for the reference, restored
    for c in r["curves"]:
        assert c["ceiling_batch"] <= 2 and c["worlds_ceiling"] <= c["worlds_ceiling_any_batch"]
    assert r["serve_dtype"] == "fp32" and r["serve"]["dtype"] == "fp32" and r["max_batch"] == 2
    effect = r["learner_effect"]
    assert effect["alone"]["p99_ms"] > 0 and effect["with_learner"]["p99_ms"] > 0 and effect["p99_ratio"] > 0
    assert effect["learner_updates_per_s"] > 0 and effect["versions_taken"] >= 1
    assert r["budget"]["budget_s"] == 600 and r["budget"]["skipped"] == []
    # a budget too small for the served part: it is left out and named, the curves still come back
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
                "--k",
                "0.25,0.5",
                "--batch-sizes",
                "1",
                "--worlds",
                "2",
                "--seconds",
                "30",
                "--no-baseline",
                "--no-remote",
                "--learner-seconds",
                "0",
                "--budget-s",
                "20",
                "--json",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["budget"]["skipped"] == ["curves at k=0.5", "batched K=2"] and r["served"] == []
    assert r["curves"][1] == {"k": 0.5, "skipped": "--budget-s: no time left for this k"}
    assert bench_gpu._settings  # the module the CLI ran


def test_bench_gpu_captures_the_servers_graphs_before_its_window_and_names_a_size_that_did_not_fit(monkeypatch):
    import argparse

    from nonstop.bench import gpu as bench_gpu
    from nonstop.bench import gpuserve as bench_gpuserve
    from nonstop.inference import device as device_module

    ops = FakeCudaOps()
    monkeypatch.setattr(device_module, "device_ops", lambda d: ops)
    monkeypatch.setattr(device_module, "default_graph_sizes", lambda d, m: (1, 2, 4))
    args = argparse.Namespace(max_batch=4)
    s = {"device": torch.device("cpu"), "serve_k": 0.25, "serve_dtype": "fp32"}
    server = bench_gpuserve._build_server(
        s, args, LatencyCurve.linear(0.001, 0.0), WallClock(spin=0.0), 6, [0.0], np.zeros((84, 84), np.uint8)
    )
    try:
        assert [g[0] for g in ops.graphs] == [1, 2, 4] and server.requests == 0  # captured before any request
    finally:
        server.close()
    forward = TorchForward(_net(), "cpu", dtype="fp32", graph_sizes=(1, 2, 4, 8), ops=FakeCudaOps(oom_at=4))
    out = bench_gpu._time_forward(forward, _frames(8), [1, 2, 4, 8], 2, WallClock(spin=0.0))
    assert out["out_of_memory_at_batch"] == 4 and out["largest_batch_that_fit"] == 2 and sorted(out["L_s"]) == [1, 2]


@pytest.mark.wall
def test_the_device_learners_thread_sets_its_device_and_steps_on_its_own_stream(no_shm_leak):
    from nonstop.learning.devicelearner import DeviceLearners

    ops = FakeCudaOps()
    segs, learner = _learner_parts(ops)
    try:
        learners = DeviceLearners(learner, WallClock(spin=0.0), 1 / 60, tau_l=0.0).start()
        deadline = time.monotonic() + 20
        while learner.updates < 2:
            assert time.monotonic() < deadline, "the learner never stepped"
            time.sleep(0.01)
        learners.stop()
    finally:
        for seg in segs:
            seg.unlink()
    mine = [e for e in ops.log if e[0] == "nonstop-device-learner"]
    assert mine[0][1] == "set_device"  # before any CUDA work of that thread
    records = [e for e in mine if e[1] == "record"]
    assert records and all(e[3] == str(learner.stream) for e in records)  # each version recorded on its own stream


def test_policies_and_host_learners_set_their_device_in_each_thread_that_acts_or_learns(monkeypatch):
    """cuda:N beyond the server and the device learner: a `TorchPolicy` sets N in the thread that builds it
    and in each worker thread's first act, a host learner (process, Ray or virtual) where it is built; a
    bare ``cuda`` or the CPU sets nothing (recorded with ``torch.cuda.set_device`` replaced: no CUDA here)."""
    from nonstop.policies import placement
    from nonstop.policies.base import TorchPolicy

    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append((str(device), threading.get_ident())))
    placement.enter_device(torch.device("cuda:1"))
    placement.enter_device(torch.device("cuda"))
    placement.enter_device(torch.device("cpu"))
    assert calls == [("cuda:1", threading.get_ident())]

    entered: list[tuple[str, int]] = []
    monkeypatch.setattr(placement, "enter_device", lambda device: entered.append((str(device), threading.get_ident())))
    import gymnasium

    policy = TorchPolicy(torch.nn.Linear(3, 2), gymnasium.spaces.Discrete(2))
    policy.act(np.zeros(3, np.float32))  # the building thread: set once, not again at its act
    worker = threading.Thread(target=lambda: [policy.act(np.zeros(3, np.float32)) for _ in range(3)])
    worker.start()
    worker.join()
    assert [d for d, _ in entered] == ["cpu", "cpu"] and entered[0][1] != entered[1][1]

    from nonstop.learning.learners import Learner
    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.weights import SharedWeights, TrainingState

    cfg = DQNConfig(hidden=(8,))
    n = sum(p.numel() for p in build_q_network((4,), 2, cfg).parameters())
    state, weights = TrainingState.create(n), SharedWeights.create(n)
    replay = ReplayBuffer.create(capacity=16, obs_shape=(4,), dtype=np.float32)
    try:
        entered.clear()
        Learner(0, LearnerSettings((4,), gymnasium.spaces.Discrete(2), cfg), Segments(state, weights, replay), seed=0)
        assert [d for d, _ in entered] == ["cpu"]
    finally:
        for segment in (state, weights, replay):
            segment.unlink()
