"""Which agent is acting, added to its observation: what a θ shared by a team's seats needs to tell the
seats apart (``nonstop train --agent-id``; docs/multi-agent.md).

`AgentId` is the one place the identity is added, for acting and for learning alike:

* ``none``: the observation unchanged (where agents are interchangeable, as in MAgent2's battle);
* ``index``: one more feature, ``k / (n - 1)`` for agent ``k`` of ``n`` (0 for a team of one);
* ``onehot``: ``n`` more features, 1 at ``k``.

An image-like ``(H, W, C)`` observation gets them as constant channels (``(H, W, C + m)``), a flat
``(d,)`` one as features (``(d + m,)``); other shapes are refused. A replay stores the agent's index
beside its transitions and adds the identity as it samples, so frames are never copied with planes.
`IdentifiedPolicy` is a `Policy` acting for one agent through a policy of the widened observation.

>>> ids = AgentId("onehot", 3)
>>> ids.obs_shape((4,)), ids.obs_shape((5, 5, 2))
((7,), (5, 5, 5))
>>> ids(np.zeros((2, 4), np.float32), np.array([0, 2])).tolist()
[[0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]]
>>> AgentId("index", 3).one(np.ones(2, np.float32), 1).tolist()
[1.0, 1.0, 0.5]
>>> AgentId("none", 3).one(np.ones(2, np.float32), 1).tolist()
[1.0, 1.0]
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from nonstop.policies.base import Decision, Policy

__all__ = ["AGENT_ID_MODES", "AgentId", "IdentifiedPolicy"]

#: what ``--agent-id`` takes
AGENT_ID_MODES: Final = ("none", "index", "onehot")


class AgentId:
    """Adds agent ``k`` of ``n_agents``'s identity to observations in ``mode`` (see the module docstring).
    Plain data: picklable, and ``to_dict``/``from_dict`` for what a run saves."""

    def __init__(self, mode: str, n_agents: int) -> None:
        if mode not in AGENT_ID_MODES:
            raise ValueError(f"agent id must be one of {', '.join(AGENT_ID_MODES)}, got {mode!r}")
        if isinstance(n_agents, bool) or not isinstance(n_agents, (int, np.integer)) or n_agents < 1:
            raise ValueError(f"n_agents must be an integer >= 1, got {n_agents!r}")
        self.mode: Final = mode
        self.n_agents: Final = int(n_agents)
        #: how many features (or channels) it adds
        self.width: Final = {"none": 0, "index": 1, "onehot": self.n_agents}[mode]

    def __repr__(self) -> str:
        return f"AgentId({self.mode!r}, {self.n_agents})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentId) and (other.mode, other.n_agents) == (self.mode, self.n_agents)

    def __hash__(self) -> int:
        return hash((self.mode, self.n_agents))

    @property
    def active(self) -> bool:
        return self.width > 0

    def obs_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape the shared network sees for an observation of ``shape``."""
        shape = tuple(int(s) for s in shape)
        if not self.active:
            return shape
        if len(shape) not in (1, 3):
            raise ValueError(
                f"--agent-id {self.mode} adds channels to (H, W, C) observations or features to (d,) ones; "
                f"this world's are {shape}"
            )
        return (*shape[:-1], shape[-1] + self.width)

    def features(self, agents: np.ndarray) -> np.ndarray:
        """``(len(agents), width)`` float32: each agent's identity."""
        agents = np.asarray(agents, np.int64)
        if agents.size and (agents.min() < 0 or agents.max() >= self.n_agents):
            raise ValueError(f"agent indices must lie in [0, {self.n_agents}), got {agents.tolist()}")
        if self.mode == "onehot":
            return np.eye(self.n_agents, dtype=np.float32)[agents]
        return (agents / max(1, self.n_agents - 1)).astype(np.float32)[:, None]

    def __call__(self, obs: np.ndarray, agents: np.ndarray) -> np.ndarray:
        """A batch ``(B, *shape)`` of agents ``agents`` (B indices) as the shared network sees it: the identity
        as the last axis's extra entries, in the observation's dtype (uint8 frames get it as 0 or 255, as
        their pixels are scaled); unchanged for ``none``."""
        if not self.active:
            return obs
        obs = np.asarray(obs)
        ident = self.features(agents)
        if len(agents) != len(obs):
            raise ValueError(f"{len(obs)} observations but {len(agents)} agent indices")
        if obs.ndim == 4:  # (B, H, W, C): constant planes
            ident = np.broadcast_to(ident[:, None, None, :], (*obs.shape[:3], self.width))
        elif obs.ndim != 2:
            raise ValueError(f"observations of shape {obs.shape[1:]}: only (H, W, C) and (d,) take an agent id")
        if obs.dtype == np.uint8:
            ident = np.rint(ident * 255.0)
        return np.concatenate([obs, ident.astype(obs.dtype)], axis=-1)

    def one(self, obs: np.ndarray, agent: int) -> np.ndarray:
        """One agent's observation as the shared network sees it."""
        if not self.active:
            return obs
        return self(np.asarray(obs)[None], np.array([agent]))[0]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "n_agents": self.n_agents}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AgentId":
        return cls(str(d["mode"]), int(d["n_agents"]))


class IdentifiedPolicy(Policy):
    """Acts for agent ``agent`` through ``policy``, a policy of observations widened by ``ids``.

    >>> from nonstop.policies.base import ConstantPolicy
    >>> import gymnasium
    >>> inner = ConstantPolicy(gymnasium.spaces.Discrete(2), 1)
    >>> IdentifiedPolicy(inner, AgentId("onehot", 2), 1).act(np.zeros(3, np.float32))
    Decision(action=1, latency=0.0)
    """

    def __init__(self, policy: Any, ids: AgentId, agent: int) -> None:
        if not 0 <= int(agent) < ids.n_agents:
            raise ValueError(f"agent must lie in [0, {ids.n_agents}), got {agent!r}")
        self.policy, self.ids, self.agent = policy, ids, int(agent)

    def act(self, obs: np.ndarray) -> Decision:
        decision: Decision = self.policy.act(self.ids.one(obs, self.agent))
        return decision

    def seed(self, seed: int | None) -> None:
        self.policy.seed(seed)

    def __getattr__(self, name: str) -> Any:  # the wrapped policy's other parts (close, weights, …)
        if name in ("policy", "ids", "agent"):
            raise AttributeError(name)
        return getattr(self.policy, name)

    def __repr__(self) -> str:
        return f"IdentifiedPolicy({self.policy!r}, {self.ids!r}, agent={self.agent})"
