"""nonstop: realtime reinforcement learning and realtime agents.

The world ticks on its own clock; agents that are not ready get the default
behaviour β and the tick counts as inaction. See ``nonstop.make`` for the
Gymnasium view and ``nonstop.Session`` for the world itself.
"""

from typing import TYPE_CHECKING, Any

from nonstop.realtime import (
    ActionQueue,
    HostError,
    LatestSlot,
    RealtimeEnv,
    Session,
    TickLog,
    VirtualClock,
    WallClock,
    make,
)

from nonstop.realtime.gym import register_envs

register_envs()  # every world as gymnasium.make("nonstop/<id>")

if TYPE_CHECKING:  # pettingzoo (the multi extra) is imported when make_parallel is called, not here
    from nonstop.realtime.clock import Clock
    from nonstop.realtime.host import EnvSource
    from nonstop.realtime.parallel import RealtimeParallelEnv


def make_parallel(
    env_id: "EnvSource", *, clock: "str | Clock" = "virtual", defaults: dict[str, Any] | None = None, **kwargs: Any
) -> "RealtimeParallelEnv":
    """A seat world as a realtime ``pettingzoo.ParallelEnv`` (`nonstop.realtime.parallel`; needs the
    ``multi`` extra): ``nonstop.make_parallel("multi/duel", clock="virtual", defaults={seat: β})``."""
    from nonstop.realtime.parallel import make_parallel as _make_parallel

    return _make_parallel(env_id, clock=clock, defaults=defaults, **kwargs)


__version__ = "0.1.0"
__all__ = [
    "ActionQueue",
    "HostError",
    "LatestSlot",
    "RealtimeEnv",
    "Session",
    "TickLog",
    "VirtualClock",
    "WallClock",
    "make",
    "make_parallel",
    "__version__",
]
