"""MAgent2's many-agent grid worlds as realtime seat worlds (docs/multi-agent.md, docs/design.md §4b).

``multi/battle``: two teams (``red_*`` against ``blue_*``), 81 agents each on the default 45×45 map
(``map_size`` 12 gives 2 against 2, 20 gives 12 against 12, 80 gives 256 against 256, 115 gives 529
against 529: `battle_agents`, and `battle_map_for` the smallest map of at least n agents);
``multi/battle-1000`` is battle on that 115×115 map, 1,058 agents. Each agent sees a 13×13×5 float32 window
and moves or attacks (``Discrete(21)``). ``multi/gather``: 495 ``omnivore_*`` agents on a 200×200
map of food (15×15×5 windows, ``Discrete(33)``). Every agent is a seat: its own queue, β, reward,
inaction and delay. An agent that dies is terminated and leaves its seat while the others fight on
(`nonstop.realtime.hostloop.ParallelWorld`); the episode ends when one side is wiped out or after
``max_cycles`` ticks. The worlds declare no tick rate: nonstop's is 20 Hz, and the user's
(``--env-arg tick_hz=60``, ``Session(..., env_kwargs={"tick_hz": 60})``) wins. β's no-op is the
move to the agent's own cell (index 6 in battle, 14 in gather: the centre of the move range).

A seat's team is its name up to the last ``_`` (`nonstop.envs.seats.team_of`), as in any PettingZoo
world. magent2 is imported only when a world is built (``pip install nonstop[magent]``).

>>> from nonstop.envs import env_info
>>> info = env_info("multi/battle", map_size=12)
>>> info.tick_hz, info.noop_action
(20.0, 6)
>>> env_info("multi/battle", map_size=12, tick_hz=60).tick_hz
60.0
>>> battle_agents(45), battle_agents(110), battle_map_for(1000), battle_agents(battle_map_for(1000))
(162, 968, 115, 1058)
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Final

from .spec import is_int, register

__all__ = [
    "BATTLE_1000_MAP",
    "MAGENT_TICK_HZ",
    "battle_agents",
    "battle_map_for",
    "make_battle",
    "make_gather",
]

MAGENT_TICK_HZ: Final = 20.0
BATTLE_NOOP: Final = 6  # the centre of battle's 13 moves: stay
GATHER_NOOP: Final = 14  # the centre of gather's 29 moves: stay
BATTLE_MIN_MAP: Final = 12
#: the largest map `battle_map_for` searches (200×200: 3,200 agents a team)
BATTLE_MAX_MAP: Final = 200
_GAP: Final = 3  # cells between the two squares and the map's middle


def _battle_side(map_size: int, right: bool) -> int:
    """Agents MAgent2's battle places on one side: every other cell of a square of 4 % of the map's
    cells, centred vertically, ``_GAP`` from the middle, the map's border cells left out."""
    side = int(math.sqrt(map_size * map_size * 0.04)) * 2  # the same float arithmetic as magent2's generator
    x0 = map_size // 2 + _GAP if right else map_size // 2 - _GAP - side
    y0 = (map_size - side) // 2
    inside = range(1, map_size - 1)
    xs = sum(1 for x in range(x0, x0 + side, 2) if x in inside)
    ys = sum(1 for y in range(y0, y0 + side, 2) if y in inside)
    return xs * ys


def battle_agents(map_size: int) -> int:
    """How many agents battle puts on a ``map_size`` map, both teams (the right one is cut to the left's size)."""
    check_battle(map_size)
    return 2 * min(_battle_side(map_size, False), _battle_side(map_size, True))


def battle_map_for(agents: int) -> int:
    """The smallest battle map (at least 45, the default) with at least ``agents`` agents."""
    if not is_int(agents) or agents < 1:
        raise ValueError(f"agents must be a positive integer, got {agents!r}")
    for map_size in range(45, BATTLE_MAX_MAP + 1):
        if battle_agents(map_size) >= agents:
            return map_size
    raise ValueError(
        f"no battle map up to {BATTLE_MAX_MAP} holds {agents} agents (it holds {battle_agents(BATTLE_MAX_MAP)})"
    )


#: the map of ``multi/battle-1000``: the smallest with a thousand agents (1,058, 529 a team)
BATTLE_1000_MAP: Final = 115


def _magent() -> Any:
    try:
        from magent2.environments import battle_v4, gather_v5
    except ImportError as exc:
        raise ImportError(f"MAgent2 worlds need magent2 ({exc}): pip install 'nonstop[magent]'") from exc
    return battle_v4, gather_v5


def _check_cycles(max_cycles: Any) -> None:
    if not is_int(max_cycles) or max_cycles < 1:
        raise ValueError(f"max_cycles must be a positive integer, got {max_cycles!r}")


def check_battle(map_size: Any = 45, max_cycles: Any = 1000, **_: Any) -> None:
    """A one-line `ValueError` for a map battle cannot have."""
    if not is_int(map_size) or map_size < BATTLE_MIN_MAP:
        raise ValueError(
            f"map_size must be an integer of at least 12 (MAgent2's smallest battle map), got {map_size!r}"
        )
    _check_cycles(max_cycles)


def check_gather(max_cycles: Any = 500, **_: Any) -> None:
    _check_cycles(max_cycles)


def make_battle(map_size: int = 45, max_cycles: int = 1000, minimap_mode: bool = False, seed: int | None = None) -> Any:
    """MAgent2's battle as a PettingZoo parallel env (see the module docstring)."""
    battle_v4, _ = _magent()
    return battle_v4.parallel_env(map_size=map_size, max_cycles=max_cycles, minimap_mode=minimap_mode, seed=seed)


def make_gather(max_cycles: int = 500, minimap_mode: bool = False, seed: int | None = None) -> Any:
    """MAgent2's gather as a PettingZoo parallel env (see the module docstring)."""
    _, gather_v5 = _magent()
    return gather_v5.parallel_env(max_cycles=max_cycles, minimap_mode=minimap_mode, seed=seed)


register(
    "multi/battle",
    make_battle,
    family="multi",
    tick_hz=MAGENT_TICK_HZ,
    noop_action=BATTLE_NOOP,
    default_beta="noop",
    description="MAgent2 battle: 81 red against 81 blue agents, a seat each (magent2; 20 Hz unless tick_hz=)",
    check=check_battle,
)
register(
    "multi/battle-1000",
    partial(make_battle, BATTLE_1000_MAP),
    family="multi",
    tick_hz=MAGENT_TICK_HZ,
    noop_action=BATTLE_NOOP,
    default_beta="noop",
    description=f"MAgent2 battle on a {BATTLE_1000_MAP}x{BATTLE_1000_MAP} map: 529 red against 529 blue agents, a seat each (magent2; 20 Hz unless tick_hz=)",
    check=check_gather,  # max_cycles only: its map is fixed (map_size is refused as an unknown argument)
)
register(
    "multi/gather",
    make_gather,
    family="multi",
    tick_hz=MAGENT_TICK_HZ,
    noop_action=GATHER_NOOP,
    default_beta="noop",
    description="MAgent2 gather: 495 agents foraging, a seat each (magent2; 20 Hz unless tick_hz=)",
    check=check_gather,
)
