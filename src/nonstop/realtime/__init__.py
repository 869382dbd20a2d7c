"""The realtime core: clocks, channels, the host and its tick log, the Gymnasium view."""

from nonstop.realtime.channels import ActionQueue, ActionRecord, LatestSlot, Observation
from nonstop.realtime.clock import Clock, VirtualClock, WallClock, make_clock
from nonstop.realtime.defaults import DefaultBehaviour, make_default
from nonstop.realtime.gym import RealtimeEnv, make
from nonstop.realtime.host import Host, HostError, Session
from nonstop.realtime.ticklog import SOURCE_AGENT, SOURCE_DEFAULT, TickLog

__all__ = [
    "ActionQueue",
    "ActionRecord",
    "LatestSlot",
    "Observation",
    "Clock",
    "VirtualClock",
    "WallClock",
    "make_clock",
    "DefaultBehaviour",
    "make_default",
    "RealtimeEnv",
    "make",
    "Host",
    "HostError",
    "Session",
    "SOURCE_AGENT",
    "SOURCE_DEFAULT",
    "TickLog",
]
