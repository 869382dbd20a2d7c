"""The live page's seats feed: every seat of a session, packed, pushed at a bounded rate and size.

``/ws/seats/{session_id}`` is a read-only socket beside the spectator's ``/ws/watch/{session_id}``
(`nonstop.server.live`); the page opens one per several-seat view. It sends one text message, then
binary updates, and reads nothing but the close:

* ``hello`` (JSON, once): ``{"type": "hello", "session_id", "env", "seats": [names], "teams":
  [names], "team": [each seat's index in teams], "max_hz", "max_bytes_per_s"}``;
* an **update** (binary, little-endian): a ``u32`` header length; the header (JSON: ``update``
  (its number), ``tick``, ``seats`` N, ``teams`` (each team's row, `team_rows`, at most
  `MAX_TEAM_ROWS`), ``teams_more``, ``max_delay``, ``positions`` (bool), ``frame`` (``{"shape",
  "bytes"}`` or null)); zero bytes up to a multiple of 4; then N ``float32`` returns, N ``uint8``
  inaction fractions since the previous update (``round(254·f)``; 255: no tick yet), N ``uint8``
  last delays (ticks, 254 for 254 or more; 255: none), N ``uint8`` flags (`ALIVE`, `HELD`,
  `PLACED`), with ``positions`` 2N ``uint8`` (row, col in the frame's pixels), and with a
  ``frame`` its uint8 pixels deflated by zlib (``bytes`` long).

A seat costs 9 bytes an update (1,058 seats: 9.5 KB), the frame a few hundred once deflated (a
battle map is a few flat colours). **Bounded by construction**: after a message of s bytes the
next waits max(1 / `MAX_FEED_HZ`, s / `MAX_FEED_BYTES_PER_S`) (`FeedPacer`), so over any T seconds
a socket carries at most ``MAX_FEED_BYTES_PER_S · T`` bytes plus one message, and a session has at
most `MAX_SEAT_FEEDS` such sockets. A world too big for the rate gets fewer updates, never more
bytes. The sockets of one session share one reading of its seats (`SnapshotCache`), taken at
most `MAX_FEED_HZ` times a second off the event loop.

>>> snap = SeatsSnapshot.of_rows(
...     [{"seat": "red_0", "held": True, "agent_ticks": 1, "inaction_ticks": 1, "last_delay": 2, "total_reward": 1.5},
...      {"seat": "blue_0", "held": False, "agent_ticks": 0, "inaction_ticks": 4, "last_delay": -1,
...       "total_reward": 0.0}], {"frame": None, "positions": {"red_0": [0, 1]}}, tick=4)
>>> seen = unpack_update(pack_update(snap, None, 1))
>>> seen["header"]["seats"], seen["inaction"], seen["delay"], seen["flags"]
(2, [0.5, 1.0], [2, None], [7, 4])
>>> [round(r, 2) for r in seen["returns"]], seen["positions"]  # positions travel with a frame only
([1.5, 0.0], None)
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import struct
import threading
import zlib
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from fastapi import WebSocket, WebSocketDisconnect

from nonstop.envs.seats import team_names, team_of
from nonstop.server.liveworld import team_rows
from nonstop.server.protocol import ErrorCode, ProtocolError
from nonstop.server.sessions import Lifecycle

if TYPE_CHECKING:
    from nonstop.server.session import ServerSession

__all__ = [
    "ALIVE",
    "HELD",
    "MAX_FEED_BYTES_PER_S",
    "MAX_FEED_HZ",
    "MAX_SEAT_FEEDS",
    "MAX_TEAM_ROWS",
    "PLACED",
    "FeedPacer",
    "SeatsSnapshot",
    "SnapshotCache",
    "hello",
    "pack_update",
    "serve_seats",
    "unpack_update",
]

#: updates a second a socket gets at most
MAX_FEED_HZ: Final = 4.0
#: bytes a second a socket carries at most (over any window, plus one message)
MAX_FEED_BYTES_PER_S: Final = 64 * 1024
#: seats-feed sockets per session (beside its spectator sockets)
MAX_SEAT_FEEDS: Final = 8
#: team rows in an update's header (a world of one-seat teams would otherwise send a row per seat)
MAX_TEAM_ROWS: Final = 16
#: a seat's flags: the world still places it, a client holds it, the world places its seats at all
ALIVE: Final = 1
HELD: Final = 2
PLACED: Final = 4
#: the uint8 that says "none" (no tick yet, no delay)
NONE_U8: Final = 255
_LENGTH: Final = struct.Struct("<I")


@dataclasses.dataclass(frozen=True)
class SeatsSnapshot:
    """Every seat of a session at one moment, as arrays indexed by seat (``delay`` -1: none;
    ``alive`` and ``positions`` None when the world places no seats; ``positions`` -1 where a seat
    is gone), each team's row, and the world's frame (a uint8 image, or None)."""

    tick: int | None
    agent: np.ndarray
    inaction: np.ndarray
    delay: np.ndarray
    returns: np.ndarray
    held: np.ndarray
    alive: np.ndarray | None
    positions: np.ndarray | None
    teams: list[dict[str, Any]]
    frame: np.ndarray | None

    @classmethod
    def of_rows(cls, rows: list[dict[str, Any]], world: dict[str, Any] | None, tick: int | None) -> SeatsSnapshot:
        """From `ServerSession.seat_rows` and `ServerSession.world_view` (None: no picture now)."""
        world = world or {"frame": None, "positions": None}
        placed = world["positions"]
        alive = positions = None
        if placed is not None:
            spots = [placed.get(row["seat"]) for row in rows]
            alive = np.array([spot is not None for spot in spots], bool)
            positions = np.array([spot if spot is not None else (-1, -1) for spot in spots], np.int64).reshape(-1, 2)
        frame = None
        if world["frame"] is not None:
            shape = world["frame"]["shape"]
            frame = np.frombuffer(base64.b64decode(world["frame"]["b64"]), np.uint8).reshape(shape)
        delays = [row.get("last_delay") for row in rows]
        return cls(
            tick=tick,
            agent=np.array([row["agent_ticks"] for row in rows], np.int64),
            inaction=np.array([row["inaction_ticks"] for row in rows], np.int64),
            delay=np.array([-1 if d is None or d < 0 else d for d in delays], np.int64),
            returns=np.array([row.get("total_reward") or 0.0 for row in rows], np.float32),
            held=np.array([bool(row.get("held")) for row in rows], bool),
            alive=alive,
            positions=positions,
            teams=team_rows(rows, None if alive is None else {r["seat"]: bool(a) for r, a in zip(rows, alive)}),
            frame=frame,
        )

    def carried(self, before: SeatsSnapshot | None) -> SeatsSnapshot:
        """This reading with each seat that read as no ticks at all (its slot busy past the
        server's read patience: `ServerSession.seat_rows` then says zeros) given its counters,
        delay and return from ``before``, when ``before`` had them: a seat's counters never fall.

        >>> rows = [{"seat": "a_0", "agent_ticks": 2, "inaction_ticks": 1, "last_delay": 1, "total_reward": 1.0}]
        >>> before = SeatsSnapshot.of_rows(rows, None, tick=3)
        >>> missed = SeatsSnapshot.of_rows([{"seat": "a_0", "agent_ticks": 0, "inaction_ticks": 0}], None, tick=4)
        >>> missed.carried(before).agent.tolist(), missed.carried(before).tick
        ([2], 4)
        """
        if before is None or len(before.agent) != len(self.agent):
            return self
        missed = (self.agent + self.inaction == 0) & (before.agent + before.inaction > 0)
        if not missed.any():
            return self
        keep = {
            name: np.where(missed, getattr(before, name), getattr(self, name))
            for name in ("agent", "inaction", "delay", "returns")
        }
        return dataclasses.replace(self, **keep)

    @classmethod
    def of_session(cls, session: ServerSession) -> SeatsSnapshot:
        running = session.state is Lifecycle.RUNNING
        return cls.of_rows(session.seat_rows(), session.world_view(), session.tick if running else None)


def hello(session: ServerSession) -> dict[str, Any]:
    """The feed's first message: the seats' names and teams, and the feed's bounds."""
    seats = list(session.seat_names)
    teams = team_names(seats)
    index = {team: i for i, team in enumerate(teams)}
    return {
        "type": "hello",
        "session_id": session.sid,
        "env": session.spec.env_id,
        "seats": seats,
        "teams": teams,
        "team": [index[team_of(s)] for s in seats],
        "max_hz": MAX_FEED_HZ,
        "max_bytes_per_s": MAX_FEED_BYTES_PER_S,
    }


def pack_update(snap: SeatsSnapshot, prev: SeatsSnapshot | None, update: int) -> bytes:
    """One update (the module docstring's layout); inaction is since ``prev`` (the whole run's
    before a first ``prev``, or for a seat with no tick since)."""
    agent, idle = snap.agent, snap.inaction
    if prev is not None and len(prev.agent) == len(agent):
        agent, idle = agent - prev.agent, idle - prev.inaction
    ticks = agent + idle
    whole = snap.agent + snap.inaction
    fraction = np.divide(idle, ticks, out=np.zeros(len(ticks)), where=ticks > 0)
    fraction = np.where(ticks > 0, fraction, np.divide(snap.inaction, whole, out=np.zeros(len(whole)), where=whole > 0))
    inaction = np.where((ticks > 0) | (whole > 0), np.rint(fraction * 254), NONE_U8).astype(np.uint8)
    delay = np.where(snap.delay < 0, NONE_U8, np.minimum(snap.delay, 254)).astype(np.uint8)
    flags = np.where(snap.held, HELD, 0)
    if snap.alive is not None:
        flags = flags | PLACED | np.where(snap.alive, ALIVE, 0)
    else:
        flags = flags | ALIVE
    deflated = b"" if snap.frame is None else zlib.compress(snap.frame.tobytes(), 6)
    header = {
        "update": update,
        "tick": snap.tick,
        "seats": len(snap.agent),
        "teams": snap.teams[:MAX_TEAM_ROWS],
        "teams_more": max(0, len(snap.teams) - MAX_TEAM_ROWS),
        "max_delay": int(snap.delay.max(initial=0)),
        "positions": snap.positions is not None and snap.frame is not None,
        "frame": None if snap.frame is None else {"shape": list(snap.frame.shape), "bytes": len(deflated)},
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    parts = [_LENGTH.pack(len(head)), head, b"\0" * (-(len(head) + _LENGTH.size) % 4)]
    parts += [
        snap.returns.astype("<f4").tobytes(),
        inaction.tobytes(),
        delay.tobytes(),
        flags.astype(np.uint8).tobytes(),
    ]
    if header["positions"]:
        assert snap.positions is not None  # checked just above
        parts.append(np.clip(snap.positions, 0, 255).astype(np.uint8).tobytes())
    parts.append(deflated)
    return b"".join(parts)


def unpack_update(data: bytes) -> dict[str, Any]:
    """An update as Python values (the page reads it the same way): ``header``, ``returns``,
    ``inaction`` (fractions; None: no tick yet), ``delay`` (None: none), ``flags``, ``positions``
    ((row, col), None for a seat not placed; None without positions) and ``frame`` (an image or None)."""
    (length,) = _LENGTH.unpack_from(data)
    header = json.loads(data[_LENGTH.size : _LENGTH.size + length])
    at = _LENGTH.size + length
    at += -at % 4
    n = header["seats"]
    returns = np.frombuffer(data, "<f4", n, at)
    at += 4 * n
    inaction, delay, flags = (np.frombuffer(data, np.uint8, n, at + k * n) for k in range(3))
    at += 3 * n
    positions = None
    if header["positions"]:
        spots = np.frombuffer(data, np.uint8, 2 * n, at).reshape(n, 2)
        at += 2 * n
        positions = [(int(r), int(c)) if f & ALIVE else None for (r, c), f in zip(spots, flags)]
    frame = None
    if header["frame"] is not None:
        pixels = zlib.decompress(data[at : at + header["frame"]["bytes"]])
        frame = np.frombuffer(pixels, np.uint8).reshape(header["frame"]["shape"])
    return {
        "header": header,
        "returns": [float(r) for r in returns],
        "inaction": [None if v == NONE_U8 else round(int(v) / 254, 3) for v in inaction],
        "delay": [None if v == NONE_U8 else int(v) for v in delay],
        "flags": [int(f) for f in flags],
        "positions": positions,
        "frame": frame,
    }


class FeedPacer:
    """When a socket's next message may go: after ``size`` bytes sent at ``sent_at`` (seconds),
    at ``sent_at + max(1 / max_hz, size / max_bytes_per_s)``. Over any window of T seconds the
    messages so paced carry at most ``max_bytes_per_s · T`` bytes plus the last one.

    >>> pacer = FeedPacer(max_hz=4.0, max_bytes_per_s=1000)
    >>> pacer.after(10.0, 100), pacer.after(10.0, 2000)
    (10.25, 12.0)
    """

    def __init__(self, max_hz: float = MAX_FEED_HZ, max_bytes_per_s: float = MAX_FEED_BYTES_PER_S) -> None:
        if not max_hz > 0 or not max_bytes_per_s > 0:
            raise ValueError(f"max_hz and max_bytes_per_s must be positive, got {max_hz!r} and {max_bytes_per_s!r}")
        self.max_hz, self.max_bytes_per_s = float(max_hz), float(max_bytes_per_s)

    def after(self, sent_at: float, size: int) -> float:
        return sent_at + max(1.0 / self.max_hz, size / self.max_bytes_per_s)


class SnapshotCache:
    """One reading of a session's seats shared by its feed sockets: a reading younger than
    ``max_age`` seconds is reused (so a session is read at most 1 / ``max_age`` times a second,
    however many watch it). Called from worker threads: it locks."""

    def __init__(self, max_age: float = 0.9 / MAX_FEED_HZ) -> None:
        self.max_age = max_age
        self._taken: dict[str, tuple[float, SeatsSnapshot]] = {}
        self._lock = threading.Lock()

    def take(self, session: ServerSession, now: float, after: SeatsSnapshot | None = None) -> SeatsSnapshot:
        """A reading of ``session``'s seats taken at ``now`` or less than ``max_age`` before it, and
        never ``after`` itself (the reading a socket already sent: inaction is since it)."""
        with self._lock:
            taken = self._taken.get(session.sid)
            if taken is not None and now - taken[0] < self.max_age and taken[1] is not after:
                return taken[1]
            snap = SeatsSnapshot.of_session(session).carried(None if taken is None else taken[1])
            self._taken[session.sid] = (now, snap)
            return snap

    def forget(self, sid: str) -> None:
        with self._lock:
            self._taken.pop(sid, None)


async def serve_seats(ws: WebSocket, session: ServerSession, cache: SnapshotCache, pacer: FeedPacer) -> None:
    """Feed ``ws`` (accepted) until the session ends or the socket goes: the hello, then an
    update whenever ``pacer`` allows (each read that much ahead of its time as the last one took);
    at the end a ``SESSION_ENDED`` error, and the socket closed."""
    loop = asyncio.get_running_loop()
    listener = asyncio.ensure_future(_until_gone(ws))

    async def until(moment: float) -> bool:  # False once the client has gone
        await asyncio.wait({listener}, timeout=max(0.0, moment - loop.time()))
        return not listener.done()

    try:
        text = json.dumps(hello(session), separators=(",", ":"))
        await ws.send_text(text)
        next_at, lead, prev, update = pacer.after(loop.time(), len(text)), 0.0, None, 0
        while session.state is Lifecycle.RUNNING and await until(next_at - lead):
            started = loop.time()
            snap = await asyncio.to_thread(cache.take, session, started, prev)
            lead = min(loop.time() - started, 0.5 / pacer.max_hz)
            update += 1
            data = pack_update(snap, prev, update)
            prev = snap
            if not await until(next_at):
                return
            await ws.send_bytes(data)
            next_at = pacer.after(loop.time(), len(data))
        if not listener.done():
            reason = session.end_reason or session.state.value
            ended = ProtocolError(ErrorCode.SESSION_ENDED, f"session {session.sid} has ended ({reason})")
            await ws.send_text(ended.reply().model_dump_json())
            await ws.close(code=1000, reason="session ended")
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await listener


async def _until_gone(ws: WebSocket) -> None:
    """Read (and ignore) what the client sends until it closes or goes."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass
