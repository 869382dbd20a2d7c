"""DCAC-Q's resampled targets against computations worked by hand, the replay's runs, and RTAC, DCAC and
DCAC-Q trained end to end (the paper's RTAC and DCAC losses by hand: tests/test_rtac_dcac_by_hand.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from nonstop.learning.dcac import dcac_horizon, resample, sample_subtrajectories
from nonstop.learning.dcacq import dcac_target
from nonstop.learning.rtac import BufferLayout


# the two-tick example: one world number, K = 2 slots of (action, ticks to apply, age), newest first
LAYOUT = BufferLayout(obs_dim=1, action_width=1, k=2)
A0, A1 = 0.5, -0.5  # the replayed actions decided on x_0 and x_1


def two_ticks(a1_due_in_x2: float = 2.0, slot1_of_x2: float = A0) -> torch.Tensor:
    x0 = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    x1 = [1.0, A0, 2.0, 1.0, 0.0, 0.0, 0.0]  # a_0 in flight, due in 2 ticks
    x2 = [2.0, A1, a1_due_in_x2, 1.0, slot1_of_x2, 1.0, 2.0]  # a_1 newest, a_0 behind it, due in 1
    return torch.tensor([[x0, x1, x2]])


def policy(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic stand-in for π: ã = 0.1 · observation, log π(ã|x) = −observation."""
    return 0.1 * x[:, :1], -x[:, 0]


def q_bar(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1) + a[:, 0]


def test_dcac_q_resamples_a_two_tick_example_by_hand() -> None:
    obs = two_ticks()
    actions = torch.tensor([[[A0], [A1]]])
    n = dcac_horizon(obs, actions, torch.ones(1, 2, dtype=torch.bool), LAYOUT, n_max=2, first=1)
    assert n.tolist() == [2]  # a_1 is still 2 ticks from landing at x_2: both ticks are usable
    states, acts, logps = resample(obs, LAYOUT, 2, policy, first=1)
    # x̃_1 = x_1; ã_1 = 0.1 · 1 = 0.1, log π = −1
    assert states[0].tolist() == obs[:, 1].tolist() and acts[0].item() == pytest.approx(0.1)
    # x̃_2: a_1 (slot 0) replaced by ã_1, a_0 (slot 1) kept; ã_2 = 0.2, log π = −2
    assert states[1].tolist() == [pytest.approx([2.0, 0.1, 2.0, 1.0, A0, 1.0, 2.0])]
    assert acts[1].item() == pytest.approx(0.2) and logps[1].item() == -2.0
    y = dcac_target(
        obs,
        torch.tensor([[1.0, 3.0]]),
        torch.tensor([[0.9, 0.8]]),
        n,
        layout=LAYOUT,
        sample=policy,
        q_target=q_bar,
        alpha=0.5,
    )
    # y = r_0 + D_1 r_1 − α D_1 log π_1 + D_2 (Q̄(x̃_2, ã_2) − α log π_2)
    #   = 1 + 0.9·3 − 0.5·0.9·(−1) + 0.72·((8.6 + 0.2) − 0.5·(−2)) = 4.15 + 0.72·9.8 = 11.206
    assert y.item() == pytest.approx(11.206, abs=1e-5)


def test_dcac_q_stops_where_resampling_would_be_wrong() -> None:
    actions = torch.tensor([[[A0], [A1]]])
    links = torch.ones(1, 2, dtype=torch.bool)
    # a_1 lands at x_2's tick (0 ticks to apply): x_2's observation already felt it, so n = 1
    landed = two_ticks(a1_due_in_x2=0.0)
    assert dcac_horizon(landed, actions, links, LAYOUT, n_max=2, first=1).tolist() == [1]
    y = dcac_target(
        landed,
        torch.tensor([[1.0, 3.0]]),
        torch.tensor([[0.9, 0.8]]),
        torch.tensor([1]),
        layout=LAYOUT,
        sample=policy,
        q_target=q_bar,
        alpha=0.5,
    )
    # y = r_0 + D_1 (Q̄(x_1, ã_1) − α log π_1) = 1 + 0.9·((4.5 + 0.1) + 0.5) = 5.59
    assert y.item() == pytest.approx(5.59, abs=1e-5)
    # x_2's buffer does not hold a_0 where the chain says (another decision came between): n = 1
    assert dcac_horizon(two_ticks(slot1_of_x2=0.25), actions, links, LAYOUT, n_max=2, first=1).tolist() == [1]
    # the chain is broken (an episode ended): n = 1; and n_max = 1 is one step whatever the buffer says
    broken = torch.tensor([[True, False]])
    assert dcac_horizon(two_ticks(), actions, broken, LAYOUT, n_max=2, first=1).tolist() == [1]
    assert dcac_horizon(two_ticks(), actions, links, LAYOUT, n_max=1, first=1).tolist() == [1]


def test_subtrajectories_follow_the_replay_chain() -> None:
    from nonstop.learning.replay import ReplayBuffer

    rb = ReplayBuffer.create(capacity=16, obs_shape=(2,), dtype=np.float32, action_shape=(1,))
    try:
        f = [rb.add_frame(np.array([t, 0], np.float32)) for t in range(4)]
        for t in range(3):
            rb.add_transition(f[t], np.array([t / 10], np.float32), float(t), 0.9, 1, f[t + 1])
        runs = sample_subtrajectories(rb, 8, 2, np.random.default_rng(0))
        assert runs is not None and runs.obs.shape == (8, 3, 2) and runs.linked.all()
        starts = runs.obs[:, 0, 0]
        assert np.array_equal(runs.obs[:, 2, 0], starts + 2) and np.allclose(runs.action[:, 1, 0], (starts + 1) / 10)
        assert sample_subtrajectories(rb, 8, 4, np.random.default_rng(0)) is None  # fewer than 4 transitions
    finally:
        rb.unlink()


def _train(algo: str, run, capsys, seconds: str, *more: str) -> dict:
    import json

    from nonstop.cli import main

    assert (
        main(
            [
                "train",
                "--algo",
                algo,
                "--env",
                "Pendulum-v1",
                "--latency",
                "3t",
                "--seconds",
                seconds,
                "--learning-starts",
                "40",
                "--batch-size",
                "16",
                "--hidden",
                "16",
                "--replay-capacity",
                "5000",
                "--progress-every",
                "2",
                "--out",
                str(run),
                *more,
            ]
        )
        == 0
    )
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("algo", ["rtac", "dcac", "dcac-q", "bpql", "dmsac"])
def test_rtac_and_dcac_train_resume_and_export(algo, tmp_path, capsys, no_shm_leak) -> None:
    import json

    from nonstop.cli import main

    run = tmp_path / algo
    first = _train(algo, run, capsys, "4")
    config = json.loads((run / "config.json").read_text())
    assert config["algo"] == algo and config["algo_settings"]["buffer_slots"] == 3  # K from the 3-tick latency
    assert first["updates"] > 0
    assert main(["train", "--resume", str(run), "--seconds", "6"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["updates"] > first["updates"]
    # the export's actor takes Pendulum's 3 numbers, then 3 slots of (action, due, age)
    assert main(["export", str(run)]) == 0
    program = torch.jit.load(str(run / "export" / "policy.torchscript.pt"))
    action = program(torch.zeros(3 + 3 * 3))
    assert action.shape[-1] == 1 and -2.0 <= float(action.reshape(-1)[0]) <= 2.0
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.export import delay_aware_observations
    from nonstop.learning.runlog import read_config

    probe = gym.make("Pendulum-v1")
    space = delay_aware_observations(TrainConfig(**read_config(run)), probe.observation_space, probe.action_space)
    assert space.shape == (3 + 3 * 3,)


@pytest.mark.parametrize(("algo", "reach"), [("dcac", 2.0), ("dcac-q", 3.0)])
def test_dcac_resamples_as_far_as_the_staggered_delay_allows(algo, reach, no_shm_leak) -> None:
    from nonstop.experiment.config import TrainConfig
    from nonstop.experiment.registry import lookup
    from nonstop.experiment.run import Run

    settings = lookup("algo", algo).config_class(learning_starts=10**6, hidden=(8,), replay_capacity=4000)
    cfg = TrainConfig(
        env="Pendulum-v1",
        clock="virtual",
        seconds=30.0,
        latency="3t",
        n_inference=3,
        scheduler="max_time",
        algo=algo,
        algo_settings=settings,  # collect only
    )
    run = Run(cfg)
    try:
        run.build().start()
        run.advance(30.0)
        algo_ = run.algorithm
        runs = algo_.sample(run.learning.replay, 64, np.random.default_rng(0))
        model, target = algo_.build_model(), algo_.build_model()
        loss = algo_.backward(model, target, runs)
        plain = run.learning.replay.sample(4, np.random.default_rng(0))
    finally:
        run.teardown()
    assert runs.obs.shape[1] == 4 and np.isfinite(float(loss))  # runs of K = 3 transitions
    # one decision per tick, each landing 3 ticks after its observation. DCAC resamples a_0 too, which lands
    # at x_3's tick: r_2 felt it, so n = 2; DCAC-Q keeps a_0, and a_1, a_2 are still in flight at x_3: n = 3
    assert reach - 0.2 < algo_.last_horizon <= reach
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.actor.parameters())
    with pytest.raises(TypeError, match="runs of consecutive transitions"):
        algo_.backward(model, target, plain)


_SEE_THE_BUFFER = "rtac, dcac, dcac-q, bpql or dmsac"  # as the refusals name them


def test_the_refusals_name_every_algorithm_that_sees_the_actions_in_flight() -> None:
    """The two refusals list the algorithms by name: a new one with an action buffer must be added to them."""
    from nonstop.experiment.registry import lookup, names

    seeing = [n for n in names("algo") if lookup("algo", n).needs_action_buffer]
    assert ", ".join(seeing[:-1]) + " or " + seeing[-1] == _SEE_THE_BUFFER


@pytest.mark.parametrize("algo", ["rtac", "dcac", "dcac-q", "bpql", "dmsac"])
def test_algorithms_that_see_the_actions_in_flight_are_refused_where_delay_aware_is(algo) -> None:
    """RTAC and DCAC always see the buffer, so they go where --delay-aware goes: thread or process workers
    (on batching lanes the pool's due ticks were measured a tick off the tick log), and no self-play."""
    from nonstop.experiment.config import TrainConfig

    for kwargs in ({"backend": "batched"}, {"backend": "batched_process", "clock": "wall"}, {"self_play": True}):
        with pytest.raises(ValueError, match=r"^--delay-aware \(and --algo " + _SEE_THE_BUFFER):
            TrainConfig(env="Pendulum-v1", algo=algo, latency="3t", **kwargs)
    assert TrainConfig(env="Pendulum-v1", algo=algo, latency="3t", backend="process").inference_backend == "thread"
