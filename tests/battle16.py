"""`multi/battle-16`, the small many-seat world the team server tests share: MAgent2's battle on a 16×16
map, 6 red against 6 blue, registered once on import (the registry refuses a second registration with
other facts)."""

from __future__ import annotations

from functools import partial

from nonstop.envs.magent import BATTLE_NOOP, MAGENT_TICK_HZ, make_battle
from nonstop.envs.spec import register

BATTLE = "multi/battle-16"
RED = [f"red_{i}" for i in range(6)]
BLUE = [f"blue_{i}" for i in range(6)]
STAY = BATTLE_NOOP

register(
    BATTLE,
    partial(make_battle, map_size=16),
    family="multi",
    tick_hz=MAGENT_TICK_HZ,
    noop_action=BATTLE_NOOP,
    default_beta="noop",
    description="MAgent2 battle on a 16x16 map (tests)",
)
