"""The actions in flight, exactly as an inference pool knows them (docs/concepts.md, learning that
pays for delay).

Staggering removes inaction, not delay: an action computed on the observation of tick ``o`` lands
at a later tick, its *due* tick. Meanwhile the world moves under the actions computed before it.
The pool knows every one of them: a declared-latency model's decision is known when its worker
reads the observation (it then waits the latency out), a measured model's when its pass returns,
and each one's due tick from the time it is (or will be) submitted: the first tick whose host step
comes at or after that time. `ActionBuffer` keeps that record; nothing in it is estimated.

At a tick ``t`` the buffer is the ``K`` most recent decisions of the episode computed on
observations before ``t``, newest first, each with

* its action (a Box action flattened, a Discrete one one-hot),
* ``due − t``: ticks until it is applied (≤ 0: applied that many ticks ago), and
* ``t − o``: ticks since the observation it was computed on,

zero-padded to ``K`` slots. Where the delay varies (a lognormal ``τ_θ``, the ``fill`` scheduler)
each decision carries its own due tick, and a due tick that moves (Algorithm 1 pads an inference
to ``τ̂_θmax``; ``fill`` holds a decision to its release slot) moves in the record as the pool
decides it. ``augment`` appends that encoding to the observation a worker hands its policy, and
remembers it by episode and tick (`seen`), so the replay stores the very observation the actor saw.

>>> import gymnasium as gym
>>> buf = ActionBuffer(gym.spaces.Box(-2.0, 2.0, (1,)), k=2)
>>> buf.decided(("w0", 3), obs_tick=3, episode=0, action=[0.5], due_tick=6)
>>> buf.decided(("w1", 4), obs_tick=4, episode=0, action=[-1.0], due_tick=7)
>>> buf.encode(5, episode=0).tolist()  # newest first: action, ticks to apply, ticks since its observation
[-1.0, 2.0, 1.0, 0.5, 1.0, 2.0]
>>> buf.augment(np.zeros(3, np.float32), tick=6, episode=0).shape  # 3 + 2 slots of 3
(9,)
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Final, NamedTuple

import gymnasium as gym
import numpy as np

__all__ = ["ActionBuffer", "InFlightAction", "buffer_slots", "due_tick_of"]

#: how many ticks of decisions and seen encodings are kept (far more than any K)
DEFAULT_HISTORY: Final = 4096
#: a submit within this fraction of a tick after a deadline belongs to that deadline's tick
_TICK_EPS: Final = 1e-6


def due_tick_of(submit_time: float, *, origin: float, tau_m: float) -> int:
    """The tick an action submitted at ``submit_time`` is applied at: the first tick whose deadline
    is at or after it (the host steps a tick just after its deadline, so a submit exactly on a
    deadline makes that tick).

    >>> due_tick_of(0.30000000000000004, origin=0.0, tau_m=0.1), due_tick_of(0.31, origin=0.0, tau_m=0.1)
    (3, 4)
    """
    return int(math.ceil((submit_time - origin) / tau_m - _TICK_EPS))


def buffer_slots(max_latency_s: float, tau_m: float) -> int:
    """K: the latency's declared maximum in ticks, rounded up (at least 1).

    >>> buffer_slots(0.3, 0.05), buffer_slots(0.31, 0.05), buffer_slots(0.0, 0.05)
    (6, 7, 1)
    """
    if not (max_latency_s >= 0 and tau_m > 0):
        raise ValueError(f"need a latency >= 0 and a tick period > 0, got {max_latency_s!r} and {tau_m!r}")
    return max(1, int(math.ceil(max_latency_s / tau_m - _TICK_EPS)))


class InFlightAction(NamedTuple):
    """One decision of the pool: the observation tick it was computed on, its action and due tick."""

    obs_tick: int
    episode: int
    action: np.ndarray
    due_tick: int


class ActionBuffer:
    """The pool's record of its decisions and the ``K``-slot encoding of the actions in flight.

    Ownership: the `InferencePool` it is given to writes it (``decided``, ``moved``, ``augment``);
    the run's replay recorder reads ``seen`` and ``encode`` in the same process. A lock makes the
    wall clock's worker threads safe. The pool turns submit times into due ticks (`due_tick_of`).
    """

    def __init__(self, action_space: gym.Space, *, k: int, history: int = DEFAULT_HISTORY) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"the action buffer needs k >= 1 slots, got {k!r}")
        if isinstance(action_space, gym.spaces.Discrete):
            self.action_width, self._n = int(action_space.n), int(action_space.n)
            self._start = int(action_space.start)
        elif isinstance(action_space, gym.spaces.Box):
            self.action_width, self._n, self._start = int(np.prod(action_space.shape)), 0, 0
        else:
            raise TypeError(f"the action buffer encodes Box and Discrete actions, got {action_space}")
        self.action_space, self.k = action_space, k
        self.history = int(history)
        #: floats per slot: the action, ticks to apply, ticks since its observation
        self.slot_width = self.action_width + 2
        self.width = self.k * self.slot_width
        self._lock = threading.Lock()
        self._decisions: OrderedDict[Hashable, InFlightAction] = OrderedDict()
        self._unlanded: dict[Hashable, InFlightAction] = {}  # decided, and neither applied nor superseded yet
        self._seen: dict[tuple[int, int], np.ndarray] = {}  # (episode, tick): an episode's end and the
        # next one's start share a tick (the terminal and the reset observation), each with its own buffer

    # ------------------------------------------------------------------ what the pool tells it
    def _vector(self, action: Any) -> np.ndarray:
        if self._n:
            out = np.zeros(self._n, np.float32)
            out[int(action) - self._start] = 1.0
            return out
        return np.asarray(action, np.float32).reshape(-1).copy()

    def decided(self, key: Hashable, *, obs_tick: int, episode: int, action: Any, due_tick: int) -> None:
        """A decision is known (``key``: unique per decision, e.g. ``(worker, obs_tick)``)."""
        entry = InFlightAction(int(obs_tick), int(episode), self._vector(action), int(due_tick))
        with self._lock:
            self._decisions[key] = self._unlanded[key] = entry
            self._decisions.move_to_end(key)
            while len(self._decisions) > self.history:
                old, _ = self._decisions.popitem(last=False)
                self._unlanded.pop(old, None)

    def moved(self, key: Hashable, due_tick: int) -> None:
        """A known decision's due tick changed (its submit was padded or held)."""
        with self._lock:
            entry = self._decisions.get(key)
            if entry is not None and entry.due_tick != due_tick:
                self._decisions[key] = entry._replace(due_tick=int(due_tick))
                if key in self._unlanded:
                    self._unlanded[key] = self._decisions[key]

    def landed(self, tick: int, *, episode: int, obs_tick: int | None) -> None:
        """The host's tick ``tick``: it applied ``episode``'s decision computed on ``obs_tick`` (None: β
        acted). Every other decision due by then was superseded by a newer one in the action queue, or
        dropped, and never acts: it leaves the record, so no actor sees it as in flight. (The host's
        recorder calls this in the host's process; O(decisions not yet landed) a tick.)"""
        with self._lock:
            applied = None
            if obs_tick is not None:
                applied = next(
                    (k for k, d in self._unlanded.items() if d.episode == episode and d.obs_tick == obs_tick), None
                )
                if applied is not None:  # what happened, exactly: it landed now
                    d = self._unlanded.pop(applied)
                    if d.due_tick != tick:
                        self._decisions[applied] = d._replace(due_tick=int(tick))
            for key in [k for k, d in self._unlanded.items() if d.due_tick <= tick]:
                del self._unlanded[key]
                self._decisions.pop(key, None)

    def decisions(self) -> list[InFlightAction]:
        """Every decision kept, in the order they became known, with its latest due tick."""
        with self._lock:
            return list(self._decisions.values())

    # ------------------------------------------------------------------ what it tells the actor
    def in_flight(self, tick: int, *, episode: int) -> list[InFlightAction]:
        """The ``K`` most recent decisions of ``episode`` on observations before ``tick``, newest first.
        A decision the host superseded (or dropped) is no longer kept (`landed`)."""
        with self._lock:
            chosen = [d for d in self._decisions.values() if d.episode == episode and d.obs_tick < tick]
        chosen.sort(key=lambda d: d.obs_tick, reverse=True)  # stable: equal ticks keep the newest known first
        return chosen[: self.k]

    def encode(self, tick: int, *, episode: int) -> np.ndarray:
        """The buffer at ``tick`` as ``K × (action, due − tick, tick − obs_tick)`` floats, zero-padded."""
        out = np.zeros((self.k, self.slot_width), np.float32)
        for i, d in enumerate(self.in_flight(tick, episode=episode)):
            out[i, : self.action_width] = d.action
            out[i, -2] = d.due_tick - tick
            out[i, -1] = tick - d.obs_tick
        return out.reshape(-1)

    def augment(self, obs: np.ndarray, *, tick: int, episode: int) -> np.ndarray:
        """``obs`` (flattened, float32) followed by the buffer at ``tick``; the encoding is remembered
        as ``seen[episode, tick]`` (the first worker to read it fixes it: the replay stores that one)."""
        enc = self.encode(tick, episode=episode)
        with self._lock:
            seen = self._seen.setdefault((int(episode), int(tick)), enc)
            if len(self._seen) > 2 * self.history:
                low = tick - self.history
                self._seen = {key: e for key, e in self._seen.items() if key[1] >= low}
        return np.concatenate([np.asarray(obs, np.float32).reshape(-1), seen])

    def seen(self, tick: int, *, episode: int) -> np.ndarray | None:
        """The encoding an actor saw beside ``episode``'s observation of ``tick`` (None: no worker read it)."""
        with self._lock:
            return self._seen.get((int(episode), int(tick)))

    def augmented_shape(self, obs_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of an augmented observation (vector observations only)."""
        if len(obs_shape) != 1:
            raise ValueError(
                f"--delay-aware appends the actions in flight to vector observations; this world's are "
                f"{tuple(obs_shape)} (frames are not supported yet)"
            )
        return (int(obs_shape[0]) + self.width,)
