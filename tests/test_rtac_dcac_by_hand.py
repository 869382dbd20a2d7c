"""RTAC's and DCAC's updates as their papers write them, checked against numbers worked out by hand.

Tiny linear networks with set weights and fixed noise: every expected loss and gradient below is written
out from the equations in `nonstop.learning.rtac`'s and `nonstop.learning.dcac`'s docstrings.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nonstop.learning.dcac import dcac_horizon, dcac_losses
from nonstop.learning.rtac import ActorCritic, BufferLayout, rtac_losses

# ----------------------------------------------------------------------------- RTAC

RTAC_LAYOUT = BufferLayout(obs_dim=1, action_width=1, k=1)  # x = (s, action, ticks to apply, age)


def test_rtac_one_loss_with_the_twin_min_and_the_weighting_by_hand() -> None:
    w1 = torch.tensor([0.5, 1.0, 0.0, 0.0], requires_grad=True)  # V_1(x) = w1·x
    w2 = torch.tensor([0.3, 1.5, 0.0, 0.0], requires_grad=True)  # V_2(x) = w2·x
    w1_bar, w2_bar = torch.tensor([0.4, 2.0, 0.0, 0.0]), torch.tensor([0.5, 1.0, 0.0, 0.0])  # the target V̄_i
    theta = torch.tensor(0.3, requires_grad=True)  # the actor: a = θ·s, log π(a|x) = −0.5

    def values(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.stack([x @ a, x @ b], dim=-1)

    x = torch.tensor([[1.0, 0.2, 1.0, 1.0]])
    x_next = torch.tensor([[2.0, 0.7, 1.0, 1.0]])  # its newest slot holds the behaviour's action, 0.7
    out = rtac_losses(
        x,
        torch.tensor([1.0]),
        torch.tensor([0.9]),
        x_next,
        nets=ActorCritic(
            sample=lambda v: (theta * v[:, :1], torch.full((v.shape[0],), -0.5)),
            values=lambda v: values(v, w1, w2),
            values_frozen=lambda v: values(v, w1.detach(), w2.detach()),
            values_target=lambda v: values(v, w1_bar, w2_bar),
            alpha=0.1,
        ),
        layout=RTAC_LAYOUT,
        reward_scale=2.0,
        actor_weight=0.2,
    )
    # a = 0.3; x'(a) = [2, 0.3, 1, 1]; V̄_1(x'(a)) = 0.8 + 0.6 = 1.4, V̄_2 = 1.0 + 0.3 = 1.3: the min is 1.3
    # y = c·r + γ·1.3 − α·log π = 2 + 1.17 + 0.05 = 3.22
    assert out.target.tolist() == [pytest.approx(3.22)]
    # V_1(x) = 0.5 + 0.2 = 0.7, V_2(x) = 0.3 + 0.3 = 0.6: L_V = (0.7 − 3.22)² + (0.6 − 3.22)² = 6.3504 + 6.8644
    assert out.critic.item() == pytest.approx(13.2148, abs=1e-5)
    # V_1(x'(a)) = 1.0 + 0.3 = 1.3, V_2(x'(a)) = 0.6 + 0.45 = 1.05: L_π = α·log π − γ·1.05 = −0.05 − 0.945
    assert out.actor.item() == pytest.approx(-0.995, abs=1e-6)
    # L = 0.2·L_π + 0.8·L_V = −0.199 + 10.57184
    assert out.total.item() == pytest.approx(10.37284, abs=1e-5)
    g_theta, g_w1, g_w2 = torch.autograd.grad(out.total, [theta, w1, w2])
    # ∂L/∂θ = 0.2·(−γ·∂V_2/∂a·∂a/∂θ) = 0.2·(−0.9·1.5·1.0): through the smaller value only
    assert g_theta.item() == pytest.approx(-0.27, abs=1e-6)
    # ∂L/∂w_i = 0.8·2·(V_i(x) − y)·x; the actor's term reaches no value weight (held fixed)
    assert g_w1.tolist() == pytest.approx([-4.032, -0.8064, -4.032, -4.032], abs=1e-5)  # 1.6·(−2.52)·x
    assert g_w2.tolist() == pytest.approx([-4.192, -0.8384, -4.192, -4.192], abs=1e-5)  # 1.6·(−2.62)·x


def test_rtac_writes_the_gradient_of_its_one_loss_through_the_shared_trunk() -> None:
    import gymnasium as gym

    from nonstop.learning.replay import Batch
    from nonstop.learning.rtac import RTACConfig

    algo = RTACConfig(hidden=(8, 8), buffer_slots=1).algorithm((3 + 3,), gym.spaces.Box(-2.0, 2.0, (1,)))
    online, target = algo.build_model(), algo.build_model()
    rng = np.random.default_rng(0)
    obs, next_obs = rng.normal(size=(5, 6)).astype(np.float32), rng.normal(size=(5, 6)).astype(np.float32)
    batch = Batch(
        obs, np.zeros((5, 1), np.float32), np.ones(5, np.float32), np.full(5, 0.9, np.float32), next_obs, np.ones(5)
    )
    torch.manual_seed(1)
    algo.backward(online, target, batch)
    written = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in online.parameters()]
    torch.manual_seed(1)
    out = algo.losses(online, target, batch)
    expected = torch.autograd.grad(out.total, list(online.parameters()), allow_unused=True, retain_graph=True)
    for name, got, want in zip([n for n, _ in online.named_parameters()], written, expected):
        assert torch.allclose(got, torch.zeros_like(got) if want is None else want), name
    # one network: the actor's hidden layers are the trunk V_1 reads, so both losses train them
    trunk = online.actor.net[0].weight
    critic_part = torch.autograd.grad(out.critic, trunk, retain_graph=True)[0]
    actor_part = torch.autograd.grad(out.actor, trunk, retain_graph=True)[0]
    assert critic_part.abs().sum() > 0 and actor_part.abs().sum() > 0
    assert torch.allclose(trunk.grad, 0.2 * actor_part + 0.8 * critic_part, atol=1e-6)
    assert out.target.shape == (5,)


def test_rtac_steps_a_shared_trunk_one_network_of_twin_values() -> None:
    from nonstop.learning.rtacnets import RTACNetworks

    nets = RTACNetworks(6, 1, (8, 8), low=[-2.0], high=[2.0])
    names = [n for n, _ in nets.named_parameters()]
    assert names[0].startswith("actor.") and "value_head.weight" in names and names[-1] == "temperature.log_alpha"
    x = torch.randn(4, 6)
    assert nets.values(x).shape == (4, 2)
    h = nets.trunk(x)  # V_1 is a head on the actor's trunk: changing the head's last layer leaves V_1 alone
    assert torch.allclose(nets.values(x)[:, 0], nets.value_head(h)[:, 0])


# ----------------------------------------------------------------------------- DCAC: a two-tick example

# one world number, K = 2 slots of (action, ticks to apply, age), newest first
LAYOUT = BufferLayout(obs_dim=1, action_width=1, k=2)
A0, A1 = 0.5, -0.5  # the replayed actions decided on x_0 and x_1
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def two_ticks(a0_due_in_x1: float = 2.0) -> torch.Tensor:
    x0 = [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # nothing in flight
    x1 = [1.0, A0, a0_due_in_x1, 1.0, 0.0, 0.0, 0.0]  # a_0 in flight
    x2 = [2.0, A1, 2.0, 1.0, A0, 1.0, 2.0]  # a_1 newest, a_0 behind it, due in 1
    return torch.tensor([[x0, x1, x2]])


class LinearGaussian:
    """A tiny actor: ã = θ·(s + newest buffered action) + e^φ·ξ_j, ξ fixed per resampled step; its
    log π(ã|x) = −ξ²/2 − φ − log √(2π) (a Gaussian at its own reparameterised sample)."""

    def __init__(self, noise: list[float]) -> None:
        self.theta = torch.tensor(0.1, requires_grad=True)
        self.phi = torch.tensor(0.0, requires_grad=True)
        self.noise = iter(noise)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xi = next(self.noise)
        mean = self.theta * (x[:, 0] + x[:, 1])
        a = mean + self.phi.exp() * xi
        return a[:, None], (-0.5 * xi**2 - self.phi - LOG_SQRT_2PI).expand(x.shape[0])


def twin(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.stack([x @ a, x @ b], dim=-1)


def test_dcac_critic_and_actor_on_a_two_tick_example_by_hand() -> None:
    obs = two_ticks()
    actions = torch.tensor([[[A0], [A1]]])
    n = dcac_horizon(obs, actions, torch.ones(1, 2, dtype=torch.bool), LAYOUT, n_max=2, first=0)
    assert n.tolist() == [2]  # a_0 (due in 1 at x_2) and a_1 (due in 2) are still in flight at x_2
    pi = LinearGaussian([0.2, -0.4, 0.0])  # ξ_0, ξ_1 (and ξ_2 for the action at x̃_2, unused)
    w1 = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], requires_grad=True)
    w2 = torch.tensor([1.0, 2.0, 0.0, 0.0, -1.0, 0.0, 0.0], requires_grad=True)
    w1_bar = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    w2_bar = torch.tensor([0.5, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    out = dcac_losses(
        obs,
        torch.tensor([[1.0, 3.0]]),
        torch.tensor([[0.9, 0.8]]),
        n,
        layout=LAYOUT,
        nets=ActorCritic(
            sample=pi,
            values=lambda x: twin(x, w1, w2),
            values_frozen=lambda x: twin(x, w1.detach(), w2.detach()),
            values_target=lambda x: twin(x, w1_bar, w2_bar),
            alpha=0.5,
        ),
        reward_scale=1.0,
        actor_weight=0.2,
    )
    # ã_0 = 0.1·(0.5 + 0) + 0.2 = 0.25,            log π_0 = −0.02 − log √(2π) = −0.938939
    # x̃_1 = [1, 0.25, …] (a_0 replaced)
    # ã_1 = 0.1·(1 + 0.25) − 0.4 = −0.275,         log π_1 = −0.08 − log √(2π) = −0.998939
    # x̃_2 = [2, −0.275, 2, 1, 0.25, 1, 2] (a_1 in slot 0 and a_0 in slot 1 replaced)
    # V̄_1(x̃_2) = 2, V̄_2(x̃_2) = 1 − 0.275 + 0.25 = 0.975: min 0.975
    # y = (r_0 − α log π_0) + D_1 (r_1 − α log π_1) + D_2 · 0.975,  D_1 = 0.9, D_2 = 0.72
    lp0, lp1 = -0.02 - LOG_SQRT_2PI, -0.08 - LOG_SQRT_2PI
    y = (1 - 0.5 * lp0) + 0.9 * (3 - 0.5 * lp1) + 0.72 * 0.975
    assert y == pytest.approx(5.3209916, abs=1e-6)
    assert out.target.item() == pytest.approx(y, abs=1e-5) and out.used.tolist() == [True]
    # V_1(x_0) = V_2(x_0) = 0.5: L_V = 2·(0.5 − y)²
    assert out.critic.item() == pytest.approx(2 * (0.5 - y) ** 2, abs=1e-4)
    assert out.critic.item() == pytest.approx(46.48392, abs=1e-4)
    # V_1(x̃_2) = 2 − 0.275 + 0.25 = 1.975, V_2(x̃_2) = 2 − 0.55 − 0.25 = 1.2: min 1.2
    # L_π = −(−α log π_0 − D_1 α log π_1 + D_2 · 1.2)
    actor = -(-0.5 * lp0 - 0.9 * 0.5 * lp1 + 0.72 * 1.2)
    assert actor == pytest.approx(-1.7829916, abs=1e-6)
    assert out.actor.item() == pytest.approx(actor, abs=1e-5)
    assert out.total.item() == pytest.approx(0.2 * actor + 0.8 * 2 * (0.5 - y) ** 2, abs=1e-4)

    g_theta, g_phi, g_w1, g_w2 = torch.autograd.grad(out.total, [pi.theta, pi.phi, w1, w2])
    # through the resampled buffer: ∂ã_0/∂θ = 0.5; ∂ã_1/∂θ = (1 + 0.25) + θ·∂ã_0/∂θ = 1.3 (ã_0 sits in x̃_1);
    # ∂V_2(x̃_2)/∂θ = 2·1.3 − 1·0.5 = 2.1 (log π does not depend on θ): ∂L/∂θ = 0.2·(−0.72·2.1) = −0.3024
    assert g_theta.item() == pytest.approx(-0.3024, abs=1e-6)
    # ∂ã_0/∂φ = ξ_0 = 0.2; ∂ã_1/∂φ = θ·0.2 + ξ_1 = −0.38; ∂ log π_j/∂φ = −1:
    # ∂L_π/∂φ = −(α + D_1 α + D_2 (2·(−0.38) − 0.2)) = −(0.5 + 0.45 − 0.6912) = −0.2588: ∂L/∂φ = −0.05176
    assert g_phi.item() == pytest.approx(-0.05176, abs=1e-6)
    # ∂L/∂w_i = 0.8·2·(V_i(x_0) − y)·x_0: only the world number; the actor's term reaches no value weight
    assert g_w1.tolist() == pytest.approx([1.6 * (0.5 - y) * 0.5, 0, 0, 0, 0, 0, 0], abs=1e-5)
    assert g_w2.tolist() == pytest.approx([-3.8567933, 0, 0, 0, 0, 0, 0], abs=1e-5)


def test_dcac_leaves_out_a_run_whose_own_action_had_landed() -> None:
    actions = torch.tensor([[[A0], [A1]]])
    links = torch.ones(1, 2, dtype=torch.bool)
    landed = two_ticks(a0_due_in_x1=0.0)  # a_0 was applied by x_1's observation: r_0 felt it
    assert dcac_horizon(landed, actions, links, LAYOUT, n_max=2, first=0).tolist() == [0]
    obs = torch.cat([two_ticks(), landed])
    n = dcac_horizon(obs, actions.expand(2, 2, 1), links.expand(2, 2), LAYOUT, n_max=2, first=0)
    assert n.tolist() == [2, 0]
    w = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], requires_grad=True)

    def fixed(x: torch.Tensor) -> torch.Tensor:
        return twin(x, w.detach(), w.detach())

    def nets() -> ActorCritic:  # a fresh actor each call: the same noise for both
        return ActorCritic(LinearGaussian([0.2, -0.4, 0.0]), lambda x: twin(x, w, w), fixed, fixed, 0.5)

    reward, discount = torch.tensor([[1.0, 3.0], [1.0, 3.0]]), torch.tensor([[0.9, 0.8], [0.9, 0.8]])
    both = dcac_losses(obs, reward, discount, n, layout=LAYOUT, nets=nets())
    alone = dcac_losses(obs[:1], reward[:1], discount[:1], n[:1], layout=LAYOUT, nets=nets())
    # the landed run gives no target: the means run over the first run alone
    assert both.used.tolist() == [True, False] and both.target[1].item() == 0.0
    assert both.critic.item() == pytest.approx(alone.critic.item()) and both.actor.item() == pytest.approx(
        alone.actor.item()
    )


def test_dcac_writes_the_gradient_of_its_one_loss() -> None:
    import gymnasium as gym

    from nonstop.learning.dcac import DCACConfig, SubTrajectories

    algo = DCACConfig(hidden=(8,), buffer_slots=2, actor_weight=0.3).algorithm((7,), gym.spaces.Box(-1.0, 1.0, (1,)))
    online, target = algo.build_model(), algo.build_model()
    runs = SubTrajectories(
        two_ticks().numpy().repeat(3, axis=0),
        np.array([[[A0], [A1]]] * 3, np.float32),
        np.array([[1.0, 3.0]] * 3, np.float32),
        np.array([[0.9, 0.8]] * 3, np.float32),
        np.ones((3, 2), bool),
    )
    noise = [torch.full((3, 1), xi) for xi in (0.2, -0.4, 0.0)]
    out = algo.losses(online, target, runs, noise=lambda j: noise[j])
    assert algo.last_horizon == 2.0
    params = list(online.parameters())
    expected = torch.autograd.grad(out.total, params, allow_unused=True, retain_graph=True)
    # the actor's gradient reaches it through V(x̃_2) and the entropy terms
    actor = dict(online.named_parameters())["actor.net.0.weight"]
    assert torch.autograd.grad(out.actor, actor, retain_graph=True)[0].abs().sum() > 0
    torch.manual_seed(0)
    algo.backward(online, target, runs)  # drawn noise: the same parameters get a gradient, and only those
    for p, want in zip(params, expected):
        got = 0.0 if p.grad is None else float(p.grad.abs().sum())
        assert (got > 0) == (want is not None and float(want.abs().sum()) > 0)
