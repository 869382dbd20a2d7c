"""BPQL: the replay's landing states, the β-critic's update as the paper writes it, and learning under delay."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nonstop.learning.bpql import BPQLConfig, bpql_losses
from nonstop.learning.replay import TERMINAL, Batch, ReplayBuffer, ReplayRecorder, SemiMDPBuilder


def test_each_transition_names_the_states_its_action_and_the_next_one_acted_on() -> None:
    b = SemiMDPBuilder(gamma=0.5)
    out = []
    for t in range(1, 8):  # a 3-tick model staggered: decisions on obs t − 3 land at t (tick 1, 2: β)
        out += b.on_tick(t, agent=t >= 3, action=t, obs_tick=t - 3, reward=1.0, truncated=t == 7)
    # the action of obs 0 landed at tick 3, so it acted on obs(2); the next (obs 1) landed at 4, on obs(3)
    assert [(x.s_tick, x.state_tick, x.next_tick, x.next_state_tick) for x in out] == [
        (0, 2, 1, 3),
        (1, 3, 2, 4),
        (2, 4, 3, 5),
        (3, 5, 4, 6),
        # truncated at 7: the value goes on from obs(5) (whose action would land at 8) and the state obs(7)
        (4, 6, 5, TERMINAL),
    ]


def _recorded(*, terminated: bool) -> ReplayBuffer:
    rb = ReplayBuffer.create(capacity=32, obs_shape=(2,), dtype=np.float32, action_shape=(1,), landing_states=True)
    rec = ReplayRecorder(rb, gamma=0.9)
    rec.on_observation(0, np.array([0.0, 0.0], np.float32))
    for t in range(1, 9):
        end = t == 8
        rec.on_tick(
            t,
            agent=t >= 3,
            action=np.array([0.1 * t], np.float32),
            obs_tick=t - 3,
            reward=1.0,
            terminated=end and terminated,
            truncated=end and not terminated,
            terminal_obs=np.array([100.0, 0.0], np.float32) if end else None,
        )
        rec.on_observation(t, np.array([t, 10.0 * t], np.float32))
    return rb


@pytest.mark.parametrize("terminated", [True, False])
def test_the_replay_samples_the_states_with_their_transitions(terminated: bool, no_shm_leak) -> None:
    plain = ReplayBuffer.create(capacity=4, obs_shape=(2,), dtype=np.float32)
    try:
        with pytest.raises(ValueError, match="landing_states=True"):
            plain.sample(1, np.random.default_rng(0), states=True)
    finally:
        plain.unlink()
    rb = _recorded(terminated=terminated)
    try:
        batch = rb.sample(256, np.random.default_rng(0), states=True)
        assert batch is not None and batch.state is not None and batch.next_state is not None
        rows = sorted(set(zip(batch.obs[:, 0], batch.state[:, 0], batch.next_obs[:, 0], batch.next_state[:, 0])))
    finally:
        rb.unlink()
    # o, the state its action met (o + 2), the next decision's o and state; the last decision (obs 5) closes
    # at tick 8's end: on the terminal observation (100), or truncated, the value goes on from obs(6)
    last = (5.0, 7.0, 100.0, 100.0) if terminated else (5.0, 7.0, 6.0, 100.0)
    assert rows == [(o, o + 2, o + 1, o + 3) for o in (0.0, 1.0, 2.0, 3.0, 4.0)] + [last]


def _nets(obs_dim: int, width: int) -> torch.nn.Module:
    from nonstop.learning.sacupdate import SACNetworks

    torch.manual_seed(0)
    return SACNetworks(width, 1, (8,), low=[-2.0], high=[2.0], critic_features=obs_dim)


def test_the_critic_learns_on_the_state_and_the_actor_decides_on_what_it_saw_by_hand() -> None:
    obs_dim, width = 2, 2 + 3  # the world's 2 numbers, then one slot of the action buffer (action, due, age)
    online, target = _nets(obs_dim, width), _nets(obs_dim, width)
    for p in target.parameters():
        p.data.add_(0.1)  # targets differ from the online networks
    rng = np.random.default_rng(1)
    x, x_next = rng.normal(size=(4, width)).astype(np.float32), rng.normal(size=(4, width)).astype(np.float32)
    s, s_next = rng.normal(size=(4, width)).astype(np.float32), rng.normal(size=(4, width)).astype(np.float32)
    action = rng.uniform(-2, 2, size=(4, 1)).astype(np.float32)
    reward, discount = np.array([1.0, 0.0, -1.0, 2.0], np.float32), np.array([0.9, 0.9, 0.0, 0.81], np.float32)
    batch = Batch(x, action, reward, discount, x_next, np.ones(4, np.int64), s, s_next)
    xi_next, xi = torch.randn(4, 1), torch.randn(4, 1)
    out = bpql_losses(online, target, batch, obs_dim=obs_dim, target_entropy=-1.0, noise_next=xi_next, noise=xi)

    t = torch.as_tensor
    alpha, log_scale = online.log_alpha.exp().item(), online.scale.log().sum().item()
    with torch.no_grad():
        # y = R + γ_n·(min_i Q̄_i(s', ã') − α·log π(ã'|x')), ã' ~ π(·|x'): the actor on x', the critics on s'
        a_next, logp_next = online.actor.sample(t(x_next), xi_next)
        q_next = torch.min(target.q1(t(s_next[:, :obs_dim]), a_next), target.q2(t(s_next[:, :obs_dim]), a_next))
        y = t(reward) + t(discount) * (q_next - alpha * (logp_next - log_scale))
        a_norm = (t(action) - online.bias) / online.scale
        s2 = t(s[:, :obs_dim])
        critic = 0.5 * ((online.q1(s2, a_norm) - y).pow(2).mean() + (online.q2(s2, a_norm) - y).pow(2).mean())
        a_pi, logp = online.actor.sample(t(x), xi)  # ã ~ π(·|x), valued at the state s
        actor = (alpha * (logp - log_scale) - torch.min(online.q1(s2, a_pi), online.q2(s2, a_pi))).mean()
    assert torch.allclose(out.target, y, atol=1e-6)
    assert out.critic.item() == pytest.approx(critic.item(), rel=1e-6)
    assert out.actor.item() == pytest.approx(actor.item(), rel=1e-6)
    # the critics read only the world's part of the state: changing the rest leaves their loss as it was
    other = batch._replace(state=np.concatenate([s[:, :obs_dim], x[:, obs_dim:] + 5], axis=1))
    again = bpql_losses(online, target, other, obs_dim=obs_dim, target_entropy=-1.0, noise_next=xi_next, noise=xi)
    assert again.critic.item() == pytest.approx(out.critic.item(), rel=1e-6)
    with pytest.raises(ValueError, match="landing states"):
        bpql_losses(online, target, batch._replace(state=None), obs_dim=obs_dim, target_entropy=-1.0)


def test_its_critics_take_the_world_s_observation_and_its_actor_the_buffer_too() -> None:
    import gymnasium as gym

    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    algo = BPQLConfig(buffer_slots=3, hidden=(8,)).algorithm((3 + 3 * 3,), space)
    nets = algo.build_model()
    assert nets.q1.net[0].in_features == 3 + 1 and nets.actor.net[0].in_features == 12
    with pytest.raises(ValueError, match="BPQL learns on vector observations carrying the actions in flight"):
        BPQLConfig(buffer_slots=0).algorithm((3,), space).build_model()


@pytest.mark.slow
def test_bpql_learns_pendulum_behind_a_six_tick_model(no_shm_leak) -> None:
    """Behind a 6-tick model staggered over 6 workers, BPQL swings Pendulum up in 6,000 ticks (seed 0:
    −151; SAC with the actions in flight in its critic's state, `--delay-aware`, −737; random about −1,200)."""
    from nonstop.bench.delay import run_cell

    out = run_cell("Pendulum-v1", 6, "bpql", 0, 6000, 5)
    # β acts only at each 200-tick episode's start, until its first decision lands (5 ticks: 2.5 %)
    assert out["inaction"] <= 5 / 200 + 0.002 and out["delay_ticks"] == pytest.approx(6.0, abs=0.5)
    assert out["return"] > -400.0, out
