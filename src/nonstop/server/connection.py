"""A client's connection and its session, transport-free: the protocol's verbs (`Connection`:
reset, join, step, act, observe, wait, subscribe, state) and what each reader was last sent
(`_View`). The WebSocket endpoint (`nonstop.server.app`), the OpenEnv HTTP routes
(`nonstop.server.openenv_http`), the MCP tools (`nonstop.server.mcp`) and the live page's
spectators (`nonstop.server.live`) all drive a `Connection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect

from nonstop.realtime.channels import Observation
from nonstop.realtime.hostloop import END_TERMINATED, END_TRUNCATED
from nonstop.server.lifecycle import Lifecycle
from nonstop.server.protocol import (
    MAX_WAIT_TICKS,
    AckReply,
    ActMessage,
    ErrorCode,
    JoinMessage,
    ObserveMessage,
    ProtocolError,
    ResetMessage,
    SessionConfig,
    StateMessage,
    StateReply,
    StepMessage,
    SubscribeMessage,
    WaitMessage,
    encode_array,
)
from nonstop.server.session import ServerSession
from nonstop.server.sessions import SessionManager

__all__ = ["Connection", "MAX_WAITS_PER_CONNECTION"]

log = logging.getLogger("nonstop.server")
#: waits (``wait``, ``step``'s wait for its tick) one connection may have pending at once
MAX_WAITS_PER_CONNECTION = 4


@dataclass
class _View:
    """What one reader was last sent, so that ``reward`` and ``done`` are "since then".

    At an episode's end the host publishes twice in one tick: the terminal observation (kept as
    the slot's final one) and then the next episode's first. The reply that says ``done`` carries
    the **terminal** observation with its ``terminated``/``truncated`` flags, as a Gymnasium
    ``step`` would; the next episode's observations follow (``reset`` returns its current one).
    """

    tick: int = -1
    total_reward: float = 0.0
    episode: int = 0  # the episode this reader is in (after a ``done`` reply: the next one)
    ended: bool = False  # the last reply said ``done``: the reader is between episodes
    seat: int = 0  # the seat this reader reads (its observations, reward and counters)

    def payload(
        self, obs: Observation, session: ServerSession, encoding: str, *, fresh: bool = False
    ) -> dict[str, Any]:
        """The reply's ``data`` for the newest observation ``obs``; ``fresh`` (a reset) starts
        the view at ``obs`` and never reports an ended episode."""
        terminated = truncated = False
        shown, episode = obs, obs.episode
        if fresh:
            pass
        elif obs.terminated or obs.truncated:  # read between the two publishes of an episode's end
            episode = obs.episode + 1
            if episode != self.episode:  # not yet reported to this reader
                terminated, truncated = obs.terminated, obs.truncated
        elif obs.episode != self.episode:
            final = session.read_final(self.seat)
            if final.episode == self.episode:  # the terminal observation of the episode this reader was in
                shown, terminated, truncated = final, final.terminated, final.truncated
            else:  # several episodes ended since this reader looked: only how the last one ended is known
                terminated, truncated = obs.last_end == END_TERMINATED, obs.last_end == END_TRUNCATED
        done = not fresh and episode != self.episode
        reward = shown.total_reward - self.total_reward
        self.tick, self.total_reward, self.episode, self.ended = shown.tick, shown.total_reward, episode, done
        return {
            "observation": {
                "obs": encode_array(shown.obs, encoding),
                "tick": shown.tick,
                "time": shown.tick * session.tau_m,  # the session's clock: seconds since its tick 0
                "episode": shown.episode,
                "terminated": terminated,
                "truncated": truncated,
                "total_reward": shown.total_reward,
                "inaction_ticks": shown.inaction_ticks,
                "agent_ticks": shown.agent_ticks,
                "last_delay": shown.last_delay,
                "session_id": session.sid,
                "lifecycle": session.state.value,
                **({"seat": session.seat_names[self.seat]} if session.spec.seats is not None else {}),
            },
            "reward": reward,
            "done": done,
        }


class TeamHold:
    """The seats of one team that a connection holds (``reset`` or ``join`` with ``team``): their
    indices, a `_View` each (what that seat's reader was last sent), and the one-message reply that
    carries every seat's observation (`nonstop.server.protocol.TeamObservationReply`)."""

    def __init__(self, name: str, indices: list[int], session: ServerSession) -> None:
        self.name, self.indices = name, indices
        self.views = {i: _View(seat=i) for i in indices}
        self.by_name = {session.seat_names[i]: i for i in indices}

    def seat(self, session: ServerSession, name: str) -> int:
        """The index of this team's seat ``name``: ``UNKNOWN_SEAT`` for a seat the env lacks,
        ``SEAT_NOT_HELD`` for another team's."""
        index = session.seat_index(name)
        if name not in self.by_name:
            raise ProtocolError(
                ErrorCode.SEAT_NOT_HELD, f"seat {name!r} of session {session.sid} is not team {self.name!r}'s"
            )
        return index

    def reply(self, session: ServerSession, encoding: str, *, fresh: bool = False) -> dict[str, Any]:
        """Every seat's observation in one ``team_observation`` (``fresh``: a reset's or join's, which
        starts each seat's view: no reward yet, nothing done)."""
        seats: dict[str, Any] = {}
        tick = -1
        for name, i in self.by_name.items():
            data = self.views[i].payload(session.read(i), session, encoding, fresh=fresh)
            if fresh:
                data["reward"], data["done"] = None, False
            tick = max(tick, data["observation"]["tick"])
            seats[name] = data
        return {
            "type": "team_observation",
            "data": {"team": self.name, "session_id": session.sid, "tick": tick, "seats": seats},
        }


class Connection:
    """One client and its session (at most one at a time): the protocol's verbs, transport-free.

    In a several-seat world the connection holds one seat (``seat``, an index): it reads that seat's
    observations and counters and acts for it alone. Leaving (``close``, a lost connection, a reset
    that starts another session, a join elsewhere) frees the seat for its β; the session ends when
    its last seated client leaves.

    One controller per seat: the session's ``holders`` name this very object at each seat it holds,
    and every verb but ``state`` checks that it still does (``SEAT_NOT_HELD`` once its seat was given
    up). A reset that restarts the world starts the new session before it leaves the old one, so a
    refused or failed reset changes nothing. A connection without a socket (HTTP, MCP) has no
    disconnect to say it left: it ``expires``, and the manager's reaper frees its seats once it has
    sent nothing for the idle timeout (`last_activity`) and waits for nothing (`waits`).

    The WebSocket endpoint feeds it parsed messages and sends what `handle` returns; the MCP tools
    (`nonstop.server.mcp`) drive it the same way with ``ws=None`` (then there are no pushes). A
    socket whose session ends (reaped, ``max_ticks``, an env error) is closed (code 1008) unless it
    starts or joins another within ``end_grace`` seconds (default: the manager's idle timeout).
    """

    def __init__(
        self, ws: WebSocket | None, manager: SessionManager, start_timeout: float, *, end_grace: float | None = None
    ) -> None:
        self.ws = ws
        self.manager = manager
        self.start_timeout = start_timeout
        self.end_grace = manager.idle_timeout if end_grace is None else end_grace
        self.expires = ws is None  # no disconnect will tell that it left: its seats expire when it goes silent
        self.last_activity = manager.clock.now()
        self.waits = 0  # waits pending on this connection (at most MAX_WAITS_PER_CONNECTION)
        self._closer: asyncio.Task | None = None  # closes the socket some time after its session ended
        self.seated = False  # it has taken a seat (a spectator's reader never does: it only reads)
        self.closed = False  # its client left (`close`): nothing more to watch
        self.session: ServerSession | None = None
        self.seat = 0  # the index of the seat this connection holds in its session
        self.view = _View()
        #: the team this connection holds (all its seats: one message acts for them, one observes them), or None
        self.team: TeamHold | None = None
        self.config: SessionConfig | None = None
        self._send_lock = asyncio.Lock()
        self._subscription: asyncio.Task | None = None

    async def send(self, reply: Any) -> None:
        # observation replies are built as dicts on the hot path (no second validation of big arrays)
        text = json.dumps(reply) if isinstance(reply, dict) else reply.model_dump_json()
        if self.ws is None:
            raise RuntimeError("this connection has no socket (an MCP or HTTP client): nothing can be pushed to it")
        async with self._send_lock:
            await self.ws.send_text(text)

    def running(self) -> ServerSession:
        """This connection's running session, which it must still hold a seat of."""
        session = self.session
        if session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        session._require_running()
        if self.seated and not self.holds(session):
            raise ProtocolError(
                ErrorCode.SEAT_NOT_HELD,
                f"this connection no longer holds a seat of session {session.sid} (given up after "
                f"{self.manager.idle_timeout:g}s without a message): join it again or reset",
            )
        return session

    def holds(self, session: ServerSession) -> bool:
        """Whether this connection still holds its seat (a team: its first seat) of ``session``."""
        return self.seat < len(session.holders) and session.holders[self.seat] is self

    def current(self) -> ServerSession:
        """This connection's session, in whatever state (`running`: a running one)."""
        if self.session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        return self.session

    def _encoding(self, requested: str | None) -> str:
        return requested or self.current().settings.encoding

    async def handle(self, msg: Any) -> Any:
        self.last_activity = self.manager.clock.now()
        if self.session is not None:
            self.session.touch()
        if isinstance(msg, ResetMessage):
            return await self.reset(msg)
        if isinstance(msg, StateMessage):
            return self.state(msg.data.seats)
        if isinstance(msg, JoinMessage):
            return await self.join(msg)
        session = self.running()
        if isinstance(msg, (StepMessage, ActMessage)) and (msg.data.actions is not None or self.team is not None):
            return await self._act_team(session, msg)
        if isinstance(msg, (StepMessage, ActMessage)):
            if msg.data.seat is not None:
                self._check_seat(session, msg.data.seat, msg.type)
            obs_tick = msg.data.obs_tick if msg.data.obs_tick is not None else max(self.view.tick, 0)
            seq, tick = await session.submit_async(msg.data.action, obs_tick, self.view.episode, self.seat)
            if isinstance(msg, ActMessage):
                return AckReply(data={"seq": seq, "tick": tick, "obs_tick": obs_tick})
            return await self.observe_at(tick + 1, None)  # the tick that applies it
        if isinstance(msg, ObserveMessage):
            return self.observation(session.read(self.seat), msg.data.encoding)
        if isinstance(msg, WaitMessage):
            target = msg.data.target(session.tick)
            if target - session.tick > MAX_WAIT_TICKS:
                raise ProtocolError(
                    ErrorCode.VALIDATION_ERROR,
                    f"until={target} is more than {MAX_WAIT_TICKS} ticks ahead of tick {session.tick}",
                )
            return await self.observe_at(target, msg.data.encoding)
        if isinstance(msg, SubscribeMessage):
            if self.team is not None:
                raise ProtocolError(
                    ErrorCode.SESSION_ERROR,
                    f"this connection holds team {self.team.name!r}: it observes every seat with observe or wait "
                    "(pushes are one seat's)",
                )
            return self.subscribe(msg.data.every, msg.data.encoding)
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {msg.type}")

    def observation(self, obs: Observation, encoding: str | None, *, fresh: bool = False) -> dict[str, Any]:
        """An `ObservationReply`, as a dict (``fresh``: a reset's, which starts the reader's view); a
        connection holding a team gets every seat's instead (`TeamHold.reply`; ``obs`` is not used)."""
        if self.team is not None:
            return self.team.reply(self.current(), self._encoding(encoding), fresh=fresh)
        data = self.view.payload(obs, self.current(), self._encoding(encoding), fresh=fresh)
        return {"type": "observation", "data": data}

    async def _act_team(self, session: ServerSession, msg: StepMessage | ActMessage) -> Any:
        """A team's actions, ``{seat: action}``, each into its seat's queue (every seat named and every
        action checked before any is enqueued); a ``step`` answers with the team's observation of the
        tick that applies them."""
        team, actions = self.team, msg.data.actions
        if team is not None and actions is None:
            raise ProtocolError(
                ErrorCode.SESSION_ERROR,
                f"this connection holds team {team.name!r}: send 'actions' {{seat: action}}, not 'action'",
            )
        if team is None or actions is None:
            held = f"seat {session.seat_names[self.seat]!r}" if session.spec.seats is not None else "a one-seat world"
            raise ProtocolError(
                ErrorCode.SESSION_ERROR,
                f"'actions' is a team's: this connection holds {held}; reset or join with team=... to hold a team",
            )
        chosen = []
        for name, action in actions.items():
            index = team.seat(session, name)
            if session.holders[index] is not self:
                raise ProtocolError(
                    ErrorCode.SEAT_NOT_HELD, f"seat {name!r} of session {session.sid} is no longer this connection's"
                )
            try:
                session.queues[index].codec.validate(action)
            except (ValueError, OverflowError) as exc:  # a number past every float overflows: out of range too
                raise ProtocolError(
                    ErrorCode.ACTION_OUT_OF_RANGE, f"action out of range: {exc} (seat {name!r})"
                ) from None
            chosen.append((index, action))
        seq = tick = obs_tick = 0
        for index, action in chosen:
            view = team.views[index]
            obs_tick = msg.data.obs_tick if msg.data.obs_tick is not None else max(view.tick, 0)
            seq, tick = await session.submit_async(action, obs_tick, view.episode, index)
        if isinstance(msg, ActMessage):
            return AckReply(data={"seq": seq, "tick": tick, "obs_tick": obs_tick, "seats": len(chosen)})
        return await self.observe_at(tick + 1, None)  # the tick that applies them

    async def observe_at(self, target: int, encoding: str | None) -> dict[str, Any]:
        """The observation of tick ``target``, once it has come. A parked wait counts as this
        connection's activity (a wait may outlast the idle timeout); at most
        `MAX_WAITS_PER_CONNECTION` at once, and one whose caller is cancelled leaves the session."""
        session = self.running()
        if self.waits >= MAX_WAITS_PER_CONNECTION:
            raise ProtocolError(
                ErrorCode.BACKPRESSURE,
                f"this connection has {self.waits} waits pending already (at most {MAX_WAITS_PER_CONNECTION} "
                "at once): wait for one of them to answer",
            )
        active = self.seated  # a spectator's waits are not its owner's activity
        self.waits += 1
        session.parked += active
        try:
            await session.wait_tick(target, asyncio.get_running_loop(), capped=not active)
        finally:
            self.waits -= 1
            session.parked -= active
            if active:
                self.last_activity = self.manager.clock.now()
                session.touch()
        return self.observation(session.read(self.seat), encoding)

    def _check_seat(self, session: ServerSession, seat: str, verb: str) -> None:
        """An action naming ``seat`` must be for this connection's own seat."""
        index = session.seat_index(seat)  # UNKNOWN_SEAT for a seat the env lacks
        if index != self.seat or session.holders[index] is not self:
            raise ProtocolError(
                ErrorCode.SEAT_NOT_HELD,
                f"cannot {verb} for seat {seat!r} of session {session.sid}: "
                f"this connection holds seat {session.seat_names[self.seat]!r}",
            )

    def leave(self, reason: str) -> None:
        """Give up this connection's seat: β plays it from now; the session ends with ``reason`` if
        no other client holds a seat of it."""
        session = self.session
        if session is None:
            return
        if session.release(self) == 0:
            self.manager.end(session, reason)
        else:
            log.info(
                "session %s: seat %s left (%s); its β plays it", session.sid, session.seat_names[self.seat], reason
            )

    async def join(self, msg: JoinMessage) -> dict[str, Any]:
        """Take a seat (named, or the first free one) of another client's running session."""
        data = msg.data
        session = self.manager.get(data.session_id)
        if session is None:
            if self.manager.ended(data.session_id) is not None:
                raise ProtocolError(ErrorCode.SESSION_ENDED, f"session {data.session_id} has ended: nothing to join")
            raise ProtocolError(
                ErrorCode.NO_SESSION, f"no session {data.session_id!r} to join (GET /sessions lists them)"
            )
        if data.team is not None:
            return await self._join_team(session, data.team, data.encoding)
        if session is self.session and session.holders[self.seat] is self:
            raise ProtocolError(
                ErrorCode.SESSION_ERROR,
                f"this connection already holds seat {session.seat_names[self.seat]!r} of session {session.sid}",
            )
        index = session.claim(self, data.seat)
        if self.session is not None and self.session is not session:  # its seat elsewhere is given up
            self.stop_subscription()
            self.leave("its client joined another session")
        self.session, self.seat, self.config, self.team = session, index, None, None
        self.view = _View(seat=index)
        self._adopt(session)
        reply = self.observation(session.read(index), data.encoding, fresh=True)
        reply["data"]["reward"] = None
        reply["data"]["done"] = False
        return reply

    async def _join_team(self, session: ServerSession, team: str, encoding: str | None) -> dict[str, Any]:
        """Take every seat of ``team`` in ``session`` (another client's, or this connection's own)."""
        if self.team is not None and session is self.session and self.team.name == team:
            raise ProtocolError(
                ErrorCode.SESSION_ERROR, f"this connection already holds team {team!r} of session {session.sid}"
            )
        if session is not self.session and self.session is not None:
            indices = session.claim_team(self, team)
            self.stop_subscription()
            self.leave("its client joined another session")
        else:
            indices = session.claim_team(self, team)  # its own session: its other seats are given up
        self._hold_team(session, team, indices)
        self._adopt(session)
        return self.observation(session.read(indices[0]), encoding, fresh=True)

    def _hold_team(self, session: ServerSession, team: str, indices: list[int]) -> None:
        self.session, self.config = session, self.config if session is self.session else None
        self.team = TeamHold(team, indices, session)
        self.seat = indices[0]  # `state` reports this seat's counters (and every seat's under ``seats``)
        self.view = _View(seat=indices[0])

    async def reset(self, msg: ResetMessage) -> dict[str, Any]:
        data = msg.data
        config = SessionConfig(**data.model_dump(include=set(SessionConfig.model_fields)))
        session = self.session
        restart = (
            session is None
            or not session.live
            or data.seed is not None
            or (config != self.config and config != SessionConfig())
            or data.team != (self.team.name if self.team is not None else None)
            or not self.holds(session)  # its seat was given up (expired): start afresh
        )
        if restart:
            session = await self._restart(config, data)
            obs = session.read(self.seat)
        else:
            assert session is not None  # restarted above when there is none
            obs = session.read(self.seat)
            if obs.terminated or obs.truncated:  # between the two publishes of an episode's end
                obs = await self._next_episode(obs.episode)
            elif not self.view.ended and not any(h is not None and h is not self for h in session.holders):
                # the client is inside an episode: end it (at the next tick); a match others play
                # in is not this client's to end: its reset answers its seat's current observation
                session.request_reset()
                obs = await self._next_episode(obs.episode)
            session.settings.episode_id = data.episode_id
        reply = self.observation(obs, None, fresh=True)
        reply["data"]["reward"] = None
        reply["data"]["done"] = False
        return reply

    async def _restart(self, config: SessionConfig, data: Any) -> ServerSession:
        """Start a new session for this connection, then leave the old one: a reset that is refused
        or fails (an env not served, capacity, the env's factory, a team the env lacks) leaves the
        connection holding exactly what it held, so a seat never has two controllers."""
        old = self.session
        alone = old is not None and old.live and all(h is None or h is self for h in old.holders)
        # a session this connection alone plays ends when it leaves: it does not count against capacity
        session = self.manager.create(
            config, seed=data.seed, episode_id=data.episode_id, replacing=old if alone else None
        )
        session.holders[0] = self  # its creator takes the first seat, before anyone can join
        try:
            await self.manager.start(session, timeout=self.start_timeout)
            indices = session.claim_team(self, data.team) if data.team is not None else None
        except BaseException:
            session.release(self)
            self.manager.end(session, "its reset failed")  # (already ended if it failed to start)
            raise
        if old is not None:
            self.stop_subscription()
            self.leave("restarted by reset")
        self.session, self.config, self.seat, self.team = session, config, 0, None
        self.view = _View()
        if indices is not None and data.team is not None:  # its creator takes a whole team instead
            self._hold_team(session, data.team, indices)
        self._adopt(session)
        return session

    def _adopt(self, session: ServerSession) -> None:
        """This connection now plays ``session``: mark it active, and (a socket) watch for its end."""
        session.touch()
        self.seated = True
        if self._closer is not None:
            self._closer.cancel()
            self._closer = None
        if self.ws is not None:
            loop = asyncio.get_running_loop()

            def ended() -> None:  # whichever thread ends it: hand over to this socket's loop
                loop.call_soon_threadsafe(self._session_ended, session)

            session.on_end(ended)

    def _session_ended(self, session: ServerSession) -> None:
        """``session`` ended (event loop): close this socket unless it starts another in time."""
        if self.session is session and self._closer is None and not self.closed:
            self._closer = asyncio.ensure_future(self._close_unless_restarted(session))

    async def _close_unless_restarted(self, session: ServerSession) -> None:
        await asyncio.sleep(self.end_grace)
        if self.session is not session or self.ws is None:
            return
        log.info("session %s ended and its socket started no other within %gs: closing it", session.sid, self.end_grace)
        with contextlib.suppress(Exception):
            await self.ws.close(code=1008, reason=f"session ended; none started within {self.end_grace:g}s")

    async def _next_episode(self, episode: int) -> Observation:
        """The first observation of an episode after ``episode`` (waits tick by tick)."""
        loop = asyncio.get_running_loop()
        obs = self.running().read(self.seat)
        while obs.episode <= episode or obs.terminated or obs.truncated:
            session = self.current()
            await session.wait_tick(session.tick + 1, loop)
            obs = self.running().read(self.seat)
        return obs

    def held_seats(self) -> list[int]:
        """The seat indices this connection plays: its team's, or its one seat."""
        return list(self.team.by_name.values()) if self.team is not None else [self.seat]

    def state(self, seats_of: str = "all") -> StateReply:
        """The session's counters; ``seats_of``: ``mine`` lists only the seats this connection holds
        (its seat, or its team's), so one seat's reply does not grow with the world; ``all``: every seat."""
        session = self.session
        if session is None:
            raise ProtocolError(ErrorCode.NO_SESSION, "no session on this connection: send 'reset' first")
        seat = self.seat
        obs = session.read(seat) if session.state is Lifecycle.RUNNING else None
        ended = (
            session.summary
            if seat == 0
            else next((row for row in session.summary.get("seats", []) if row["seat"] == session.seat_names[seat]), {})
        )
        seats = None
        if session.spec.seats is not None:
            seats = [
                {
                    "seat": row["seat"],
                    "held": row["held"],
                    "agent_ticks": row["agent_ticks"],
                    "inaction_ticks": row["inaction_ticks"],
                    "last_delay": row["last_delay"] if row["last_delay"] is not None else -1,
                    "total_reward": row.get("total_reward") or 0.0,
                }
                for row in session.seat_rows(None if seats_of == "all" else self.held_seats())
            ]
        queue = session.queues[seat] if obs and seat < len(session.queues) else None
        return StateReply(
            data={
                "episode_id": session.settings.episode_id,
                "step_count": session.step_count,
                "session_id": session.sid,
                "lifecycle": session.state.value,
                "end_reason": session.end_reason,
                "env": session.spec.env_id,
                "tick": obs.tick if obs else session.summary.get("ticks", -1),
                "tick_hz": session.spec.tick_hz,
                "episode": obs.episode if obs else -1,
                "inaction_ticks": obs.inaction_ticks if obs else ended.get("inaction_ticks", 0),
                "agent_ticks": obs.agent_ticks if obs else ended.get("agent_ticks", 0),
                "total_reward": obs.total_reward if obs else ended.get("total_reward") or 0.0,
                "queue": queue.counters() if queue is not None else {},
                "record": session.settings.record,
                "seat": session.seat_names[seat] if session.spec.seats is not None else None,
                "seats": seats,
            }
        )

    # ---- subscriptions: newest wins, a slow reader only skips ticks
    def subscribe(self, every: int, encoding: str | None) -> AckReply:
        session = self.running()
        self.stop_subscription()
        if every > 0:
            self._subscription = asyncio.create_task(self._push(session, every, self._encoding(encoding)))
        return AckReply(data={"seq": -1, "tick": session.tick, "obs_tick": session.tick})

    async def _push(self, session: ServerSession, every: int, encoding: str) -> None:
        view = dataclasses.replace(self.view)  # pushes report "since" what the client last saw
        loop = asyncio.get_running_loop()
        target = session.tick + every
        try:
            while session.state is Lifecycle.RUNNING:
                await session.wait_tick(target, loop)
                if session.state is not Lifecycle.RUNNING:
                    break
                obs = session.read(view.seat)
                await self.send({"type": "push", "data": view.payload(obs, session, encoding)})  # a PushReply
                target = max(target + every, session.tick + 1)  # skipped ticks are gone: newest wins
        except (ProtocolError, WebSocketDisconnect, RuntimeError):
            return

    def stop_subscription(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None

    def close(self, reason: str) -> None:
        self.closed = True
        self.stop_subscription()
        if self._closer is not None:
            self._closer.cancel()
            self._closer = None
        self.leave(reason)
