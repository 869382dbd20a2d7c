"""DMSAC: the rollout through the actions in flight lands on the state the action will meet, the losses as the
module writes them, SAC at a 1-tick model, what it refuses, and learning under delay."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from nonstop.inference.inflight import ActionBuffer
from nonstop.learning.dmsac import DMSACConfig
from nonstop.learning.dmsacnets import DMSACNetworks, PresentActor, dmsac_losses
from nonstop.learning.replay import Batch

# a linear world of 2 numbers and 1 action in [-2, 2]: s_u = A·s_{u−1} + B·a_u, a_u the action applied at tick u
A = np.array([[0.9, 0.2], [-0.3, 1.1]])
B = np.array([[0.5], [-1.0]])
SPACE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _linear_nets(k: int) -> DMSACNetworks:
    """DMSAC's networks whose model is the linear world exactly: Δ(s, a) = (A − I)·s + B·a."""
    torch.manual_seed(0)
    nets = DMSACNetworks(2, 1, k, (), low=[-2.0], high=[2.0])  # no hidden layer: f_φ is one linear map
    layer = nets.rollout.dynamics[0]
    with torch.no_grad():
        layer.weight.copy_(torch.as_tensor(np.concatenate([A - np.eye(2), B], axis=1), dtype=torch.float32))
        layer.bias.zero_()
    return nets


def _delayed_world(tau: int, ticks: int, k: int) -> tuple[list[np.ndarray], dict[int, np.ndarray]]:
    """The states s_0 … s_ticks of the linear world behind a τ-tick model staggered over τ workers, and the
    observation with the actions in flight each decision saw (as a pool's `ActionBuffer` encodes it): the action
    decided on obs(o) lands at o + τ; β applies 0 before the first one lands."""
    rng = np.random.default_rng(3)
    buf = ActionBuffer(SPACE, k=k)
    states, seen, applied = [np.array([1.0, -0.5])], {}, {}
    for t in range(ticks):
        seen[t] = buf.augment(states[t].astype(np.float32), tick=t, episode=0)
        action = rng.uniform(-2, 2, size=1).astype(np.float32)
        buf.decided(("w", t), obs_tick=t, episode=0, action=action, due_tick=t + tau)
        applied[t + tau] = action
        u = t + 1  # the host's tick t + 1: the action due then acts on s_t
        a_u = applied.get(u, np.zeros(1, np.float32))
        buf.landed(u, episode=0, obs_tick=u - tau if u in applied else None)
        states.append(A @ states[t] + B @ a_u.astype(np.float64))
    return states, seen


@pytest.mark.parametrize("tau", [1, 2, 4, 6])
def test_the_rollout_reaches_the_state_the_decided_action_will_act_on(tau: int) -> None:
    """On obs(t) the action decided lands at t + τ and acts on s_{t+τ−1}: the rollout through the τ − 1 actions
    in flight (due at t + 1 … t + τ − 1) must reach exactly that state, not the tick before or after."""
    k = tau
    nets = _linear_nets(k)
    states, seen = _delayed_world(tau, 30, k)
    for t in range(tau, 30 - tau):  # every action in flight was the agent's
        x = torch.as_tensor(seen[t][None])
        predicted = nets.present_state(x)[0].detach().double().numpy()
        np.testing.assert_allclose(predicted, states[t + tau - 1], rtol=1e-4, atol=1e-4)
        if tau > 1:
            for wrong in (t + tau - 2, t + tau):
                assert not np.allclose(predicted, states[wrong], rtol=1e-3, atol=1e-3)
        # the worker's actor reads that state
        mean, log_std = nets.actor(torch.as_tensor(states[t + tau - 1], dtype=torch.float32)[None])
        assert torch.allclose(nets(x), torch.cat([mean, log_std], dim=-1), atol=1e-4)


def test_where_no_action_is_due_at_a_tick_the_one_before_holds() -> None:
    nets = _linear_nets(3)
    s0 = np.array([1.0, -0.5])
    # newest first: an action due in 3 ticks, none due at 2, one due next tick; the slot applied at t holds at t + 2
    x = np.array([*s0, 1.0, 3.0, 1.0, -1.0, 1.0, 3.0, 2.0, 0.0, 4.0], np.float32)
    s1 = A @ s0 + B @ [-1.0]
    s2 = A @ s1 + B @ [-1.0]  # held
    s3 = A @ s2 + B @ [1.0]
    got = nets.present_state(torch.as_tensor(x[None]))[0].detach().double().numpy()
    np.testing.assert_allclose(got, s3, rtol=1e-4, atol=1e-4)
    # zero-padded slots (age 0) are nothing in flight
    empty = np.array([*s0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], np.float32)
    assert np.allclose(nets.present_state(torch.as_tensor(empty[None]))[0].detach().numpy(), s0)


def _batch(rng: np.random.Generator, width: int, n_ticks: list[int]) -> Batch:
    size = len(n_ticks)
    rows = [rng.normal(size=(size, width)).astype(np.float32) for _ in range(4)]
    action = rng.uniform(-2, 2, size=(size, 1)).astype(np.float32)
    reward = rng.normal(size=size).astype(np.float32)
    discount = np.full(size, 0.99, np.float32)
    return Batch(rows[0], action, reward, discount, rows[1], np.array(n_ticks, np.int64), rows[2], rows[3])


def test_the_losses_by_hand() -> None:
    obs_dim, k = 2, 2
    torch.manual_seed(1)
    online = DMSACNetworks(obs_dim, 1, k, (8,), low=[-2.0], high=[2.0])
    target = DMSACNetworks(obs_dim, 1, k, (8,), low=[-2.0], high=[2.0])
    batch = _batch(np.random.default_rng(0), obs_dim + k * 3, [1, 2, 1, 1, 3, 1])
    xi_next, xi = torch.randn(6, 1), torch.randn(6, 1)
    out = dmsac_losses(online, target, batch, target_entropy=-1.0, noise_next=xi_next, noise=xi)

    t = torch.as_tensor
    s, s_next = t(batch.state[:, :obs_dim]), t(batch.next_state[:, :obs_dim])
    alpha, log_scale = online.log_alpha.exp().item(), online.scale.log().sum().item()
    a = t(batch.action) / 2.0
    with torch.no_grad():
        # SAC's losses, on the states: the actor and the critics never read x
        a_next, logp_next = online.actor.sample(s_next, xi_next)
        q_next = torch.min(target.q1(s_next, a_next), target.q2(s_next, a_next))
        y = t(batch.reward) + t(batch.discount) * (q_next - alpha * (logp_next - log_scale))
        critic = 0.5 * ((online.q1(s, a) - y).pow(2).mean() + (online.q2(s, a) - y).pow(2).mean())
        a_pi, logp = online.actor.sample(s, xi)
        actor = (alpha * (logp - log_scale) - torch.min(online.q1(s, a_pi), online.q2(s, a_pi))).mean()
        # the model: one-tick transitions only (rows 0, 2, 3, 5), each dimension over its change's variance
        one = [0, 2, 3, 5]
        change = (s_next - s)[one]
        err = online.rollout.step(s, t(batch.action))[one] - s_next[one]  # the world's units
        model = (err.pow(2) / change.var(0, unbiased=False)).mean()
    assert torch.allclose(out.target, y, atol=1e-6)
    assert out.critic.item() == pytest.approx(critic.item(), rel=1e-5)
    assert out.actor.item() == pytest.approx(actor.item(), rel=1e-5)
    assert out.model.item() == pytest.approx(model.item(), rel=1e-5)
    # the observations with their buffers play no part
    shuffled = batch._replace(obs=batch.obs + 7.0, next_obs=batch.next_obs - 3.0)
    again = dmsac_losses(online, target, shuffled, target_entropy=-1.0, noise_next=xi_next, noise=xi)
    assert again.critic.item() == pytest.approx(out.critic.item()) and again.model.item() == pytest.approx(model.item())
    # no two one-tick transitions: φ rests
    rest = dmsac_losses(online, target, batch._replace(n_ticks=np.full(6, 2)), target_entropy=-1.0)
    assert rest.model.item() == 0.0
    with pytest.raises(ValueError, match="landing states"):
        dmsac_losses(online, target, batch._replace(state=None), target_entropy=-1.0)


def test_the_actor_on_the_prediction_by_hand() -> None:
    """``actor_on_prediction``: the actor reads ŝ(x), the model's rollout of the observation the action was decided
    on, as a worker does, and is valued at the true state s; the target's ã' likewise comes from π(·|ŝ(x'))."""
    obs_dim, k = 2, 2
    torch.manual_seed(2)
    online = DMSACNetworks(obs_dim, 1, k, (8,), low=[-2.0], high=[2.0])
    target = DMSACNetworks(obs_dim, 1, k, (8,), low=[-2.0], high=[2.0])
    batch = _batch(np.random.default_rng(4), obs_dim + k * 3, [1, 1, 1, 1])
    buffers = np.array([[0.5, 1.0, 1.0, -0.5, 0.0, 2.0]] * 4, np.float32)  # one action due next tick, one landed
    batch = batch._replace(obs=np.concatenate([batch.obs[:, :2], buffers], 1))
    batch = batch._replace(next_obs=np.concatenate([batch.next_obs[:, :2], buffers], 1))
    xi_next, xi = torch.randn(4, 1), torch.randn(4, 1)
    out = dmsac_losses(online, target, batch, target_entropy=-1.0, on_prediction=True, noise_next=xi_next, noise=xi)
    t = torch.as_tensor
    s, s_next = t(batch.state[:, :obs_dim]), t(batch.next_state[:, :obs_dim])
    alpha, log_scale = online.log_alpha.exp().item(), online.scale.log().sum().item()
    with torch.no_grad():
        seen = online.rollout.step(t(batch.obs[:, :2]), t([[0.5]] * 4))  # the slot due next tick acts
        seen_next = online.rollout.step(t(batch.next_obs[:, :2]), t([[0.5]] * 4))
        a_next, logp_next = online.actor.sample(seen_next, xi_next)
        q_next = torch.min(target.q1(s_next, a_next), target.q2(s_next, a_next))
        y = t(batch.reward) + t(batch.discount) * (q_next - alpha * (logp_next - log_scale))
        a_pi, logp = online.actor.sample(seen, xi)
        actor = (alpha * (logp - log_scale) - torch.min(online.q1(s, a_pi), online.q2(s, a_pi))).mean()
    assert torch.allclose(out.target, y, atol=1e-6)
    assert out.actor.item() == pytest.approx(actor.item(), rel=1e-5)
    plain = dmsac_losses(online, target, batch, target_entropy=-1.0, noise_next=xi_next, noise=xi)
    assert plain.actor.item() != pytest.approx(actor.item(), rel=1e-3)  # the actor read another state there


def test_at_a_one_tick_model_it_is_sac() -> None:
    """Behind a 1-tick model nothing is in flight when a worker decides and the landing state is the observation:
    DMSAC acts and learns exactly as SAC with the same weights."""
    from nonstop.learning.sac import SACConfig
    from nonstop.learning.sacupdate import sac_losses

    dm = DMSACConfig(buffer_slots=1, hidden=(8,)).algorithm((3 + 3,), SPACE)
    nets = dm.build_model()
    sac = SACConfig(hidden=(8,)).algorithm((3,), SPACE).build_model()
    sac.load_state_dict({k: v for k, v in nets.state_dict().items() if not k.startswith("rollout")})
    _, seen = _delayed_world(1, 6, 1)
    rng = np.random.default_rng(0)
    obs = np.stack([np.concatenate([rng.normal(size=3), seen[t][2:]]) for t in range(1, 6)]).astype(np.float32)
    assert torch.equal(nets(torch.as_tensor(obs)), sac(torch.as_tensor(obs[:, :3])))
    b = _batch(rng, 3 + 3, [1, 1, 1, 1])
    b = b._replace(state=b.obs, next_state=b.next_obs)  # s = obs(o): the 1-tick model's landing state
    plain = b._replace(obs=b.obs[:, :3], next_obs=b.next_obs[:, :3], state=None, next_state=None)
    xi_next, xi = torch.randn(4, 1), torch.randn(4, 1)
    mine = dmsac_losses(nets, nets, b, target_entropy=-1.0, noise_next=xi_next, noise=xi)
    theirs = sac_losses(sac, sac, plain, target_entropy=-1.0, noise_next=xi_next, noise=xi)
    for name in ("critic", "actor", "alpha"):
        assert getattr(mine, name).item() == pytest.approx(getattr(theirs, name).item(), rel=1e-6), name


def test_the_model_travels_in_theta_with_log_alpha_last_and_the_export_scripts() -> None:
    algo = DMSACConfig(buffer_slots=3, hidden=(8,)).algorithm((3 + 3 * 3,), SPACE)
    nets = algo.build_model()
    names = [n for n, _ in nets.named_parameters()]
    assert names[-1] == "temperature.log_alpha" and any(n.startswith("rollout.dynamics.") for n in names)
    theta = torch.cat([p.detach().reshape(-1) for p in nets.parameters()]).numpy()
    assert algo.exploration(0, theta) == pytest.approx(1.0)  # α from θ's last number
    assert nets.q1.net[0].in_features == 3 + 1 and nets.actor.net[0].in_features == 3
    program = torch.jit.script(algo.export_module(nets))
    buffer = _delayed_world(3, 8, 3)[1][6][2:]  # 3 slots: 2 in flight, 1 applied
    x = torch.as_tensor(np.concatenate([[0.3, -0.2, 0.9], buffer]).astype(np.float32))
    expected = PresentActor(nets)(x[None])
    assert torch.allclose(program(x), expected) and -2.0 <= float(expected.detach()[0, 0]) <= 2.0


def test_what_it_cannot_do_is_refused_at_the_door() -> None:
    from nonstop.learning.dmsac import DMSAC

    with pytest.raises(ValueError, match=r"^DMSAC needs a Box action space of one axis; CartPole-v1 has"):
        DMSAC.check_spaces(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), "CartPole-v1")
    frames = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    with pytest.raises(ValueError, match=r"^DMSAC learns from vector observations; CarRacing-v3's are \(84, 84, 3\)"):
        DMSAC.check_spaces(frames, gym.spaces.Box(-1, 1, (3,)), "CarRacing-v3")
    with pytest.raises(ValueError, match="DMSAC learns on vector observations carrying the actions in flight"):
        DMSACConfig(buffer_slots=0).algorithm((3,), SPACE).build_model()
    with pytest.raises(ValueError, match="buffer_slots"):
        DMSACConfig(buffer_slots=-1)


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 100 s alone on a quiet core; CI's first pass runs it beside other learning
def test_dmsac_learns_pendulum_behind_a_six_tick_model(no_shm_leak) -> None:
    """Behind a 6-tick model staggered over 6 workers, DMSAC swings Pendulum up in 6,000 ticks (seed 0, its last
    5 episodes: −282, its last 10: −219; random play about −1,200)."""
    from nonstop.bench.delay import run_cell

    out = run_cell("Pendulum-v1", 6, "dmsac", 0, 6000, 5)
    # β acts only at each 200-tick episode's start, until its first decision lands (5 ticks: 2.5 %)
    assert out["inaction"] <= 5 / 200 + 0.002 and out["delay_ticks"] == pytest.approx(6.0, abs=0.5)
    assert out["return"] > -400.0, out
