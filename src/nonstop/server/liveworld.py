"""What the live page shows of a several-seat world at once: every seat's counters, each team's
summary, and the world's frame with its agents marked (docs/multi-agent.md, "The live page").

A seat's **team** is its name up to the last ``_`` (PettingZoo's convention: ``red_3`` plays for
``red``, ``first_0`` for ``first``; `nonstop.envs.seats.team_of`); a name without one is a team of its own.

The **frame** is what the world offers, asked in this order: ``live_frame()`` (a uint8 image,
(H, W) or (H, W, 3)); PettingZoo's ``state()`` when it is an array of 2 or 3 dimensions (values
in [0, 1] or uint8; a (H, W, C) state of other than 1, 3 or 4 channels is drawn one colour per
channel). The **positions** are the world's ``seat_positions()`` (``{seat: (row, col)}`` in that
frame's pixels), or, for a MAgent2 world, read from its grid (``get_pos``, agent ids as PettingZoo
numbers them). A world that offers neither has a view without frame or marks: its seats still show.

>>> rows = [{"seat": "red_0", "agent_ticks": 9, "inaction_ticks": 1, "last_delay": 2, "total_reward": 1.0},
...         {"seat": "red_1", "agent_ticks": 5, "inaction_ticks": 5, "last_delay": 4, "total_reward": -1.0}]
>>> team_rows(rows, alive={"red_0": True, "red_1": False})
[{'team': 'red', 'seats': 2, 'alive': 1, 'inaction_fraction': 0.3, 'delay_mean_ticks': 3.0, 'total_reward': 0.0}]
"""

from __future__ import annotations

import base64
from typing import Any, Final

import numpy as np

from nonstop.envs.seats import team_of

__all__ = ["team_rows", "world_frame", "seat_positions", "world_view", "encode_frame"]

#: the largest frame side sent to the page (bigger frames are subsampled: the page wants a map, not pixels)
MAX_FRAME_SIDE: Final = 256
#: one colour per channel of a many-channel state (RGB, 0..1)
_PALETTE: Final = np.array(
    [
        (0.55, 0.58, 0.62),  # grey: walls, obstacles (MAgent2's channel 0)
        (0.85, 0.25, 0.25),
        (0.95, 0.55, 0.55),
        (0.25, 0.45, 0.90),
        (0.55, 0.70, 0.98),
        (0.20, 0.70, 0.35),
        (0.85, 0.60, 0.15),
        (0.60, 0.35, 0.80),
    ]
)


def team_rows(rows: list[dict[str, Any]], alive: dict[str, bool] | None = None) -> list[dict[str, Any]]:
    """Each team's summary over its seats' ``rows`` (`ServerSession.seat_rows`): seats, how many are
    alive (when ``alive`` says; else None), the inaction fraction over all its seats' ticks, the mean
    of its seats' last delays, and its return (the sum of its seats')."""
    teams: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        teams.setdefault(team_of(row["seat"]), []).append(row)
    out = []
    for team, members in teams.items():
        agent = sum(int(r.get("agent_ticks") or 0) for r in members)
        inaction = sum(int(r.get("inaction_ticks") or 0) for r in members)
        delays = [r["last_delay"] for r in members if r.get("last_delay") is not None and r["last_delay"] >= 0]
        rewards = [r["total_reward"] for r in members if r.get("total_reward") is not None]
        out.append(
            {
                "team": team,
                "seats": len(members),
                "alive": None if alive is None else sum(bool(alive.get(r["seat"], False)) for r in members),
                "inaction_fraction": inaction / (agent + inaction) if agent + inaction else None,
                "delay_mean_ticks": float(np.mean(delays)) if delays else None,
                "total_reward": float(np.sum(rewards)) if rewards else None,
            }
        )
    return out


def _layers(env: Any) -> list[Any]:
    """``env`` and what it wraps (``.env``, ``.unwrapped``), outermost first, each once."""
    out: list[Any] = []
    while env is not None and len(out) < 8 and all(env is not seen for seen in out):
        out.append(env)
        inner = vars(env).get("env") if hasattr(env, "__dict__") else None
        env = inner if inner is not None else getattr(env, "unwrapped", None)
    return out


def _offering(env: Any, name: str) -> Any:
    """``env``'s method ``name``, looked for through its wrappers, or None."""
    for layer in _layers(env):
        method = getattr(layer, name, None)
        if callable(method):
            return method
    return None


def _as_image(state: Any) -> np.ndarray | None:
    """``state`` as a uint8 image (H, W) or (H, W, 3), or None when it is no picture of the world."""
    if not isinstance(state, np.ndarray) or state.ndim not in (2, 3) or state.size == 0:
        return None
    if state.dtype != np.uint8:
        state = (np.clip(np.nan_to_num(state.astype(np.float64)), 0.0, 1.0) * 255).astype(np.uint8)
    if state.ndim == 2 or state.shape[2] in (3, 4):
        return state if state.ndim == 2 else state[:, :, :3]
    if state.shape[2] == 1:
        return state[:, :, 0]
    weights = _PALETTE[np.arange(state.shape[2]) % len(_PALETTE)]  # (C, 3)
    lit = state.astype(np.float64)[:, :, :, None] * weights[None, None, :, :]  # (H, W, C, 3)
    return np.clip(lit.max(axis=2), 0, 255).astype(np.uint8)


def world_frame(env: Any) -> np.ndarray | None:
    """The world's frame as a uint8 image (see the module docstring), or None."""
    for name in ("live_frame", "state"):
        method = _offering(env, name)
        if method is None:
            continue
        try:
            image = _as_image(np.asarray(method()))
        except Exception:  # a world without a picture of itself (PettingZoo's state() may raise)
            image = None
        if image is not None:
            return image
    return None


def seat_positions(env: Any) -> dict[str, tuple[int, int]] | None:
    """Each living seat's (row, col) in the world's frame, or None when the world offers none."""
    offered = _offering(env, "seat_positions")
    if offered is not None:
        return {str(k): (int(v[0]), int(v[1])) for k, v in offered().items()}
    grid = _magent_grid(env)
    if grid is None:
        return None
    world, names = grid
    out: dict[str, tuple[int, int]] = {}
    for handle in world.handles:
        ids, pos = world.env.get_agent_id(handle), world.env.get_pos(handle)
        for i, (x, y) in zip(ids, pos):
            if 0 <= int(i) < len(names):
                out[names[int(i)]] = (int(x), int(y))
    return out


def _magent_grid(env: Any) -> tuple[Any, list[str]] | None:
    """A MAgent2 world inside ``env`` (its ``handles`` and a grid ``env`` with ``get_pos``), with its
    agents' names in id order."""
    for layer in _layers(env):
        grid = vars(layer).get("env") if hasattr(layer, "__dict__") else None
        if hasattr(layer, "handles") and all(hasattr(grid, m) for m in ("get_pos", "get_agent_id")):
            return layer, [str(a) for a in layer.possible_agents]
    return None


def encode_frame(image: np.ndarray) -> tuple[dict[str, Any], int]:
    """``image`` as the page draws it (``shape``, ``dtype``, ``b64``), subsampled to at most
    `MAX_FRAME_SIDE` a side; and the step it was subsampled by (positions divide by it)."""
    step = max(1, -(-max(image.shape[:2]) // MAX_FRAME_SIDE))
    small = np.ascontiguousarray(image[::step, ::step])
    return {"shape": list(small.shape), "dtype": "|u1", "b64": base64.b64encode(small.tobytes()).decode()}, step


def world_view(env: Any) -> dict[str, Any]:
    """The world's frame and its seats' positions, as the page reads them (``frame``: None when the
    world offers no picture; ``positions``: None when it offers no positions)."""
    image = world_frame(env)
    positions = seat_positions(env)
    frame, step = encode_frame(image) if image is not None else (None, 1)
    if positions is not None and step > 1:
        positions = {seat: (r // step, c // step) for seat, (r, c) in positions.items()}
    return {"frame": frame, "positions": None if positions is None else {s: list(p) for s, p in positions.items()}}
