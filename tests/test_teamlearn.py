"""The learning team's DQN (`nonstop.experiment.teamlearn`): n-step returns per agent checked by hand,
the replay's discounts, the Q-networks it offers, and that an update moves Q toward return + discount · max Q̄."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from nonstop.experiment.teamlearn import ARCHS, NStepReturns, TeamLearner, TeamReplay, build_qnet

GAMMA = 0.5


def _collect(n: int) -> tuple[NStepReturns, list[tuple[int, int, float, int, float]]]:
    out: list[tuple[int, int, float, int, float]] = []

    def sink(obs: np.ndarray, action: int, ret: float, next_obs: np.ndarray, discount: float) -> None:
        out.append((int(obs[0]), action, ret, int(next_obs[0]), discount))

    return NStepReturns(n, GAMMA, sink), out


def _obs(k: int) -> np.ndarray:
    return np.array([k], np.float32)


def test_n_step_returns_by_hand_with_a_death_and_a_time_limit() -> None:
    nstep, out = _collect(3)
    # agent 0: rewards 1, 2, 4, 8 then dies on its fifth transition (reward 16)
    for k, r in enumerate([1.0, 2.0, 4.0, 8.0]):
        nstep.add(0, _obs(k), 10 + k, r, _obs(k + 1), False)
    # agent 1 interleaved: two transitions, then its episode ends by the time limit
    nstep.add(1, _obs(100), 7, 3.0, _obs(101), False)
    nstep.add(1, _obs(101), 8, 5.0, _obs(102), False)
    nstep.add(0, _obs(4), 14, 16.0, _obs(5), True)
    nstep.end(1, died=False)
    nstep.end(0, died=True)  # nothing left open: its death closed its windows
    assert out == [
        (0, 10, 1 + 0.5 * 2 + 0.25 * 4, 3, 0.125),  # full windows: γ^3 bootstrap from o_{k+3}
        (1, 11, 2 + 0.5 * 4 + 0.25 * 8, 4, 0.125),
        (2, 12, 4 + 0.5 * 8 + 0.25 * 16, 5, 0.0),  # the death: no bootstrap
        (3, 13, 8 + 0.5 * 16, 5, 0.0),
        (4, 14, 16.0, 5, 0.0),
        (100, 7, 3 + 0.5 * 5, 102, 0.25),  # the time limit: each window bootstraps over its own length
        (101, 8, 5.0, 102, 0.5),
    ]


def test_one_step_is_the_transition_unchanged_and_an_end_on_an_empty_agent_does_nothing() -> None:
    nstep, out = _collect(1)
    nstep.end(3)
    nstep.add(3, _obs(0), 2, 1.5, _obs(1), False)
    nstep.add(3, _obs(1), 4, -1.0, _obs(2), True)
    nstep.end(3, died=True)
    assert out == [(0, 2, 1.5, 1, 0.5), (1, 4, -1.0, 2, 0.0)]
    with pytest.raises(ValueError, match="n_step must be a positive integer"):
        NStepReturns(0, GAMMA, lambda *_: None)


def test_an_agent_that_dies_after_its_episode_was_cut_short_closes_with_discount_zero() -> None:
    nstep, out = _collect(4)
    nstep.add(0, _obs(0), 1, 1.0, _obs(1), False)
    nstep.end(0, died=True)  # left the world without a transition marked done (no read at its death)
    assert out == [(0, 1, 1.0, 1, 0.0)]


def test_replay_keeps_the_discount_and_rings() -> None:
    replay = TeamReplay(3, (2,))
    for k in range(5):
        replay.add(np.full(2, k), k, float(k), np.full(2, k + 1), 0.25 * k)
    assert replay.size == 3 and replay.written == 5
    obs, action, ret, next_obs, discount = replay.sample(50, np.random.default_rng(0))
    assert set(action.tolist()) == {2, 3, 4}  # the oldest two were overwritten
    assert np.allclose(discount, 0.25 * action) and np.allclose(obs[:, 0], action) and np.allclose(ret, action)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_scores_every_action(arch: str) -> None:
    torch = pytest.importorskip("torch")
    net = build_qnet((13, 13, 9), 21, 32, arch)
    assert net(torch.zeros(3, 13, 13, 9)).shape == (3, 21)
    with pytest.raises(ValueError, match="arch must be one of"):
        build_qnet((13, 13, 9), 21, 32, "resnet")


def _cfg(**kw: Any) -> SimpleNamespace:
    base = dict(seed=0, hidden=16, arch="mlp", lr=1e-2, replay_capacity=64, n_step=1, gamma=0.9, batch_size=8)
    base.update(learning_starts=8, double=False, target_update=1000, epsilon_start=1.0, epsilon_end=0.1)
    base.update(epsilon_ticks=100)
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize("double", [False, True])
def test_updates_fit_the_bootstrapped_target(double: bool) -> None:
    """One state, one action: Q(s, 0) → r + discount · max Q̄(s', ·), with Q̄ the untrained target."""
    torch = pytest.importorskip("torch")
    learner = TeamLearner(_cfg(double=double), (2,), 3)
    s, s2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    for _ in range(16):
        learner.replay.add(s, 0, 1.0, s2, 0.5)
    with torch.no_grad():
        q2 = learner.target(torch.tensor(np.array([s2]), dtype=torch.float32))[0]
    for _ in range(300):
        learner.update()
    with torch.no_grad():
        q = float(learner.q(torch.tensor(np.array([s]), dtype=torch.float32))[0, 0])
        online_best = int(learner.q(torch.tensor(np.array([s2]), dtype=torch.float32))[0].argmax())
    best = online_best if double else int(q2.argmax())  # double DQN: the online net picks, the target scores
    expected = 1.0 + 0.5 * float(q2[best])
    assert learner.updates == 300 and abs(q - expected) < 0.05


def test_epsilon_anneals_linearly_over_its_ticks() -> None:
    pytest.importorskip("torch")
    learner = TeamLearner(_cfg(), (2,), 3)
    seen = []
    for ticks in (0, 50, 100, 1000):
        learner.ticks = ticks
        seen.append(learner.epsilon())
    assert seen == pytest.approx([1.0, 0.55, 0.1, 0.1])
