"""``nonstop bench gpu``'s third part: what a device learner in the server's process costs the server's
latency (issue 33). The learner runs on a stream of its own and hands each version to the server by an
event (`nonstop.learning.devicelearner`); the figure is the server's p99 with it against without it."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

__all__ = ["learner_effect"]


def learner_effect(device: Any, k: float, dtype: str, b: int, seconds: float) -> dict[str, Any]:
    """The serving forward of an IMPALA ResNet of width ``k`` in ``dtype`` on ``device`` (its graphs captured
    first) timed at batch ``b`` for ``seconds`` alone, then as long with a device learner of the same
    width updating back to back in a thread (its own stream; the forward takes each version once):
    p50/p99 in ms, their ratio, the learner's updates per second."""
    from nonstop.experiment.devicelearners import DeviceRefresh
    from nonstop.inference.device import TorchForward, default_graph_sizes
    from nonstop.learning.devicelearner import DeviceLearner, DeviceTrainingState
    from nonstop.learning.learners import LearnerSettings, Segments
    from nonstop.learning.dqn import DQNConfig, build_q_network, init_training
    from nonstop.learning.replay import ReplayBuffer
    from nonstop.learning.weights import SharedWeights, TrainingState

    cfg = DQNConfig.for_family("atari", k=k, batch_size=32, learning_starts=0)
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, (b, 84, 84), dtype=np.uint8)
    model = build_q_network((84, 84), 18, cfg)
    n = sum(p.numel() for p in model.parameters())
    replay = ReplayBuffer.create(capacity=512, obs_shape=(84, 84), dtype=np.uint8)
    state, weights = TrainingState.create(n), SharedWeights.create(n)
    stop, updates = threading.Event(), [0]
    try:
        _fill(replay, rng)
        init_training(model, state, weights)
        dstate = DeviceTrainingState.from_host(state, device)
        learner = DeviceLearner(LearnerSettings((84, 84), 18, cfg), dstate, Segments(state, weights, replay), seed=0)
        refresh = DeviceRefresh(dstate)
        forward = TorchForward(
            build_q_network((84, 84), 18, cfg),
            str(device),
            dtype=dtype,
            graph_sizes=default_graph_sizes(device, b),
            refresh=refresh,
        )
        forward.prepare(frames[0])

        alone = _timed(forward, frames, seconds)
        thread = threading.Thread(
            target=_learn, args=(learner, stop, updates), name="nonstop-bench-learner", daemon=True
        )
        thread.start()
        beside = _timed(forward, frames, seconds)
        stop.set()
        thread.join(30)
    finally:
        stop.set()
        for seg in (replay, state, weights):
            seg.unlink()

    a, w = _ms(alone), _ms(beside)
    return {
        "k": k,
        "dtype": dtype,
        "device": str(device),
        "batch": b,
        "seconds": seconds,
        "alone": a,
        "with_learner": w,
        "p99_ratio": w["p99_ms"] / a["p99_ms"] if a["p99_ms"] > 0 else None,
        "learner_updates_per_s": updates[0] / seconds,
        "versions_taken": len(refresh.loaded),
    }


def _fill(replay: Any, rng: np.random.Generator) -> None:
    """128 random transitions, enough for the learner's batches."""
    ids = [replay.add_frame(rng.integers(0, 256, (84, 84), dtype=np.uint8)) for _ in range(129)]
    for i in range(128):
        replay.add_transition(ids[i], int(rng.integers(18)), float(rng.normal()), 0.99, 1, ids[i + 1])


def _timed(forward: Any, frames: np.ndarray, seconds: float) -> list[float]:
    """The forward's wall seconds per pass over ``seconds`` (5 passes at least; the first dropped)."""
    took: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(took) < 5:
        t0 = time.perf_counter()
        forward(frames)
        took.append(time.perf_counter() - t0)
    return took[1:]


def _learn(learner: Any, stop: threading.Event, updates: list[int]) -> None:
    """Device-learner updates back to back on its own stream until ``stop``, counted in ``updates``."""
    with learner.on_stream():
        while not stop.is_set():
            loss = learner.gradient()
            if loss is not None:
                learner.apply(loss)
                updates[0] += 1


def _ms(took: list[float]) -> dict[str, float]:
    return {
        "p50_ms": float(np.percentile(took, 50) * 1e3),
        "p99_ms": float(np.percentile(took, 99) * 1e3),
        "passes": len(took),
    }
