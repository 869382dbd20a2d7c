"""What the MCP tools say to a model: observations, a team's view and stats as short text, and
their structured content (`nonstop.server.mcp` registers the tools). Pure functions of a reply's
data: nothing here touches a session.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

__all__ = [
    "TEXT_SEATS",
    "TEXT_OBS_VALUES",
    "team_view",
    "team_stats",
    "describe",
    "describe_team",
    "describe_held",
    "png",
]

#: seats a team's text summary shows one by one (its structured content has every seat)
TEXT_SEATS = 6
#: an observation of at most this many values is written out in the text
TEXT_OBS_VALUES = 64


def png(frame: np.ndarray) -> bytes:
    from PIL import Image

    arr = np.asarray(frame)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.dtype != np.uint8:
        lo, hi = float(arr.min()), float(arr.max())
        arr = ((arr - lo) / (hi - lo or 1.0) * 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def describe(
    fields: dict[str, Any], reward: float | None, obs: np.ndarray | None, tick_hz: float, done: bool = False
) -> str:
    tick = fields["tick"]
    lines = [
        f"tick {tick} ({tick / tick_hz:.2f} s of world time), episode {fields['episode']}",
        f"reward since your last look: {reward if reward is not None else 0.0:+g}; "
        f"total reward: {fields['total_reward']:g}",
        f"ticks you acted on: {fields['agent_ticks']}; ticks beta acted on (your inaction): {fields['inaction_ticks']}",
    ]
    if done:
        how = "terminated" if fields["terminated"] else "truncated" if fields["truncated"] else "ended"
        lines.append(
            f"the episode {how} since your last look (this is its final observation); "
            "the world has already started the next one"
        )
    if fields["last_delay"] >= 0:
        lines.append(f"your last applied action was computed from an observation {fields['last_delay']} ticks old")
    if obs is not None:
        if obs.size <= TEXT_OBS_VALUES:
            lines.append(f"observation: {np.round(obs, 4).tolist()}")
        else:
            lines.append(f"observation: a {'x'.join(map(str, obs.shape))} {obs.dtype} frame (observe with image=true)")
    return "\n".join(lines)


def _few(names: list[str]) -> str:
    """``a, b, c``, or past `TEXT_SEATS` names the first few and how many more."""
    if len(names) <= TEXT_SEATS:
        return ", ".join(names)
    return f"{', '.join(names[:TEXT_SEATS])}, ... ({len(names) - TEXT_SEATS} more)"


def team_view(data: dict[str, Any]) -> dict[str, Any]:
    """A ``team_observation`` reply's data as a tool's structured content: each held seat's counters (its
    observation's fields but the array), ``reward`` and ``done`` since the previous look, and the
    team's totals."""
    seats: dict[str, dict[str, Any]] = {}
    for name, seen in data["seats"].items():
        fields = {k: v for k, v in seen["observation"].items() if k not in ("obs", "session_id", "lifecycle", "seat")}
        seats[name] = {**fields, "reward": seen["reward"], "done": seen["done"]}
    done = [name for name, row in seats.items() if row["done"]]
    return {
        "team": data["team"],
        "session_id": data["session_id"],
        "lifecycle": next(iter(data["seats"].values()))["observation"]["lifecycle"],
        "tick": data["tick"],
        "seats_held": len(seats),
        "reward": sum(row["reward"] or 0.0 for row in seats.values()),
        "done": bool(done),
        "done_seats": done,
        "total_reward": sum(row["total_reward"] for row in seats.values()),
        "agent_ticks": sum(row["agent_ticks"] for row in seats.values()),
        "inaction_ticks": sum(row["inaction_ticks"] for row in seats.values()),
        "seats": seats,
    }


def describe_team(view: dict[str, Any], obs: dict[str, np.ndarray | None], tick_hz: float) -> str:
    """A team's observation for a model to read: totals, the seats whose episodes ended, and the first
    `TEXT_SEATS` seats one by one (81 seats' full observations would drown it)."""
    seats, tick, n = view["seats"], view["tick"], view["seats_held"]
    lines = [
        f"team {view['team']}: you hold {n} seats; tick {tick} ({tick / tick_hz:.2f} s of world time)",
        f"reward since your last look: {view['reward']:+g} over your seats; total reward: {view['total_reward']:g}",
        f"ticks your seats acted on: {view['agent_ticks']}; ticks beta acted on (your inaction): "
        f"{view['inaction_ticks']} (summed over your {n} seats)",
    ]
    delays = [row["last_delay"] for row in seats.values() if row["last_delay"] >= 0]
    if delays:
        span = f"{min(delays)}" if min(delays) == max(delays) else f"{min(delays)} to {max(delays)}"
        lines.append(
            f"your last applied actions were computed from observations {span} ticks old "
            f"({len(delays)} of {n} seats have acted)"
        )
    if view["done_seats"]:
        lines.append(
            f"episodes ended since your last look (each such seat shows its final observation; an agent that died "
            f"leaves its seat to beta): {_few(view['done_seats'])}"
        )
    lines.append(
        "your seats:" if n <= TEXT_SEATS else f"the first {TEXT_SEATS} of your {n} seats (all in structured content):"
    )
    for name in list(seats)[:TEXT_SEATS]:
        row, arr = seats[name], obs.get(name)
        delay = row["last_delay"] if row["last_delay"] >= 0 else "none yet"
        line = (
            f"  {name}: reward {row['reward'] or 0.0:+g}, total {row['total_reward']:g}, acted {row['agent_ticks']}, "
            f"inaction {row['inaction_ticks']}, delay {delay}{', episode ended' if row['done'] else ''}"
        )
        if arr is not None and arr.size <= TEXT_OBS_VALUES:
            line += f", observation {np.round(arr, 4).tolist()}"
        lines.append(line)
    big = next((a for a in obs.values() if a is not None and a.size > TEXT_OBS_VALUES), None)
    if big is not None:
        lines.append(f"observations: a {'x'.join(map(str, big.shape))} {big.dtype} array per seat (not shown as text)")
    return "\n".join(lines)


def describe_held(out: dict[str, Any]) -> str:
    """A team start's or join's reply for a model to read (its structured content lists every seat)."""
    space = out["action_space"]
    spaces = f"each seat's action space: {json.dumps(space)}" if space else "action spaces by seat: see action_spaces"
    return "\n".join(
        [
            f"you hold team {out['team']} of session {out['session_id']} ({out['env']}, {out['tick_hz']:g} ticks/s, "
            f"tick {out['tick']}): {len(out['held'])} seats ({_few(out['held'])}) of the world's {len(out['seats'])}",
            spaces,
            "act with actions={seat: action} for any of your seats; a seat you leave out is played by its beta "
            f"({out['default_behaviour']}) until your action comes",
        ]
    )


def team_stats(
    state: dict[str, Any], team: str, held: list[str], others: tuple[int, int]
) -> tuple[dict[str, Any], str]:
    """``stats`` for a team holder: the session's state with the team's totals under ``team``, and a
    short text. ``others``: how many seats the world has besides the team's, and how many of those
    other clients hold. ``state["seats"]`` has the team's rows (every seat's when asked for all)."""
    rows = {row["seat"]: row for row in state.get("seats") or []}
    mine = [rows[name] for name in held if name in rows]
    totals = {
        "name": team,
        "seats": held,
        "agent_ticks": sum(row["agent_ticks"] for row in mine),
        "inaction_ticks": sum(row["inaction_ticks"] for row in mine),
        "total_reward": sum(row["total_reward"] for row in mine),
    }
    ended = f" ({state['end_reason']})" if state.get("end_reason") else ""
    tick = state["tick"]
    text = "\n".join(
        [
            f"session {state['session_id']} ({state['env']}): {state['lifecycle']}{ended}, tick {tick} "
            f"({tick / state['tick_hz']:.2f} s of world time)",
            f"team {team}: you hold {len(held)} seats ({_few(held)})",
            f"ticks your seats acted on: {totals['agent_ticks']}; ticks beta acted on (your inaction): "
            f"{totals['inaction_ticks']}; total reward: {totals['total_reward']:g}",
            f"the world's other {others[0]} seats: {others[1]} held by other clients, the rest played by their beta",
            "your seats' counters are in the structured content (seats; your team's totals under team; "
            "all_seats=true lists every seat's)",
        ]
    )
    return {**state, "team": totals}, text
