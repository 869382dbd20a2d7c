"""nonstop: realtime reinforcement learning and realtime agents.

The world ticks on its own clock; agents that are not ready get the default
behaviour β and the tick counts as inaction. See ``nonstop.make`` for the
Gymnasium view and ``nonstop.Session`` for the world itself.
"""

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

__version__ = "0.1.0"
__all__ = [
    "ActionQueue", "HostError", "LatestSlot", "RealtimeEnv", "Session", "TickLog", "VirtualClock",
    "WallClock", "make", "__version__",
]
