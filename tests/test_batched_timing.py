"""The batched backend keeps the realtime contract on the virtual clock as thread workers do (docs/gpu.md, "One
world on one server"): a batch of L = k ticks started on tick t's observation lands on tick t + k, and where a
world loses ticks it is to the one server's throughput (one batch at a time), which held answers recover."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from nonstop.experiment.config import TrainConfig
from nonstop.experiment.loop import train
from nonstop.learning.dqn import DQNConfig

# theory/inaction at 60 Hz, its episodes long; nothing learns (no update is due), so only the timing is run
SECONDS = 6.0
WARMUP = 60  # ticks before the staggered workers are in step


def _run(backend: str, latency: str, **kwargs: object) -> dict:
    dqn = DQNConfig.for_family("theory", learning_starts=10**6, replay_capacity=1000)
    result = train(
        TrainConfig(
            env="theory/inaction", seconds=SECONDS, backend=backend, latency=latency, algo_settings=dqn, **kwargs
        )
    )
    log = result["tick_log"]
    return log.summary(warmup_ticks=WARMUP) | {"server": result["parts"].get("batch_server")}


def test_a_one_tick_batch_lands_on_the_next_tick_as_a_one_tick_worker_does(no_shm_leak) -> None:
    """A request made on a tick's publish (``tick_grace`` after its deadline) counts from the deadline, as a
    worker's declared latency does: before, its batch ended ``tick_grace`` after the next tick and waited a
    whole tick more (delay 2 where the thread worker's is 1)."""
    thread, batched = _run("thread", "1t"), _run("batched", "1t")
    assert thread["delay_mean_ticks"] == pytest.approx(1.0) and thread["inaction_fraction"] == 0.0
    assert batched["delay_mean_ticks"] == pytest.approx(1.0)
    assert batched["inaction_fraction"] == thread["inaction_fraction"] == 0.0
    assert batched["server"]["late"] == 0


def test_one_server_that_takes_three_ticks_a_batch_fills_the_ticks_only_with_held_answers(no_shm_leak) -> None:
    """One server runs one batch at a time: at L = 3 ticks it answers once every 3 ticks, and the answers of
    one batch all come on one tick. Workers that submit at once (exp_time, N_I = 3) then act on one tick in
    three, whatever N_I: inaction 1 − τ_M/L = 2/3, by design. Schedulers that hold each answer to its
    release slot (fill) spread one batch's answers over the ticks: with N_I = 6 (two batches of 3 in
    turn) inaction is near the thread workers' for the same latency, at twice their delay (one batch
    waited for, one computed)."""
    thread = _run("thread", "3t")
    submitted_at_once = _run("batched", "3t")
    held = _run("batched", "3t", scheduler="fill", n_inference=6)
    assert thread["inaction_fraction"] < 0.01 and thread["delay_mean_ticks"] == pytest.approx(3.0, abs=0.05)
    assert submitted_at_once["inaction_fraction"] == pytest.approx(2 / 3, abs=0.01)
    assert held["inaction_fraction"] < thread["inaction_fraction"] + 0.02
    assert held["delay_mean_ticks"] == pytest.approx(6.0, abs=0.1)
    assert max(int(b) for b in held["server"]["batch_sizes"]) >= 3
