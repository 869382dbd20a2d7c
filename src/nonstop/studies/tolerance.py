"""How large a delay can this world tolerate? Its effective stochasticity over the inference horizon.

Equation 4 of the paper (Theorem 1, Appendix B.2) says what delay costs: an action computed from
the state at ``t`` and applied ``k`` steps later is right only if the world is still where the
agent thought, which in its worst-case MDP happens with probability ``p_minimax**k``. So the regret
per step that no policy acting ``k`` steps late can avoid is ``1 − p_minimax**k``: zero in a
deterministic world whatever the delay, and near one in a world that forgets its state quickly.

This module measures that quantity on any world whose randomness goes through the env's
``np_random`` (Gymnasium's convention: the theory MDPs, FrozenLake's slippery ice, …). From many
start states it runs a flock of copies of the env (``copy.deepcopy``), each with its own random
stream and all given the same actions, and counts at each horizon ``k`` how many copies share the
most common state. That fraction estimates ``q_k = max_s P(s_{t+k} = s | s_t, actions)``, the chance
that the best prediction made ``k`` steps ahead is right: the real-world counterpart of
``p_minimax**k`` (the two coincide on the paper's cycle MDP while staying put is the likeliest
future). ``1 − q_k`` is then the delay regret per step, in units of the reward a right action earns,
and the tolerable delay for a budget ε is the largest ``k`` with ``1 − q_k ≤ ε``.

States are compared exactly (observation bytes; ``decimals`` rounds float observations first,
for worlds with continuous noise). Emulated worlds (Atari at the paper's setting, Game Boy) are
deterministic given the emulator's whole state, so copies never part: the unpredictability an
agent meets there lives in state it cannot observe, which this estimate cannot see. They are
refused with that reason rather than reported as perfectly predictable.

>>> est = estimate_predictability("theory/delay-cycle", env_kwargs={"n": 64, "p_minimax": 0.8},
...                               horizon=3, starts=20, flock=64, seed=0)
>>> [round(float(q), 1) for q in est.q]                      # ≈ 0.8, 0.64, 0.51 = p_minimax**k
[0.8, 0.6, 0.5]
>>> tolerable_delay(est, max_regret=0.3)                    # 1 − q_k ≤ 0.3 holds for k = 1 only
1
"""

from __future__ import annotations

import copy
import math
import numbers
from collections import Counter
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Predictability", "estimate_predictability", "tolerable_delay", "cycle_mode_probability"]

#: env families whose emulators are deterministic given their whole (partly hidden) state
_EMULATED = ("atari", "gameboy")


class Predictability(NamedTuple):
    """``q[k-1]`` estimates q_k for k = 1..horizon; ``stderr`` its standard error over start states;
    ``delay_regret[k-1] = 1 − q_k``; ``p_hat`` the per-step rate ``q_k**(1/k)`` (the paper's
    p_minimax where q_k = p_minimax**k); ``tick_hz`` the world's rate, to read k in seconds."""

    env_id: str
    q: np.ndarray
    stderr: np.ndarray
    delay_regret: np.ndarray
    p_hat: np.ndarray
    starts: int
    flock: int
    tick_hz: float | None


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _key(obs: Any, decimals: int | None) -> bytes:
    arr = np.asarray(obs)
    if decimals is not None and arr.dtype.kind == "f":
        arr = np.round(arr, decimals) + 0.0  # + 0.0: -0.0 and 0.0 are one state
    return arr.tobytes()


def estimate_predictability(
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    horizon: int = 32,
    starts: int = 50,
    flock: int = 32,
    warmup_steps: int = 20,
    decimals: int | None = None,
    seed: int = 0,
) -> Predictability:
    """Estimate q_k for k = 1..``horizon`` from ``starts`` start states (each reached by up to
    ``warmup_steps`` random actions after a seeded reset), ``flock`` copies per start (module
    docstring). A copy whose episode ends before ``k`` counts as its own final state, so two
    copies that ended alike still agree."""
    from nonstop.envs import make_env

    horizon, starts, flock = (
        _positive_int(n, v) for n, v in (("horizon", horizon), ("starts", starts), ("flock", flock))
    )
    if flock < 2:
        raise ValueError(f"flock must be at least 2 copies to compare, got {flock}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, numbers.Integral) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0, got {warmup_steps!r}")
    if decimals is not None and (isinstance(decimals, bool) or not isinstance(decimals, numbers.Integral)):
        raise ValueError(f"decimals must be an integer or None, got {decimals!r}")
    kwargs = dict(env_kwargs or {})
    tick_hz = _one_agent_world_hz(env_id, kwargs)
    rng = np.random.default_rng(seed)
    q = np.zeros((starts, horizon))
    env = make_env(env_id, **kwargs)
    try:
        actions_space = copy.deepcopy(env.action_space)
        actions_space.seed(int(rng.integers(2**31)))
        for start in range(starts):
            _reach_start(env, actions_space, rng, warmup_steps)
            copies = _flock_of(env, env_id, flock, rng)
            q[start] = _agreement(copies, actions_space, horizon, decimals)
            for c in copies:
                c.close()
    finally:
        env.close()
    mean = q.mean(axis=0)
    stderr = q.std(axis=0, ddof=1) / math.sqrt(starts) if starts > 1 else np.full(horizon, np.nan)
    ks = np.arange(1, horizon + 1)
    return Predictability(
        env_id=env_id,
        q=mean,
        stderr=stderr,
        delay_regret=1.0 - mean,
        p_hat=np.where(mean > 0, mean ** (1.0 / ks), 0.0),
        starts=starts,
        flock=flock,
        tick_hz=tick_hz,
    )


def _one_agent_world_hz(env_id: str, kwargs: dict[str, Any]) -> float:
    """The tick rate of ``env_id``; ValueError for a seat world or an emulator, which this estimate cannot read."""
    from nonstop.envs import env_info

    info = env_info(env_id, **kwargs)  # unknown ids fail here, with the registry's suggestions
    if info.family == "multi":
        raise ValueError(f"{env_id!r} is a seat world (several agents); this estimate takes one-agent worlds")
    if info.family in _EMULATED:
        raise ValueError(
            f"{env_id!r} is an emulator, deterministic given its whole state (the paper's setting has no sticky "
            "actions): copies of it never part, so this estimate would say 1 whatever the world hides. Its "
            "stochasticity for an agent lives in state the agent cannot see; measure delay's cost there by "
            "training at the delay (nonstop train --latency)"
        )
    return info.tick_hz


def _reach_start(env: Any, actions_space: Any, rng: np.random.Generator, warmup_steps: int) -> None:
    """A seeded reset and up to ``warmup_steps`` random actions (reset again if the episode ended)."""
    env.reset(seed=int(rng.integers(2**31)))
    for _ in range(int(rng.integers(warmup_steps + 1))):
        _, _, terminated, truncated, _ = env.step(actions_space.sample())
        if terminated or truncated:
            env.reset(seed=int(rng.integers(2**31)))
            return


def _flock_of(env: Any, env_id: str, flock: int, rng: np.random.Generator) -> list[Any]:
    """``flock`` copies of ``env`` as it stands, each with its own random stream."""
    try:
        copies = [copy.deepcopy(env) for _ in range(flock)]
    except Exception as exc:  # any failure to copy means the same thing here
        raise ValueError(
            f"cannot copy {env_id!r} ({type(exc).__name__}: {exc}): this estimate needs "
            "envs that copy.deepcopy can duplicate"
        ) from None
    for c in copies:
        c.unwrapped.np_random = np.random.default_rng(int(rng.integers(2**63)))
    return copies


def _agreement(copies: list[Any], actions_space: Any, horizon: int, decimals: int | None) -> np.ndarray:
    """q_k for k = 1..``horizon``: the largest share of ``copies`` in one state after the same k actions."""
    flock = len(copies)
    finals: list[bytes | None] = [None] * flock
    q = np.zeros(horizon)
    for k in range(horizon):
        action = actions_space.sample()
        keys = []
        for i, c in enumerate(copies):
            key = finals[i]  # an ended copy stays at its final state
            if key is None:
                obs_i, _, terminated, truncated, _ = c.step(action)
                key = _key(obs_i, decimals)
                if terminated or truncated:
                    key = finals[i] = b"end:" + key
            keys.append(key)
        q[k] = Counter(keys).most_common(1)[0][1] / flock
    return q


def tolerable_delay(est: Predictability, max_regret: float) -> int:
    """The largest delay k (in steps, 0..horizon) whose delay regret ``1 − q_j`` stays within
    ``max_regret`` for every j ≤ k: how late an action may be before the world has moved on more
    often than the budget allows. ``horizon`` itself means "at least that"."""
    if isinstance(max_regret, bool) or not isinstance(max_regret, numbers.Real) or not 0.0 <= max_regret <= 1.0:
        raise ValueError(f"max_regret must be a fraction in [0, 1], got {max_regret!r}")
    over = np.nonzero(est.delay_regret > max_regret + 1e-12)[0]
    return int(over[0]) if over.size else len(est.q)


def cycle_mode_probability(n: int, p_stay: float, k: int) -> float:
    """Exactly ``max_s P(s_{t+k} = s)`` on the paper's n-state cycle (stay w.p. ``p_stay``, else
    move one state on): the mode of a binomial number of moves, wrapped mod n. What
    `estimate_predictability` should find on ``theory/delay-cycle``.

    >>> cycle_mode_probability(8, 0.5, 1), round(cycle_mode_probability(1000, 0.7, 3), 3)
    (0.5, 0.441)
    """
    moves = np.arange(k + 1)
    pmf = np.array([math.comb(k, int(m)) * (1 - p_stay) ** m * p_stay ** (k - m) for m in moves])
    wrapped = np.bincount(moves % n, weights=pmf, minlength=n)
    return float(wrapped.max())
