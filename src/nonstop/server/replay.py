"""Replays: a session re-simulated tick by tick and checked against its own hashes (docs/design.md §4).

A replay holds the session's seed and config, and per tick the action the host applied, its source
(agent or β), its delay and a CRC-32 of the observation the env returned. The env ids nonstop serves
are deterministic given a seed and the action sequence (ALE with no sticky actions, the Theorem 1
MDPs), so `verify` rebuilds the env from the header, resets it with the seed, applies every recorded
action in order (resetting where the session reset) and compares every observation hash: one
mismatch means the recording, the env or the host is not what it claims to be.

CRC-32 rather than a cryptographic hash: it costs ~25 µs on a 100 KB Atari frame against ~105 µs
for BLAKE2b, it is paid on every tick of every session, and it only has to detect divergence, not
resist forgery.

The file is a compressed ``.npz`` (no pickle) with a JSON header.

**Seats.** A several-seat world's session (`SeatReplayRecorder`) records every seat's applied
action each tick, side by side in one row of ``actions`` (seat by seat, in the order of the
header's ``seats``, each ``action_widths[i]`` numbers wide), and one CRC-32 chained over every
seat's observation; its columns keep each seat's source, delay, worker and reward (``seat{i}_…``
for seat ``i ≥ 1``, the first seat's unprefixed), and `verify` steps the world with every seat's
recorded action.

**Bounded while the session runs.** The recorder's columns live in `ReplayColumns`: on the server
they stream, a chunk of ``chunk_rows`` steps at a time, to append-only files beside the session's
tick log (``REPLAYS/ticklogs/<sid>/replay/``), so memory holds at most one chunk however long the
session runs, and what was flushed survives the death of the process that recorded it. The replay
file is written from those files (and the tick log's chunks) when the session ends, or, after a
tick worker or the server died, from what reached the disk (`Replay.recover`): the ticks up to the
last durable chunk, which still re-simulate exactly.

>>> import gymnasium as gym
>>> env = ReplayRecorder(gym.make("CartPole-v1"))
>>> _ = env.reset(seed=3)
>>> for a in (0, 1, 1):
...     _ = env.step(a)
>>> (len(env.step_hashes), list(env.actions), list(env.reset_steps))
(3, [0.0, 1.0, 1.0], [0])
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, SupportsFloat

import gymnasium as gym
import numpy as np

from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog, load_npz, save_npz_atomic

__all__ = [
    "obs_hash",
    "seats_obs_hash",
    "ReplayColumns",
    "ReplayRecorder",
    "SeatReplayRecorder",
    "Replay",
    "write_header",
    "VerifyResult",
    "verify",
    "plot_replay",
    "write_video",
]

FORMAT: Final = "nonstop.replay/1"
#: tick-log columns kept in a replay
LOG_COLUMNS: Final = ("tick", "source", "delay", "worker", "reward", "episode", "terminated", "truncated", "lateness")


#: the tick-log columns kept for each seat i >= 1 of a several-seat world, as ``seat{i}_<name>``
SEAT_LOG_COLUMNS: Final = ("source", "delay", "worker", "reward")


def obs_hash(obs: Any) -> int:
    """CRC-32 of an observation's raw bytes (dtype and shape are fixed per session)."""
    return zlib.crc32(np.ascontiguousarray(obs).data)


def seats_obs_hash(obs: dict[str, Any], seats: list[str]) -> int:
    """CRC-32 chained over every seat's observation, in seat order (a seat absent from ``obs``,
    one whose agent is done, adds nothing)."""
    h = 0
    for seat in seats:
        if seat in obs:
            h = zlib.crc32(np.ascontiguousarray(obs[seat]).data, h)
    return h


def seat_log_columns(seats: int) -> tuple[str, ...]:
    """The replay's columns of a tick log with ``seats`` seats: `LOG_COLUMNS` (the first seat's),
    then `SEAT_LOG_COLUMNS` of seats 1, 2, … as ``seat{i}_…``."""
    return LOG_COLUMNS + tuple(f"seat{i}_{c}" for i in range(1, int(seats)) for c in SEAT_LOG_COLUMNS)


def _width(space: gym.Space) -> int:
    return int(np.prod(space.shape)) if space.shape else 1


#: the four columns of a recording: name -> dtype (``actions`` has ``action_width`` numbers a step)
_STREAMS: Final = {"reset_steps": np.int64, "reset_hashes": np.uint32, "actions": np.float64, "step_hashes": np.uint32}
_HEADER: Final = "replay.json"  # the replay's header, written when the session starts (for `Replay.recover`)


class ReplayColumns:
    """A recording's columns (applied actions, step and reset hashes, reset steps), bounded in memory.

    Without ``directory`` every value stays in memory (``array`` buffers), and `take` hands over and
    forgets what was added since its last call (a tick worker sending its record to the server).
    With ``directory``, every ``chunk_rows`` steps the buffers are appended to one file per column
    (``reset_steps.i8``, ``reset_hashes.u4``, ``actions.f8``, ``step_hashes.u4``: raw little-endian
    values, no header) and cleared: memory holds at most one chunk's steps (`held_steps`) and the
    resets among them (a world resets at most once a tick). The resets are written before the steps
    of the same chunk, so whatever ends the process mid-flush, every reset up to the last whole
    step on disk is on disk too: `read` keeps the steps all files agree on and the resets among
    them. A write goes to the page cache in the appending thread (~64 KB per 8192 steps, tens of
    µs; no fsync on the tick path): it survives the death of the process, not a power cut.

    >>> import tempfile
    >>> cols = ReplayColumns(directory=Path(tempfile.mkdtemp()) / "replay", chunk_rows=4)
    >>> cols.add_reset(11)
    >>> for i in range(10):
    ...     cols.add_step(float(i % 3), 100 + i)
    >>> (cols.steps, cols.held_steps, sorted(p.name for p in cols.directory.iterdir()))
    (10, 2, ['action_width', 'actions.f8', 'reset_hashes.u4', 'reset_steps.i8', 'step_hashes.u4'])
    >>> ReplayColumns.read_directory(cols.directory)["step_hashes"].tolist()  # the durable chunks only
    [100, 101, 102, 103, 104, 105, 106, 107]
    """

    def __init__(
        self, action_width: int = 1, *, directory: str | os.PathLike | None = None, chunk_rows: int = 8192
    ) -> None:
        if not isinstance(action_width, int) or isinstance(action_width, bool) or action_width < 1:
            raise ValueError(f"action_width must be a positive integer, got {action_width!r}")
        if not isinstance(chunk_rows, int) or isinstance(chunk_rows, bool) or chunk_rows < 1:
            raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
        self.action_width, self.chunk_rows = action_width, chunk_rows
        self.directory = Path(directory) if directory is not None else None
        self.actions, self.step_hashes = array("d"), array("I")
        self.reset_steps, self.reset_hashes = array("q"), array("I")
        self.flushed_steps = self.flushed_resets = 0  # already in the files (or taken)
        self.max_held = 0  # the most steps held in memory at once
        self.error: OSError | None = None  # a write that failed (a full disk): the rows stay in memory
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / "action_width").write_text(str(action_width))

    @property
    def steps(self) -> int:
        """Steps recorded in all (in the files, taken, and held)."""
        return self.flushed_steps + len(self.step_hashes)

    @property
    def resets(self) -> int:
        return self.flushed_resets + len(self.reset_steps)

    @property
    def held_steps(self) -> int:
        """Steps held in memory now (at most ``chunk_rows`` with a directory)."""
        return len(self.step_hashes)

    # ---- writing
    def add_step(self, action: Any, obs_hash_: int) -> None:
        if self.action_width == 1:
            self.actions.append(float(action))
        else:
            self.actions.extend(np.asarray(action, dtype=np.float64).ravel().tolist())
        self.step_hashes.append(obs_hash_)
        self._held()

    def add_reset(self, obs_hash_: int) -> None:
        self.reset_steps.append(self.steps)
        self.reset_hashes.append(obs_hash_)

    def extend(self, delta: dict[str, Any]) -> None:
        """Append what another recorder's `take` gave (a tick worker's delta), a chunk at a time."""
        for step, h in zip(delta["reset_steps"], delta["reset_hashes"]):
            if step < self.steps:
                raise ValueError(f"a reset at step {step} arrived after step {self.steps}: deltas out of order")
            self.reset_steps.append(int(step))
            self.reset_hashes.append(int(h))
        width, actions, hashes = self.action_width, delta["actions"], delta["step_hashes"]
        i = 0
        while i < len(hashes):  # never more than a chunk held: flush at each chunk's end
            room = self.chunk_rows - len(self.step_hashes)  # <= 0 only once a write failed (kept in memory)
            j = min(len(hashes), i + room) if room > 0 else len(hashes)
            self.actions.extend(actions[i * width : j * width])
            self.step_hashes.extend(hashes[i:j])
            self._held()
            i = j

    def _held(self) -> None:
        n = len(self.step_hashes)
        if n > self.max_held:
            self.max_held = n
        if self.directory is not None and n >= self.chunk_rows and self.error is None:
            self.flush()

    def flush(self) -> None:
        """Append what is held to the files (resets first) and forget it. A failed write (a full
        disk) keeps the rows in memory, says so once (``error``), and stops flushing."""
        if self.directory is None or not (self.step_hashes or self.reset_steps):
            return
        try:
            for name in _STREAMS:
                values = getattr(self, name)
                if values:
                    with open(self.directory / _file(name), "ab") as f:
                        f.write(np.asarray(values, dtype=np.dtype(_STREAMS[name]).newbyteorder("<")).tobytes())
        except OSError as exc:
            self.error = exc
            return
        self.flushed_steps += len(self.step_hashes)
        self.flushed_resets += len(self.reset_steps)
        for name in _STREAMS:
            del getattr(self, name)[:]

    def take(self) -> dict[str, Any]:
        """What was added since the last `take` (copies), forgotten here: memory-only recorders."""
        if self.directory is not None:
            raise RuntimeError("take() is for in-memory recordings; this one streams to its directory")
        out = {"action_width": self.action_width, **{name: getattr(self, name)[:] for name in _STREAMS}}
        self.flushed_steps += len(self.step_hashes)
        self.flushed_resets += len(self.reset_steps)
        for name in _STREAMS:
            del getattr(self, name)[:]
        return out

    # ---- reading
    def read(self, steps: int | None = None) -> dict[str, np.ndarray]:
        """Every column, whole (files then memory), cut to the first ``steps`` steps and the resets
        among them. For writing the replay file at the session's end (a transient copy)."""
        if self.directory is not None:
            disk, _ = _read_files(self.directory)
            if len(disk["step_hashes"]) < self.flushed_steps or len(disk["reset_steps"]) < self.flushed_resets:
                raise ValueError(
                    f"replay columns in {self.directory} hold {len(disk['step_hashes'])} steps, "
                    f"{self.flushed_steps} were written"
                )
            # past what was flushed whole lies at most a failed write's part (a full disk): its rows are still held
            limits = {
                "actions": self.flushed_steps * self.action_width,
                "step_hashes": self.flushed_steps,
                "reset_steps": self.flushed_resets,
                "reset_hashes": self.flushed_resets,
            }
            disk = {name: disk[name][: limits[name]] for name in _STREAMS}
        elif self.flushed_steps:
            raise ValueError("this recording was handed over by take(): read it where it was taken to")
        else:
            disk = {name: np.zeros(0, dt) for name, dt in _STREAMS.items()}
        cols = {
            name: np.concatenate([disk[name], np.asarray(getattr(self, name), dtype=dt)])
            for name, dt in _STREAMS.items()
        }
        return _cut(cols, self.action_width, steps)

    @staticmethod
    def read_directory(directory: str | os.PathLike) -> dict[str, Any]:
        """The columns a recording left in ``directory`` (a live one, or one whose process died):
        the steps every column has, and the resets among them."""
        cols, width = _read_files(Path(directory))
        return _cut(cols, width, None)


def _read_files(directory: Path) -> tuple[dict[str, np.ndarray], int]:
    """The raw columns in ``directory`` (whole values only: a torn last write is cut off) and the width."""
    try:
        width = int((directory / "action_width").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"no replay recording in {directory}: {exc}") from exc
    cols = {}
    for name, dt in _STREAMS.items():
        path = directory / _file(name)
        raw = path.read_bytes() if path.exists() else b""
        item = np.dtype(dt).itemsize
        cols[name] = np.frombuffer(raw[: len(raw) // item * item], np.dtype(dt).newbyteorder("<")).astype(dt)
    return cols, width


def _file(name: str) -> str:
    return f"{name}.{np.dtype(_STREAMS[name]).kind}{np.dtype(_STREAMS[name]).itemsize}"


def _cut(cols: dict[str, np.ndarray], width: int, steps: int | None) -> dict[str, Any]:
    """Keep the steps all step columns have (at most ``steps``) and the resets among them.
    ``actions`` may be flat or already one row per step (a second cut): counted in numbers."""
    actions = np.asarray(cols["actions"]).reshape(-1)
    n = min(len(actions) // width, len(cols["step_hashes"]))
    if steps is not None:
        n = min(n, steps)
    r = min(len(cols["reset_steps"]), len(cols["reset_hashes"]))
    keep = int(np.searchsorted(cols["reset_steps"][:r], n, side="right"))
    return {
        "actions": actions[: n * width].reshape(n, width),
        "step_hashes": cols["step_hashes"][:n],
        "reset_steps": cols["reset_steps"][:keep],
        "reset_hashes": cols["reset_hashes"][:keep],
        "action_width": width,
    }


class ReplayRecorder(gym.Wrapper):
    """Wraps the session's env; records every applied action and every observation's hash.

    Owned by the session's host: only the thread ticking the host calls ``step``/``reset``. The
    hash of step ``i`` (1-based, one step per tick) is ``step_hashes[i-1]``; ``reset_steps[j]`` is
    how many steps had happened when reset ``j`` occurred, with ``reset_hashes[j]`` its hash.
    ``directory``/``chunk_rows``: stream the columns there (`ReplayColumns`), so memory stays
    bounded; without it they stay in memory (the arrays below are then the whole recording).
    """

    def __init__(self, env: gym.Env, *, directory: str | os.PathLike | None = None, chunk_rows: int = 8192) -> None:
        super().__init__(env)
        self.action_width = int(np.prod(env.action_space.shape)) if env.action_space.shape else 1
        self.columns = ReplayColumns(self.action_width, directory=directory, chunk_rows=chunk_rows)

    # the columns held in memory (all of them for an in-memory recording)
    actions = property(lambda self: self.columns.actions)
    step_hashes = property(lambda self: self.columns.step_hashes)
    reset_steps = property(lambda self: self.columns.reset_steps)
    reset_hashes = property(lambda self: self.columns.reset_hashes)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.columns.add_reset(obs_hash(obs))
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.action_width == 1:
            action = np.asarray(action).reshape(-1)[0]
        self.columns.add_step(action, obs_hash(obs))
        return obs, reward, terminated, truncated, info


class SeatReplayRecorder:
    """`ReplayRecorder` for a several-seat world (PettingZoo's parallel API): wraps its ``reset`` and
    ``step`` (everything else passes through to the env) and records, per step, every seat's
    applied action side by side (``action_widths`` numbers per seat, in ``seats`` order; a seat
    given no action: NaN) and one hash over every seat's observation (`seats_obs_hash`).

    >>> from nonstop.envs import make_env
    >>> env = SeatReplayRecorder(make_env("multi/duel"))
    >>> _ = env.reset(seed=0)
    >>> _ = env.step({"first_0": 1, "second_0": 0})
    >>> env.seats, env.action_widths, env.columns.actions.tolist()
    (['first_0', 'second_0'], [1, 1], [1.0, 0.0])
    """

    def __init__(self, env: Any, *, directory: str | os.PathLike | None = None, chunk_rows: int = 8192) -> None:
        self.env = env
        self.seats = [str(a) for a in env.possible_agents]
        spaces = [env.action_space(seat) for seat in self.seats]
        self.action_widths = [_width(space) for space in spaces]
        self._scalar = [not space.shape for space in spaces]
        self.columns = ReplayColumns(sum(self.action_widths), directory=directory, chunk_rows=chunk_rows)

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not yet set (a half-built object): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.columns.add_reset(seats_obs_hash(obs, self.seats))
        return obs, info

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        row: list[float] = []
        for seat, width, scalar in zip(self.seats, self.action_widths, self._scalar):
            a = actions.get(seat)
            if a is None:
                row.extend([float("nan")] * width)
            elif scalar:
                row.append(float(np.asarray(a).reshape(-1)[0]))
            else:
                row.extend(np.asarray(a, dtype=np.float64).ravel().tolist())
        self.columns.add_step(row[0] if len(row) == 1 else row, seats_obs_hash(obs, self.seats))
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        self.env.close()


@dataclass
class Replay:
    """A recorded session: ``header`` (env, env_kwargs, seed, tick_hz, β, ...) and columns."""

    header: dict[str, Any]
    columns: dict[str, np.ndarray]
    actions: np.ndarray
    step_hashes: np.ndarray
    reset_steps: np.ndarray
    reset_hashes: np.ndarray

    @classmethod
    def from_session(
        cls, recorder: "ReplayRecorder | SeatReplayRecorder | ReplayColumns", log: TickLog, header: dict[str, Any]
    ) -> "Replay":
        """The replay of a session from its recording (a `ReplayRecorder`, `SeatReplayRecorder` or
        their `ReplayColumns`) and tick log: the ticks both have (equal unless the env raised
        mid-tick or a writer died)."""
        columns = recorder if isinstance(recorder, ReplayColumns) else recorder.columns
        return cls._build(columns.read(len(log)), log, header)

    @classmethod
    def recover(cls, directory: str | os.PathLike) -> "Replay":
        """The replay of a session whose recording process died, from what reached the disk in
        its tick-log ``directory``: the tick log's chunks, the replay columns' files and the header
        written at its start. Marked ``complete: false``; it re-simulates up to its last durable chunk."""
        import json

        directory = Path(directory)
        try:
            header = json.loads((directory / _HEADER).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot recover a replay from {directory}: no readable {_HEADER} ({exc})") from exc
        log = TickLog.open(directory)
        cols = ReplayColumns.read_directory(directory / "replay")
        n = min(len(log), len(cols["step_hashes"]))
        cols = _cut(cols, cols["action_width"], n)
        return cls._build(cols, log, {**header, "complete": False, "recovered": True})

    @classmethod
    def _build(cls, cols: dict[str, Any], log: TickLog, header: dict[str, Any]) -> "Replay":
        n = len(cols["step_hashes"])
        return cls(
            header={"format": FORMAT, "ticks": n, "action_width": cols["action_width"], **header},
            columns={name: log[name][:n] for name in seat_log_columns(getattr(log, "seats", 1))},
            actions=cols["actions"],
            step_hashes=cols["step_hashes"],
            reset_steps=cols["reset_steps"],
            reset_hashes=cols["reset_hashes"],
        )

    @property
    def ticks(self) -> int:
        return int(self.header["ticks"])

    @property
    def seats(self) -> list[str] | None:
        """The seats' names of a several-seat world's replay, None for a one-seat world."""
        seats = self.header.get("seats")
        return [str(s) for s in seats] if isinstance(seats, list) else None

    def _seat_summary(self, prefix: str) -> dict[str, Any]:
        source, delay = self.columns[prefix + "source"], self.columns[prefix + "delay"]
        agent = delay[source == SOURCE_AGENT]
        return {
            "agent_ticks": int((source == SOURCE_AGENT).sum()),
            "inaction_ticks": int((source != SOURCE_AGENT).sum()),
            "return": float(self.columns[prefix + "reward"].sum()),
            "mean_delay_ticks": float(agent.mean()) if agent.size else None,
        }

    def summary(self) -> dict[str, Any]:
        """Counts over the replay; the top-level ones are the first seat's, and a several-seat
        replay adds ``seats``: each seat's agent and inaction ticks, return and mean delay."""
        out = {"ticks": self.ticks, "episodes": len(self.reset_steps), **self._seat_summary("")}
        out = {k: out[k] for k in ("ticks", "agent_ticks", "inaction_ticks", "episodes", "return", "mean_delay_ticks")}
        seats = self.seats
        if seats is not None:
            out["seats"] = {seat: self._seat_summary("" if i == 0 else f"seat{i}_") for i, seat in enumerate(seats)}
        return out

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (a crash never leaves half a replay)."""
        arrays = {
            "actions": self.actions,
            "step_hashes": self.step_hashes,
            "reset_steps": self.reset_steps,
            "reset_hashes": self.reset_hashes,
            **{f"col_{k}": v for k, v in self.columns.items()},
        }
        return save_npz_atomic(Path(path), self.header, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Replay":
        header, data = load_npz(path, FORMAT, "replay")
        seats = header.get("seats")
        try:
            return cls(
                header=header,
                columns={k: data[f"col_{k}"] for k in seat_log_columns(len(seats) if isinstance(seats, list) else 1)},
                actions=data["actions"],
                step_hashes=data["step_hashes"],
                reset_steps=data["reset_steps"],
                reset_hashes=data["reset_hashes"],
            )
        except KeyError as exc:
            raise ValueError(f"cannot read replay {path}: it lacks {exc}") from exc


def write_header(directory: str | os.PathLike, header: dict[str, Any]) -> None:
    """Record a session's replay header in its tick-log ``directory`` when it starts, so that
    `Replay.recover` can finalise its replay if the process recording it dies."""
    from nonstop.realtime.tickfiles import write_json_atomic

    write_json_atomic(Path(directory) / _HEADER, header)


# ----------------------------------------------------------------------------- re-simulation


def _as_action(row: np.ndarray, space: gym.Space) -> Any:
    if isinstance(space, gym.spaces.Discrete):
        return int(row[0])
    return row.astype(space.dtype).reshape(space.shape)


def _action(replay: Replay, env: Any, i: int) -> Any:
    row = replay.actions[i]
    seats = replay.seats
    if seats is None:
        return _as_action(row, env.action_space)
    widths = replay.header.get("action_widths") or [1] * len(seats)
    actions, at = {}, 0
    for seat, width in zip(seats, widths):
        part = row[at : at + width]
        at += width
        if not np.isnan(part).any():  # NaN: that seat was given no action
            actions[seat] = _as_action(part, env.action_space(seat))
    return actions


def replay_hash(replay: Replay, obs: Any) -> int:
    """The hash `verify` compares: `obs_hash`, or `seats_obs_hash` for a several-seat replay."""
    seats = replay.seats
    return obs_hash(obs) if seats is None else seats_obs_hash(obs, seats)


def resimulate(replay: Replay) -> Iterator[tuple[int, Any, str]]:
    """Yield ``(step, obs, kind)`` for the replay's reset 0, then every step and reset, in order.
    ``kind`` is ``"reset"`` or ``"step"``; ``step`` counts env steps (== ticks)."""
    from nonstop.envs import make_env

    env = make_env(replay.header["env"], **replay.header.get("env_kwargs", {}))
    try:
        resets = list(replay.reset_steps)
        r = 0
        obs, _ = env.reset(seed=replay.header.get("seed"))
        if replay.header.get("warm_reset"):  # a warm env: reset with its seed ahead of the session
            obs, _ = env.reset()
        yield 0, obs, "reset"
        r = 1
        for i in range(replay.ticks):
            obs, *_ = env.step(_action(replay, env, i))
            yield i + 1, obs, "step"
            if r < len(resets) and resets[r] == i + 1:
                obs, _ = env.reset()
                yield i + 1, obs, "reset"
                r += 1
    finally:
        env.close()


@dataclass
class VerifyResult:
    """What `verify` found. ``ok`` is true when every hash matched."""

    ticks: int
    checked: int
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.checked > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "ticks": self.ticks,
            "checked": self.checked,
            "mismatches": self.mismatches[:20],
            "n_mismatches": len(self.mismatches),
        }


def verify(replay: Replay, *, max_mismatches: int = 100) -> VerifyResult:
    """Re-simulate ``replay`` and compare every observation hash (every step and every reset)."""
    result = VerifyResult(ticks=replay.ticks, checked=0)
    r = 0
    for step, obs, kind in resimulate(replay):
        if kind == "reset":
            expected = int(replay.reset_hashes[r])
            r += 1
        else:
            expected = int(replay.step_hashes[step - 1])
        got = replay_hash(replay, obs)
        result.checked += 1
        if got != expected:
            result.mismatches.append({"tick": step, "kind": kind, "expected": expected, "got": got})
            if len(result.mismatches) >= max_mismatches:
                break
    return result


# ----------------------------------------------------------------------------- views


def plot_replay(replay: Replay, out: str | os.PathLike) -> Path:
    """Timeline: which ticks the agent acted (vs β), the delay of each agent action, the return."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = replay.columns
    tick, source, delay = cols["tick"], cols["source"], cols["delay"]
    agent = source == SOURCE_AGENT
    fig, axes = plt.subplots(3, 1, figsize=(10, 6), sharex=True, constrained_layout=True)
    axes[0].eventplot([tick[agent], tick[~agent]], lineoffsets=[1, 0], linelengths=0.8, colors=["tab:blue", "tab:red"])
    axes[0].set_yticks([0, 1], ["β (inaction)", "agent"])
    axes[0].set_title(
        f"{replay.header.get('env')} · session {replay.header.get('session_id', '?')} · "
        f"{int(agent.sum())}/{len(tick)} agent ticks"
    )
    axes[1].plot(tick[agent], delay[agent], ".", ms=3)
    axes[1].set_ylabel("delay (ticks)")
    axes[2].plot(tick, np.cumsum(cols["reward"]))
    axes[2].set_ylabel("return")
    axes[2].set_xlabel("tick")
    for end in tick[(cols["terminated"] | cols["truncated"]).astype(bool)]:
        for ax in axes:
            ax.axvline(end, color="grey", lw=0.5, ls="--")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _frame(obs: np.ndarray) -> np.ndarray:
    arr = np.asarray(obs)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[-1] not in (3, 4)) or min(arr.shape[:2]) < 8:
        raise ValueError(
            f"replay video needs image observations (H×W or H×W×3), this env's are {arr.shape}: "
            "use `nonstop replay plot` for it instead"
        )
    if arr.dtype != np.uint8:
        lo, hi = float(arr.min()), float(arr.max())
        arr = ((arr - lo) / (hi - lo or 1.0) * 255).astype(np.uint8)
    return arr


def write_video(replay: Replay, out: str | os.PathLike, *, every: int = 2, max_frames: int = 3000) -> Path:
    """Re-simulate and write every ``every``-th frame to ``out``: a ``.gif`` (Pillow), or an
    ``.mp4`` through imageio with ffmpeg when that optional package is installed."""
    if every < 1:
        raise ValueError(f"every must be a positive number of ticks, got {every!r}")
    out = Path(out)
    frames: list[Any] = []  # uint8 frames (imageio's mimsave takes a list of array-likes; a list is invariant)
    seats = replay.seats
    for step, obs, kind in resimulate(replay):
        if seats is not None:  # a several-seat world: the first seat's view
            obs = obs[seats[0]]
        if kind == "step" and step % every == 0:
            frames.append(_frame(obs))
            if len(frames) >= max_frames:
                break
    if not frames:
        raise ValueError("the replay has no ticks to draw")
    fps = float(replay.header.get("tick_hz", 60.0)) / every
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".gif":  # Pillow comes with matplotlib: GIFs need nothing optional
        from PIL import Image

        images = [Image.fromarray(frame) for frame in frames]
        images[0].save(out, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
        return out
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ValueError(
            f"writing {out.suffix} needs imageio (pip install imageio[ffmpeg]); .gif works without it"
        ) from None
    imageio.mimsave(out, frames, fps=fps)
    return out
