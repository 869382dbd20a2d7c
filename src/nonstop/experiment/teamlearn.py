"""The learning team's DQN in team self-play (`nonstop.experiment.teamplay`): its Q-network, its one
replay for every agent's transitions, n-step returns per agent, and the update.

* **Q-network** (`build_qnet`): ``gridconv`` (`nonstop.policies.gridconv.GridConv`: two 3×3
  convolutions over the agent's whole (H, W, C) view, a hidden layer), ``conv`` (a 3×3 and a
  strided 3×3 convolution) or ``mlp`` (one hidden layer over the flattened view).
* **n-step returns per agent** (`NStepReturns`): each agent's one-tick transitions of its induced
  delayed semi-MDP ``(o_k, a_k, r_{k+d}, o_{k+1})`` are folded into
  ``(o_k, a_k, r_{k+d} + γ r_{k+1+d} + … + γ^{n-1} r_{k+n-1+d}, o_{k+n}, γ^n)``; an agent that dies
  ends its windows with discount 0, and an agent whose episode ends otherwise (time limit, a new
  episode) bootstraps its shorter windows from the last observation it had (discount γ^m for m
  steps). n = 1 is the one-tick transition unchanged.
* **Replay** (`TeamReplay`): one ring of ``(obs, action, return, next_obs, discount)`` for the whole
  team, observations as float16 (MAgent2's windows hold 0/1, hit-point fractions and densities), and
  each transition's agent (its seat's place in the team): under ``--agent-id`` the Q-network sees the
  agent's identity (`nonstop.policies.agentid.AgentId`), added to the frames as they are sampled.
* **Update** (`TeamLearner.update`): DQN's own (`nonstop.learning.dqn.DQN.backward`: Huber loss on
  ``return + discount · max_a Q̄(next_obs, a)``, double DQN: Q̄ of the online net's argmax, the gradient
  clipped), then Adam and a target network synced every ``target_update`` updates.

>>> out = []
>>> nstep = NStepReturns(2, 0.5, lambda o, a, ret, o2, disc: out.append((int(o[0]), a, ret, int(o2[0]), disc)))
>>> for k, r in enumerate([1.0, 2.0, 4.0]):
...     nstep.add(0, np.array([k]), k, r, np.array([k + 1]), False)
>>> nstep.end(0)
>>> out   # (o, a, return, o', discount): 1 + 0.5·2, 2 + 0.5·4, then 4 alone at the end
[(0, 0, 2.0, 2, 0.25), (1, 1, 4.0, 3, 0.25), (2, 2, 4.0, 3, 0.5)]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from nonstop.learning.algos import algorithm_of
from nonstop.learning.dqn import DQNConfig
from nonstop.learning.replay import ReplayTooLargeError

__all__ = [
    "ARCHS",
    "build_qnet",
    "TeamReplay",
    "team_replay_bytes",
    "check_team_replay_fits",
    "NStepReturns",
    "TeamLearner",
]

#: the Q-networks `build_qnet` offers
ARCHS = ("mlp", "conv", "gridconv")

Sink = Callable[[np.ndarray, int, float, np.ndarray, float], None]


def build_qnet(obs_shape: tuple[int, ...], n_actions: int, hidden: int, arch: str = "mlp") -> Any:
    """A small Q-network (see the module docstring); a conv ``arch`` over a flat observation is an MLP."""
    import torch
    from torch import nn

    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    if arch == "gridconv" and len(obs_shape) == 3:
        from nonstop.policies.gridconv import GridConv

        return GridConv(obs_shape, n_actions, hidden=hidden)
    if arch == "conv" and len(obs_shape) == 3:
        h, w, c = obs_shape

        class Conv(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(c, 16, 3),
                    nn.ReLU(),
                    nn.Conv2d(16, 16, 3, stride=2),
                    nn.ReLU(),
                    nn.Flatten(),
                )
                with torch.no_grad():
                    n = self.body(torch.zeros(1, c, h, w)).shape[1]
                self.head = nn.Sequential(nn.Linear(n, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))

            def forward(self, x: Any) -> Any:
                return self.head(self.body(x.permute(0, 3, 1, 2)))

        return Conv()
    n = int(np.prod(obs_shape))
    return nn.Sequential(nn.Flatten(), nn.Linear(n, hidden), nn.ReLU(), nn.Linear(hidden, n_actions))


def team_replay_bytes(capacity: int, obs_shape: tuple[int, ...]) -> int:
    """The bytes a `TeamReplay` of ``capacity`` transitions holds: two float16 windows a transition (``obs``
    and ``next_obs``), its action (int64), return and discount (float32) and agent (int16).

    >>> team_replay_bytes(50_000, (13, 13, 5))  # the default capacity over MAgent2's battle windows
    169900000
    """
    if capacity < 1:
        raise ValueError(f"the team replay's capacity must be >= 1, got {capacity}")
    window = int(np.prod(obs_shape, dtype=np.int64)) * np.dtype(np.float16).itemsize
    return int(capacity) * (2 * window + 8 + 4 + 4 + 2)


def check_team_replay_fits(capacity: int, obs_shape: tuple[int, ...], available: int | None = None) -> int:
    """`team_replay_bytes`, or `nonstop.learning.replay.ReplayTooLargeError` naming the capacity that would
    fit when it exceeds 90 % of ``available`` bytes (by default this machine's MemAvailable: the team's replay
    is this process's memory, not shared memory).

    >>> check_team_replay_fits(1_000_000, (13, 13, 5), available=2**30)
    Traceback (most recent call last):
    ...
    nonstop.learning.replay.ReplayTooLargeError: team self-play's replay of 1,000,000 transitions of (13, 13, 5) \
float16 windows needs 3.16 GiB, but MemAvailable is 1.00 GiB: lower --replay-capacity to about 252,793
    """
    need = team_replay_bytes(capacity, obs_shape)
    have = _mem_available() if available is None else int(available)
    if need > have * 0.9:
        raise ReplayTooLargeError(
            f"team self-play's replay of {capacity:,} transitions of {tuple(obs_shape)} float16 windows needs "
            f"{need / 2**30:.2f} GiB, but MemAvailable is {have / 2**30:.2f} GiB: lower --replay-capacity to about "
            f"{int(capacity * have * 0.8 / need):,}"
        )
    return need


def _mem_available() -> int:
    """This machine's MemAvailable in bytes (no limit known: a very large number)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62


class TeamReplay:
    """Every agent's transitions of one team in one ring: ``(obs, action, return, next_obs, discount)``,
    the discount 0 where the agent died (observations as float16), and the agent's index; with
    ``agent_id``, `sample` adds each agent's identity to its observations."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], agent_id: Any = None) -> None:
        #: what the ring holds, in bytes; a ring that would not fit in this machine's memory is refused here
        self.nbytes = check_team_replay_fits(capacity, obs_shape)
        self.capacity = int(capacity)
        self.agent_id = agent_id if agent_id is not None and agent_id.active else None
        self.agent = np.zeros(capacity, np.int16)
        self.obs = np.zeros((capacity, *obs_shape), np.float16)
        self.next_obs = np.zeros((capacity, *obs_shape), np.float16)
        self.action = np.zeros(capacity, np.int64)
        self.reward = np.zeros(capacity, np.float32)
        self.discount = np.zeros(capacity, np.float32)
        self.size = 0
        self.written = 0

    def add(
        self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, discount: float, agent: int = 0
    ) -> None:
        i = self.written % self.capacity
        self.agent[i] = agent
        self.obs[i] = obs
        self.next_obs[i] = next_obs
        self.action[i], self.reward[i], self.discount[i] = action, reward, discount
        self.written += 1
        self.size = min(self.size + 1, self.capacity)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        idx = rng.integers(0, self.size, n)
        obs, next_obs = self.obs[idx], self.next_obs[idx]
        if self.agent_id is not None:
            obs, next_obs = self.agent_id(obs, self.agent[idx]), self.agent_id(next_obs, self.agent[idx])
        return obs, self.action[idx], self.reward[idx], next_obs, self.discount[idx]


class NStepReturns:
    """Folds each agent's one-tick transitions into n-step ones for ``sink(obs, action, return,
    next_obs, discount)`` (see the module docstring). ``add`` takes an agent's transitions in order;
    ``end(agent)`` closes its windows where its episode ended without its death."""

    def __init__(self, n: int, gamma: float, sink: Sink) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n_step must be a positive integer, got {n!r}")
        self.n, self.gamma, self.sink = n, float(gamma), sink
        self.windows: dict[int, deque[tuple[np.ndarray, int, float]]] = {}
        self.last_next: dict[int, np.ndarray] = {}

    def add(self, agent: int, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool) -> None:
        window = self.windows.setdefault(agent, deque())
        window.append((obs, action, reward))
        if done:
            self._flush(window, next_obs, 0.0)
            self.last_next.pop(agent, None)
            return
        self.last_next[agent] = next_obs
        if len(window) == self.n:
            self._emit(window, next_obs, self.gamma**self.n)

    def end(self, agent: int, died: bool = False) -> None:
        window = self.windows.get(agent)
        if window:
            self._flush(window, self.last_next.pop(agent), 0.0 if died else None)

    def _flush(
        self, window: deque[tuple[np.ndarray, int, float]], next_obs: np.ndarray, discount: float | None
    ) -> None:
        while window:  # None: bootstrap each window over its own length
            self._emit(window, next_obs, self.gamma ** len(window) if discount is None else discount)

    def _emit(self, window: deque[tuple[np.ndarray, int, float]], next_obs: np.ndarray, discount: float) -> None:
        ret = sum(self.gamma**i * r for i, (_, _, r) in enumerate(window))
        obs, action, _ = window.popleft()
        self.sink(obs, action, float(ret), next_obs, float(discount))


class TeamLearner:
    """The learning team's DQN: θ, its target, Adam, the replay, ε (see the module docstring).
    ``cfg`` is a `nonstop.experiment.teamplay.TeamPlayConfig`; ``agent_id`` (an `AgentId`, or None): the
    identity the Q-network sees beside each agent's observation (``obs_shape`` is the world's). An agent's
    transitions come in through `add` and `end`."""

    def __init__(self, cfg: Any, obs_shape: tuple[int, ...], n_actions: int, agent_id: Any = None) -> None:
        import torch

        torch.manual_seed(cfg.seed)
        self.cfg, self.n_actions = cfg, n_actions
        self.agent_id = agent_id
        #: what the Q-network takes: the observation, widened by the agent's id where one is added
        self.net_shape = tuple(obs_shape) if agent_id is None else agent_id.obs_shape(obs_shape)
        self.q = build_qnet(self.net_shape, n_actions, cfg.hidden, cfg.arch)
        self.target = build_qnet(self.net_shape, n_actions, cfg.hidden, cfg.arch)
        self.target.load_state_dict(self.q.state_dict())
        self.opt = torch.optim.Adam(self.q.parameters(), lr=cfg.lr, foreach=True)
        #: DQN's update (its Huber loss on the n-step target, double or not, and its clip) on the team's networks
        self.dqn = algorithm_of(DQNConfig(double=bool(cfg.double)), self.net_shape, n_actions)
        self.replay = TeamReplay(cfg.replay_capacity, obs_shape, agent_id)
        self._agent = 0  # whose window NStepReturns is folding (it emits only inside add and end)
        self.nstep = NStepReturns(cfg.n_step, cfg.gamma, self._store)
        self.rng = np.random.default_rng(cfg.seed)
        self.updates = 0
        self.ticks = 0
        self.losses: deque[float] = deque(maxlen=200)

    def _store(self, obs: np.ndarray, action: int, ret: float, next_obs: np.ndarray, discount: float) -> None:
        self.replay.add(obs, action, ret, next_obs, discount, self._agent)

    def add(self, agent: int, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, died: bool) -> None:
        """Agent ``agent``'s next one-tick transition (its n-step returns into the replay)."""
        self._agent = agent
        self.nstep.add(agent, obs, action, reward, next_obs, died)

    def end(self, agent: int, died: bool = False) -> None:
        """Agent ``agent``'s episode ended (`NStepReturns.end`)."""
        self._agent = agent
        self.nstep.end(agent, died)

    def epsilon(self) -> float:
        c = self.cfg
        f = min(1.0, self.ticks / max(1, c.epsilon_ticks))
        return float(c.epsilon_start + f * (c.epsilon_end - c.epsilon_start))

    def greedy(self, net: Any, obs: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            out: np.ndarray = net(torch.as_tensor(obs, dtype=torch.float32)).argmax(1).numpy()
        return out

    def act(self, obs: np.ndarray, eps: float) -> np.ndarray:
        actions = self.greedy(self.q, obs)
        explore = self.rng.random(len(actions)) < eps
        actions[explore] = self.rng.integers(0, self.n_actions, int(explore.sum()))
        return actions

    def update(self) -> None:
        """One DQN update on a batch of the team's replay: DQN's own loss and clip (`DQN.backward`), then
        this learner's Adam step and, every ``target_update`` updates, the target copy."""
        from nonstop.learning.replay import Batch

        c = self.cfg
        if self.replay.size < max(c.learning_starts, c.batch_size):
            return
        obs, action, ret, next_obs, discount = self.replay.sample(c.batch_size, self.rng)
        batch = Batch(obs, action, ret, discount, next_obs, np.ones(len(action), np.int64))
        loss = self.dqn.backward(self.q, self.target, batch)
        self.opt.step()
        self.updates += 1
        self.losses.append(float(loss.detach()))
        if self.updates % c.target_update == 0:
            self.target.load_state_dict(self.q.state_dict())

    def flat(self) -> np.ndarray:
        from torch.nn.utils import parameters_to_vector

        out: np.ndarray = parameters_to_vector(self.q.parameters()).detach().numpy().copy()
        return out
