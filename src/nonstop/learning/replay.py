"""Shared replay of the induced delayed semi-MDP (paper, Definition 1; docs/design.md §3).

How a transition is formed
--------------------------
The host applies one action per tick. Only the ticks where an *agent* action is
applied are decisions of the semi-MDP; β fills the ticks in between. For the
agent actions applied at ticks ``t_1 < t_2 < …`` of one episode, computed on the
observations of ticks ``o_1, o_2, …`` (``o_i = t_i − delay_i``)::

    s_i   = obs(o_i)                        the observation a_i was computed on
    a_i   = the action applied at t_i
    R_i   = Σ_{k=0}^{n_i−1} γ^k · r(t_i + k)  every reward from t_i until the next
                                            agent action, β ticks included
    n_i   = t_{i+1} − t_i                   ticks the decision lasted
    s'_i  = obs(o_{i+1})                    the next *decision* observation
    γ_i   = γ^{n_i}                         discount for bootstrapping from s'_i

Rewards are discounted per tick, so a sequential agent acting every k ticks and a
staggered agent acting every tick value the same stream of rewards equally. At
an episode end at tick ``T`` the open decision closes there: ``s'`` is the
terminal observation, ``γ_i = 0`` when the env terminated (done masking) and
``γ^{n_i}`` when it was truncated (a time limit is not a terminal state). The β
ticks of an episode before its first agent action belong to no decision. A truncated episode's
last decision under a delay ``d ≥ 2`` bootstraps from ``obs(T + 1 − d)``, not the terminal one: the
value learned at a decision observation counts the rewards from when its action lands, so only
that one continues exactly where the transition's rewards stop (``obs(T)`` would skip ``d − 1``
ticks of reward and discount).

Where an algorithm's critic learns in hindsight on the world's own state (BPQL, `nonstop.learning.bpql`),
each transition also names the observation its action acted on, ``obs(t_i − 1)`` (the host applies
tick ``t_i``'s action to the state tick ``t_i − 1`` left), and the next decision's, ``obs(t_{i+1} − 1)``
(the terminal observation at an episode end): ``ReplayBuffer.create(landing_states=True)``.

Actions are stored as the algorithm acts: a ``Discrete`` action as its int64 index (from 0), a ``Box``
action as a float32 vector of the Box's shape (``ReplayBuffer.create(action_shape=...)``); the
semi-MDP is the same for both.

Frames are stored once: the host keeps a short ring of its recent observations
(``history`` ticks, enough for the longest delay), and copies a frame into the
replay only when a decision refers to it; transitions hold frame indices.

Where a team's seats share one θ and the network is told which seat it acts for (``--agent-id``), each
transition keeps its seat's index (two bytes) and the replay adds the seat's identity to the frames it
samples (`nonstop.policies.agentid.AgentId`): the frames are stored as the world published them.

Ownership: `ReplayBuffer.create` owns the shared memory and must ``unlink``; the
host process holds the only writer (`ReplayRecorder`); learners attach by
pickling the buffer and only ``sample``.

>>> b = SemiMDPBuilder(gamma=0.5)
>>> b.on_tick(1, agent=True, action=2, obs_tick=0, reward=1.0)
[]
>>> b.on_tick(2, agent=False, action=0, obs_tick=-1, reward=4.0)
[]
>>> [(t.s_tick, t.action, t.reward, t.n_ticks, t.next_tick) for t in b.on_tick(3, agent=True, action=1, obs_tick=2, reward=0.0)]
[(0, 2, 3.0, 2, 2)]
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final, NamedTuple

import numpy as np

from nonstop.realtime.atomics import ACQUIRE, RELAXED, RELEASE, SEQ_CST, SharedWords, fence, futex_wait, futex_wake
from nonstop.realtime.channels import SharedSegment, _attach, _new_segment

__all__ = [
    "SemiMDPBuilder",
    "Transition",
    "ReplayBuffer",
    "ReplayRecorder",
    "Batch",
    "replay_bytes",
    "check_replay_fits",
    "ReplayTooLargeError",
]

TERMINAL: Final = -2  # `next_tick` of a transition that ends at an episode end: its next frame is the terminal one


class Transition(NamedTuple):
    """One decision of the semi-MDP, frames named by tick (``TERMINAL``: the episode's terminal observation)."""

    s_tick: int
    action: Any  # an index (Discrete) or a float32 vector (Box)
    reward: float
    discount: float
    n_ticks: int
    next_tick: int
    episode: int
    #: the tick whose observation the action acted on (the one before it landed), and the same for the next
    #: decision's action (``TERMINAL``: the episode's terminal observation); -1 where a builder does not know it
    state_tick: int = -1
    next_state_tick: int = -1


class SemiMDPBuilder:
    """Pure logic: host ticks in, semi-MDP transitions out (see the module docstring).

    Call ``on_tick`` once per tick in order, with ``terminated``/``truncated`` set on
    the tick an episode ends at; the next tick belongs to the next episode.
    """

    def __init__(self, gamma: float) -> None:
        if not (isinstance(gamma, (int, float)) and 0.0 <= gamma <= 1.0):
            raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.episode = 0
        self._open: list[Any] | None = None  # [s_tick, action, reward_sum, n_ticks, delay]

    def on_tick(
        self,
        tick: int,
        *,
        agent: bool,
        action: Any,
        obs_tick: int,
        reward: float,
        terminated: bool = False,
        truncated: bool = False,
    ) -> list[Transition]:
        out: list[Transition] = []
        pending = self._open
        if agent:
            if pending is not None:  # the decision before this one ends here; this action's obs is its s'
                s, a, ret, n, delay = pending
                out.append(Transition(s, a, ret, self.gamma**n, n, obs_tick, self.episode, s + delay - 1, tick - 1))
            self._open = pending = [obs_tick, action, float(reward), 1, tick - obs_tick]
        elif pending is not None:  # β tick inside a decision: its reward belongs to that decision
            pending[2] += self.gamma ** pending[3] * float(reward)
            pending[3] += 1
        if terminated or truncated:
            if pending is not None:
                s, a, ret, n, delay = pending
                state = s + delay - 1
                if terminated:
                    out.append(Transition(s, a, ret, 0.0, n, TERMINAL, self.episode, state, TERMINAL))
                else:
                    # A time limit is not a terminal state: the value goes on from tick+1, which the action
                    # decided on obs(tick + 1 − delay) would have reached (obs(T) itself for a 1-tick delay);
                    # that action would have acted on obs(T)
                    nxt = TERMINAL if delay <= 1 else tick + 1 - delay
                    out.append(Transition(s, a, ret, self.gamma**n, n, nxt, self.episode, state, TERMINAL))
            self._open = None
            self.episode += 1
        return out


# ----------------------------------------------------------------------------- memory


class ReplayTooLargeError(MemoryError, ValueError):
    """The replay would not fit in shared memory or RAM on this machine."""


_T_COLS: Final = (
    ("s_frame", np.int64),
    ("next_frame", np.int64),
    ("action", np.int64),
    ("reward", np.float32),
    ("discount", np.float32),
    ("n_ticks", np.int32),
    ("agent", np.int16),  # which seat of a team recorded it (`nonstop.learning.seatreplay`): its id, added as sampled
    ("state_frame", np.int64),  # the observation the action acted on (only with ``landing_states``)
    ("next_state_frame", np.int64),  # the next decision's
)
_STATE_COLS: Final = ("state_frame", "next_state_frame")
_HDR: Final = 8  # int64 words: transitions, frames, episodes; ticks, agent ticks, delay sum; waiters; spare
_COUNT, _FRAMES, _EPISODES, _TICKS, _AGENT, _DELAY_SUM, _WAITERS = 0, 1, 2, 3, 4, 5, 6
#: byte offset of the transition count's low 32 bits: the futex word samplers sleep on
_COUNT_LOW: Final = 8 * _COUNT + (0 if sys.byteorder == "little" else 4)
#: finished episodes kept for the trainer to read (end tick, return, length in ticks)
EPISODE_RING: Final = 1024


def _action_column(action_shape: tuple[int, ...]) -> tuple[np.dtype, int]:
    """The action column's dtype and numbers per row: an int64 index, or a float32 vector."""
    if not action_shape:
        return np.dtype(np.int64), 1
    return np.dtype(np.float32), int(np.prod(action_shape, dtype=np.int64))


def _columns(landing_states: bool) -> tuple[tuple[str, Any], ...]:
    """The transition columns a replay keeps (the landing states' two only where asked for)."""
    return tuple((n, dt) for n, dt in _T_COLS if landing_states or n not in _STATE_COLS)


def _layout(
    capacity: int,
    frame_capacity: int,
    obs_shape: tuple[int, ...],
    dtype: np.dtype,
    action_shape: tuple[int, ...] = (),
    landing_states: bool = False,
) -> tuple[dict, int]:
    offsets, off = {}, _HDR * 8
    frame_bytes = int(np.prod(obs_shape, dtype=np.int64)) * dtype.itemsize

    def put(name: str, nbytes: int) -> None:
        nonlocal off
        offsets[name] = off
        off += -(-nbytes // 64) * 64  # 64-byte aligned columns

    put("episodes", EPISODE_RING * 3 * 8)
    put("frames", frame_capacity * frame_bytes)
    put("frame_id", frame_capacity * 8)
    for name, dt in _columns(landing_states):
        if name == "action":
            adt, per_row = _action_column(action_shape)
            put(name, capacity * per_row * adt.itemsize)
        else:
            put(name, capacity * np.dtype(dt).itemsize)
    return offsets, off


def replay_bytes(
    capacity: int,
    obs_shape: tuple[int, ...],
    dtype: Any = np.uint8,
    action_shape: tuple[int, ...] = (),
    landing_states: bool = False,
) -> int:
    """Shared memory a replay of ``capacity`` transitions needs (frames stored once).

    >>> round(replay_bytes(1_000_000, (84, 84)) / 2**30, 2)  # the paper's 1M transitions of 84x84x1 frames
    7.44
    """
    frames = _frame_capacity(capacity, landing_states)
    return _layout(capacity, frames, tuple(obs_shape), np.dtype(dtype), tuple(action_shape), landing_states)[1]


def _frame_capacity(capacity: int, landing_states: bool = False) -> int:
    # each decision stores about one new frame, plus one terminal frame per episode; with the states its
    # action landed on, up to one more (none more when a decision is taken every tick)
    return (2 if landing_states else 1) * capacity + max(64, capacity // 8)


def _available_bytes() -> tuple[int, str]:
    """The tighter of free /dev/shm and MemAvailable, with where the limit comes from."""
    limits: list[tuple[int, str]] = []
    try:
        st = os.statvfs("/dev/shm")
        limits.append((st.f_bavail * st.f_frsize, "free space in /dev/shm"))
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    limits.append((int(line.split()[1]) * 1024, "MemAvailable"))
    except OSError:
        pass
    return min(limits) if limits else (1 << 62, "unknown")


def check_replay_fits(
    capacity: int,
    obs_shape: tuple[int, ...],
    dtype: Any,
    action_shape: tuple[int, ...] = (),
    landing_states: bool = False,
) -> int:
    """The replay's size in bytes, or `ReplayTooLargeError` (with the capacity that would fit)
    when it cannot fit in shared memory or RAM on this machine."""
    dtype = np.dtype(dtype)
    need = replay_bytes(capacity, tuple(obs_shape), dtype, tuple(action_shape), landing_states)
    have, where = _available_bytes()
    if need > have * 0.9:
        raise ReplayTooLargeError(
            f"a replay of {capacity:,} transitions of {tuple(obs_shape)} {dtype} frames needs "
            f"{need / 2**30:.2f} GiB of shared memory, but {where} is {have / 2**30:.2f} GiB: "
            f"lower --replay-capacity to about {int(capacity * have * 0.8 / need):,}"
        )
    return need


class Batch(NamedTuple):
    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    next_obs: np.ndarray
    n_ticks: np.ndarray
    #: the observations the actions acted on and the next decisions' (``sample(states=True)``; else None)
    state: np.ndarray | None = None
    next_state: np.ndarray | None = None


class ReplayBuffer(SharedSegment):
    """The most recent ``capacity`` semi-MDP transitions in shared memory.

    Single writer (the host's `ReplayRecorder`), many samplers in any process.
    A sampler never returns a transition the writer touched while it copied it:
    it copies the columns, then the frames, then checks each frame slot's id (a
    slot carries the id of the frame in it, -1 while being written) and that no
    newer transition reached the sampled slot; a sample that fails is dropped and
    counted. The counts and frame ids that make this work are acquire/release
    atomics with fences around the copies (`nonstop.realtime.atomics`), so it holds
    on weakly ordered CPUs too.

    >>> rb = ReplayBuffer.create(capacity=4, obs_shape=(2,), dtype=np.float32)
    >>> f0 = rb.add_frame(np.array([0, 1], np.float32)); f1 = rb.add_frame(np.array([2, 3], np.float32))
    >>> rb.add_transition(f0, 1, 0.5, 0.99, 1, f1)
    >>> b = rb.sample(2, np.random.default_rng(0))
    >>> b.obs.tolist(), b.next_obs.tolist(), b.action.tolist()
    ([[0.0, 1.0], [0.0, 1.0]], [[2.0, 3.0], [2.0, 3.0]], [1, 1])
    >>> rb.unlink()
    """

    _views = ("_hdr", "_words", "_ids", "frames", "frame_id", "_episodes")

    def __init__(
        self,
        name: str,
        capacity: int,
        obs_shape: tuple[int, ...],
        dtype: str,
        *,
        _shm: Any = None,
        action_shape: tuple[int, ...] = (),
        agent_id: Any = None,
        landing_states: bool = False,
    ) -> None:
        #: whether each transition names the observations its action and the next one acted on (BPQL's critic)
        self.landing_states = bool(landing_states)
        #: adds each sampled transition's agent identity to its frames (an `AgentId`; None: frames as stored)
        self.agent_id = agent_id if agent_id is not None and agent_id.active else None
        self.name, self.capacity, self.obs_shape, self.dtype = name, int(capacity), tuple(obs_shape), np.dtype(dtype)
        #: one action's shape: ``()`` an int64 index (Discrete), ``(d,)`` a float32 vector (Box)
        self.action_shape = tuple(int(d) for d in action_shape)
        self.frame_capacity = _frame_capacity(self.capacity, self.landing_states)
        self._shm = _shm if _shm is not None else _attach(name)
        self._owner = _shm is not None
        offsets, self.nbytes = _layout(
            self.capacity, self.frame_capacity, self.obs_shape, self.dtype, self.action_shape, self.landing_states
        )
        buf = self._shm.buf
        self._hdr = np.ndarray((_HDR,), np.int64, buf, 0)  # bulk access (checkpoints); ordering goes through _words
        self._words = SharedWords(buf, 0, _HDR)
        self.frames = np.ndarray((self.frame_capacity, *self.obs_shape), self.dtype, buf, offsets["frames"])
        self.frame_id = np.ndarray((self.frame_capacity,), np.int64, buf, offsets["frame_id"])
        self._ids = SharedWords(buf, offsets["frame_id"], self.frame_capacity)
        self.cols = {
            n: np.ndarray((self.capacity,), dt, buf, offsets[n])
            for n, dt in _columns(self.landing_states)
            if n != "action"
        }
        self.cols["action"] = np.ndarray(
            (self.capacity, *self.action_shape), _action_column(self.action_shape)[0], buf, offsets["action"]
        )
        self._episodes = np.ndarray((EPISODE_RING, 3), np.float64, buf, offsets["episodes"])
        #: where the transition count's low half lives in this process's mapping (`wait_for_transitions`)
        self._count_address = self._hdr.ctypes.data + _COUNT_LOW
        self.dropped_recycled = 0

    @classmethod
    def create(
        cls,
        *,
        capacity: int,
        obs_shape: tuple[int, ...],
        dtype: Any = np.uint8,
        check_memory: bool = True,
        action_shape: tuple[int, ...] = (),
        agent_id: Any = None,
        landing_states: bool = False,
    ) -> "ReplayBuffer":
        """A new replay (the caller owns it: ``unlink``). ``action_shape``: ``()`` for Discrete actions
        (int64 indices), a Box's shape for continuous ones (float32 vectors). ``agent_id``: an
        `nonstop.policies.agentid.AgentId` whose identity `sample` adds to each transition's frames.
        ``landing_states``: each transition also keeps the observations its action and the next one acted
        on (the module docstring), and ``sample(states=True)`` returns them."""
        if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"replay capacity must be a positive integer, got {capacity!r}")
        dtype = np.dtype(dtype)
        if dtype.kind not in "biuf":
            raise TypeError(f"replay frames must be numeric, got dtype {dtype}")
        action_shape = tuple(action_shape)
        size = (check_replay_fits if check_memory else replay_bytes)(
            int(capacity), tuple(obs_shape), dtype, action_shape, landing_states
        )
        shm = _new_segment(size, "replay")
        rb = cls(
            shm.name,
            int(capacity),
            tuple(obs_shape),
            dtype.str,
            _shm=shm,
            action_shape=action_shape,
            agent_id=agent_id,
            landing_states=landing_states,
        )
        rb._hdr[:] = 0
        rb.frame_id[:] = -1
        return rb

    def __reduce__(self) -> tuple:
        ids = None if self.agent_id is None else self.agent_id.to_dict()
        return (
            _attach_replay,
            (self.name, self.capacity, self.obs_shape, self.dtype.str, self.action_shape, ids, self.landing_states),
        )

    # ---------------------------------------------------------------- writer side
    @property
    def size(self) -> int:
        return min(self._words.load(_COUNT), self.capacity)

    @property
    def transitions_written(self) -> int:
        return self._words.load(_COUNT)

    def add_frame(self, frame: np.ndarray) -> int:
        """Store one frame; returns its id (ids grow forever, slots are recycled)."""
        words, ids = self._words, self._ids
        fid = words.load(_FRAMES, RELAXED)  # the one writer's own word
        slot = fid % self.frame_capacity
        ids.store(slot, -1, RELAXED)  # invalid while being written...
        fence(RELEASE)  # ...and seen so before any byte of the new frame
        self.frames[slot] = frame
        ids.store(slot, fid, RELEASE)
        words.store(_FRAMES, fid + 1, RELEASE)
        return fid

    @property
    def episodes_finished(self) -> int:
        return self._words.load(_EPISODES)

    def add_episode(self, end_tick: int, episode_return: float, length: int) -> None:
        """Record a finished episode (the host's recorder sees every reward of it)."""
        n = self._words.load(_EPISODES, RELAXED)
        self._episodes[n % EPISODE_RING] = (end_tick, episode_return, length)
        self._words.store(_EPISODES, n + 1, RELEASE)

    def count_tick(self, agent: bool, delay: int) -> None:
        # statistics for reports, one writer: plain words (they order nothing, and this runs every tick)
        h = self._hdr
        h[_TICKS] += 1
        if agent:
            h[_AGENT] += 1
            h[_DELAY_SUM] += delay

    def tick_counters(self) -> tuple[int, int, int]:
        """``(ticks, agent ticks, sum of agent delays)`` the host has recorded so far."""
        h = self._hdr
        return int(h[_TICKS]), int(h[_AGENT]), int(h[_DELAY_SUM])

    def episodes_since(self, first: int) -> list[tuple[int, int, float, int]]:
        """``(index, end_tick, return, length)`` of finished episodes ``first…`` still in the ring."""
        n = self._words.load(_EPISODES)
        rows = self._episodes[[i % EPISODE_RING for i in range(max(first, n - EPISODE_RING), n)]]
        return [
            (i, int(e), float(r), int(length))
            for i, (e, r, length) in zip(range(max(first, n - EPISODE_RING), n), rows)
        ]

    def add_transition(
        self,
        s_frame: int,
        action: Any,
        reward: float,
        discount: float,
        n_ticks: int,
        next_frame: int,
        agent: int = 0,
        states: tuple[int, int] = (-1, -1),
    ) -> None:
        """One transition, its frames by id; ``states``: the frames of the observations its action and the
        next decision's acted on (``landing_states``)."""
        count = self._words.load(_COUNT, RELAXED)  # the one writer's own word
        i = count % self.capacity
        c = self.cols
        fence(RELEASE)  # the count that retires this slot's old transition is seen before the new one lands
        c["s_frame"][i], c["next_frame"][i], c["action"][i] = s_frame, next_frame, action
        c["reward"][i], c["discount"][i], c["n_ticks"][i], c["agent"][i] = reward, discount, n_ticks, agent
        if self.landing_states:
            c["state_frame"][i], c["next_state_frame"][i] = states
        # sequentially consistent store, then load: with the waiter's own pair (`wait_for_transitions`)
        # either it sees this count or this sees it waiting; no system call while nobody waits
        words = self._words
        words.store(_COUNT, count + 1, SEQ_CST)
        if words.load(_WAITERS, SEQ_CST):
            futex_wake(self._count_address)

    def wait_for_transitions(self, seen: int, timeout: float) -> int:
        """Sleep until the replay holds more than ``seen`` transitions (a write from any process wakes
        it: the count is a futex word), or ``timeout`` seconds pass, or `wake_waiters`; returns the
        transitions written. It may return early, so callers re-check what they wait for. Where there
        is no futex (`nonstop.realtime.atomics.FUTEX`) it sleeps a 2 ms slice instead."""
        words = self._words
        count = words.load(_COUNT)
        if count != seen:
            return count
        words.fetch_add(_WAITERS, 1, SEQ_CST)
        try:
            count = words.load(_COUNT, SEQ_CST)
            if count == seen:  # the kernel re-checks the word, so a write after this load is not missed
                futex_wait(self._count_address, seen, timeout)
                count = words.load(_COUNT)
        finally:
            words.fetch_add(_WAITERS, -1, SEQ_CST)
        return count

    def wake_waiters(self) -> None:
        """Wake every sampler in `wait_for_transitions` now (stopping: they re-check and see the stop)."""
        if not self.closed:  # closed in this process: its address is no longer mapped
            futex_wake(self._count_address)

    # ---------------------------------------------------------------- sampler side
    def sample(self, batch_size: int, rng: np.random.Generator, *, states: bool = False) -> Batch | None:
        """``batch_size`` transitions drawn uniformly from the newest ``capacity``
        (``None`` while the replay is empty). Samples whose frames were recycled
        mid-copy are dropped (counted). ``states``: with the observations each action and
        the next one acted on (a replay made with ``landing_states``)."""
        if states and not self.landing_states:
            raise ValueError("this replay keeps no landing states: create it with landing_states=True")
        count = self._words.load(_COUNT, ACQUIRE)
        size = min(count, self.capacity - 1)  # once full, leave out the slot the writer fills next
        if size < 1:
            return None
        first = count - size  # oldest usable transition number
        nums = first + rng.integers(0, size, batch_size)  # transition numbers; their slots are nums % capacity
        idx = nums % self.capacity
        c = self.cols
        # columns first, then frames, then check that the writer reached none of these slots meanwhile
        s_f, n_f = c["s_frame"][idx], c["next_frame"][idx]
        action, reward = c["action"][idx], c["reward"][idx]
        discount, n_ticks, agent = c["discount"][idx], c["n_ticks"][idx], c["agent"][idx]
        ids = [s_f, n_f, *((c["state_frame"][idx], c["next_state_frame"][idx]) if states else ())]
        frames = [self.frames[f % self.frame_capacity] for f in ids]
        fence(ACQUIRE)  # the copies are complete before the ids and the count are checked
        ok = nums >= self._words.load(_COUNT, RELAXED) - self.capacity + 1  # slot not rewritten by a newer transition
        for f in ids:
            ok &= self.frame_id[f % self.frame_capacity] == f
        if not ok.all():
            self.dropped_recycled += int((~ok).sum())
            keep = np.flatnonzero(ok)
            if keep.size == 0:
                return None
            frames = [a[keep] for a in frames]
            action, reward, discount, n_ticks, agent = (a[keep] for a in (action, reward, discount, n_ticks, agent))
        if self.agent_id is not None:  # the network of a team's seats sees whose transition it is
            frames = [self.agent_id(f, agent) for f in frames]
        return Batch(frames[0], action, reward, discount, frames[1], n_ticks, *frames[2:])

    # ---------------------------------------------------------------- checkpoints
    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of the contents for a checkpoint: ``header`` (``[transitions written, frame ids
        issued]``), ``frames``, ``frame_id`` and every transition column. It may be taken while the
        host writes: the transition count is read before the copies (rows written meanwhile are left
        out) and the frame-id counter after them, past every id copied, so a run resumed from it never
        issues a frame id twice."""
        count = int(self._hdr[_COUNT])
        copies = {
            "frames": self.frames.copy(),
            "frame_id": self.frame_id.copy(),
            **{name: col.copy() for name, col in self.cols.items()},
        }
        frames = max(int(self._hdr[_FRAMES]), int(copies["frame_id"].max()) + 1)
        return {"header": np.array([count, frames], np.int64), **copies}

    def restore(self, snapshot: dict[str, np.ndarray]) -> None:
        """Load a `snapshot` into this buffer before anyone writes or samples it (same frame shape
        and capacity, or a ``ValueError`` naming the difference)."""
        if snapshot["frames"].shape != self.frames.shape:
            raise ValueError(
                f"the replay snapshot holds frames of shape {snapshot['frames'].shape}, this replay {self.frames.shape}"
            )
        self.frames[:] = snapshot["frames"]
        self.frame_id[:] = snapshot["frame_id"]
        for name, col in self.cols.items():
            col[:] = snapshot[name] if name in snapshot else 0  # a column newer than the checkpoint: its default
        self._hdr[[_COUNT, _FRAMES]] = snapshot["header"]

    def _release_views(self) -> None:
        for name in ("_words", "_ids"):
            if name in self.__dict__:
                self.__dict__[name].close()
        self.cols = {}  # the transition columns' views: no columns once closed


def _attach_replay(
    name: str,
    capacity: int,
    obs_shape: tuple[int, ...],
    dtype: str,
    action_shape: tuple[int, ...],
    agent_id: dict[str, Any] | None = None,
    landing_states: bool = False,
) -> ReplayBuffer:
    """A `ReplayBuffer` attached by name in another process (what unpickling one does)."""
    from nonstop.policies.agentid import AgentId

    ids = None if agent_id is None else AgentId.from_dict(agent_id)
    return ReplayBuffer(
        name, capacity, obs_shape, dtype, action_shape=action_shape, agent_id=ids, landing_states=landing_states
    )


# ----------------------------------------------------------------------------- host side


class ReplayRecorder:
    """The host's hook that writes the semi-MDP into a `ReplayBuffer`.

    Keeps the last ``history`` observations by tick (an action with a longer delay
    has lost its observation: the decision is skipped and counted) and copies a
    frame into the replay the first time a transition refers to it.
    Picklable: a wall-clock host process receives it with the buffer's name.
    """

    def __init__(
        self,
        replay: ReplayBuffer,
        *,
        gamma: float,
        history: int = 4096,
        action_start: int = 0,
        tally: bool = True,
        agent: int = 0,
    ) -> None:
        if not isinstance(history, int) or history < 2:
            raise ValueError(f"history must be an integer >= 2 ticks, got {history!r}")
        self.replay, self.gamma, self.history = replay, float(gamma), history
        #: the action space's first action (``Discrete.start``): the replay stores Q-value indices from 0
        self.action_start = int(action_start)
        #: whether it counts the host's ticks and episodes into the replay's header (one seat of many
        #: leaves that to the recorder of all its seats, `nonstop.learning.seatreplay.SeatsRecorder`)
        self.tally = bool(tally)
        #: the seat index its transitions carry (`ReplayBuffer.add_transition`): which agent of a team it records
        self.agent = int(agent)
        #: how an applied agent action is stored: a Discrete index from 0, or a Box's float32 vector
        self._vector = bool(replay.action_shape)
        self._init()

    def _init(self) -> None:
        self.builder = SemiMDPBuilder(self.gamma)
        self._ring: np.ndarray | None = None
        self._ring_tick = np.full(self.history, -1, np.int64)
        self._stored: dict[int, int] = {}  # obs tick -> frame id, for ticks already copied this episode
        self._terminal_obs: np.ndarray | None = None
        self.skipped_old = 0
        self.transitions = 0
        self._return, self._length = 0.0, 0

    def __getstate__(self) -> dict:
        return {
            "replay": self.replay,
            "gamma": self.gamma,
            "history": self.history,
            "action_start": self.action_start,
            "tally": self.tally,
            "agent": self.agent,
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"agent": 0, **state})
        self._vector = bool(self.replay.action_shape)
        self._init()

    def on_observation(self, tick: int, obs: np.ndarray) -> None:
        """The observation published for ``tick`` (after any reset at that tick)."""
        if self._ring is None:
            self._ring = np.empty((self.history, *np.shape(obs)), self.replay.dtype)
        slot = tick % self.history
        self._ring[slot] = obs
        self._ring_tick[slot] = tick

    def on_tick(
        self,
        tick: int,
        *,
        agent: bool,
        action: Any,
        obs_tick: int,
        reward: float,
        terminated: bool,
        truncated: bool,
        terminal_obs: np.ndarray | None = None,
    ) -> None:
        """One host tick, before ``on_observation`` of the same tick."""
        if self.tally:
            self._return += reward
            self._length += 1
            self.replay.count_tick(agent, tick - obs_tick)
        if terminated or truncated:
            self._terminal_obs = terminal_obs
            if self.tally:
                self.replay.add_episode(tick, self._return, self._length)
            self._return, self._length = 0.0, 0
        done = self.builder.on_tick(
            tick,
            agent=agent,
            action=self._stored_action(action) if agent else 0,
            obs_tick=obs_tick,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
        )
        for tr in done:
            s = self._frame(tr.s_tick, tr.episode)
            nxt = self._frame(tr.next_tick, tr.episode)
            states = self._landing(tr, nxt) if self.replay.landing_states else (-1, -1)
            if s is None or nxt is None or states is None:
                self.skipped_old += 1
                continue
            self.replay.add_transition(s, tr.action, tr.reward, tr.discount, tr.n_ticks, nxt, self.agent, states)
            self.transitions += 1
        if terminated or truncated:
            self._stored.clear()
            self._terminal_obs = None
        elif len(self._stored) > 2 * self.history:
            lo = tick - self.history
            self._stored = {k: v for k, v in self._stored.items() if k >= lo}

    def _landing(self, tr: Transition, next_frame: int | None) -> tuple[int, int] | None:
        """The frames of the observations ``tr``'s action and the next decision's acted on (None: lost)."""
        if tr.state_tick < 0 or next_frame is None:
            return None
        state = self._frame(tr.state_tick, tr.episode)
        # a terminal frame is added each time it is asked for: the next decision's is the one just stored
        same = tr.next_state_tick == tr.next_tick
        next_state = next_frame if same else self._frame(tr.next_state_tick, tr.episode)
        return None if state is None or next_state is None else (state, next_state)

    def _stored_action(self, action: Any) -> Any:
        """The applied action as the replay stores it (a copy: the host may reuse its array)."""
        if self._vector:
            return np.array(action, np.float32).reshape(self.replay.action_shape)
        return int(action) - self.action_start

    def _frame(self, tick: int, episode: int) -> int | None:
        """The replay's frame of ``tick`` of ``episode`` (copied in the first time it is asked for)."""
        if tick == TERMINAL:
            return None if self._terminal_obs is None else self.replay.add_frame(self._terminal_obs)
        fid = self._stored.get(tick)
        if fid is None:
            slot = tick % self.history
            if self._ring is None or self._ring_tick[slot] != tick:
                return None
            fid = self._stored[tick] = self.replay.add_frame(self._ring[slot])
        return fid
