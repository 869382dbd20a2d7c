"""Clients for a nonstop server: async, sync, and a Gymnasium adapter.

`AsyncClient` owns one WebSocket (one session). Replies arrive in request order, so each request
awaits the next reply; ``push`` messages from a subscription are kept apart, newest wins, so a slow
consumer of pushes never backs up the socket. `Client` is the same API, blocking, for scripts and
training loops (it runs the async client on a private event-loop thread). `RemoteEnv` is a
``gymnasium.Env`` over a remote session with the semantics of the local Gymnasium view
(`nonstop.realtime.gym`): ``step`` submits and returns the observation of the tick that applied
the action, and a slow agent suffers inaction because the remote world never waits. With
`nonstop serve` running on 127.0.0.1:8000::

    with Client("ws://127.0.0.1:8000") as client:
        first = client.reset(seed=0)
        result = client.step(1)
        result.tick, result.info["inaction_ticks"]

Several seats: one client creates a session of a several-seat world and takes its first seat;
another joins it by session id, taking a named seat or the first free one::

    with Client(url) as first, Client(url) as second:
        sid = first.reset(env="multi/duel").info["session_id"]
        second.join(sid)                 # second_0: each client acts for its own seat

A whole team of a many-seat world (``multi/battle``): every seat's actions in one message, every
seat's observations in one reply (`TeamObservation`)::

    with Client(url) as red, Client(url) as blue:
        sid = red.reset_team("red", env="multi/battle").session_id
        blue.join_team(sid, "blue")
        seen = red.step_team({seat: 6 for seat in red.observe_team().seats})
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, SupportsFloat, TypeVar

import gymnasium as gym
import numpy as np

from nonstop.server.protocol import decode_array

__all__ = [
    "ServerError",
    "ServerGone",
    "RemoteObservation",
    "TeamObservation",
    "AsyncClient",
    "Client",
    "RemoteEnv",
    "space_from_json",
    "Backoff",
    "RETRYABLE",
]

T = TypeVar("T")
#: error codes that mean "not now": the client retries them with jittered backoff up to its deadline
RETRYABLE: Final = frozenset({"BACKPRESSURE", "CAPACITY_REACHED"})


class ServerError(RuntimeError):
    """The server answered with an ``error`` message; ``code`` is its error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} (code: {code})")
        self.code = code
        self.message = message


class ServerGone(ConnectionError):
    """The connection to the server ended under a request: one line saying so, with the close code and
    its meaning (1012: the server is restarting or was stopped, as Ctrl-C does), not websockets' own
    ``ConnectionClosedError: received 1012 (service restart)``.

    >>> str(ServerGone("ws://127.0.0.1:8000/ws", 1012, ""))
    'the server at ws://127.0.0.1:8000/ws went away (close code 1012: it was stopped or is restarting); start it again and reconnect'
    """

    def __init__(self, url: str, code: int | None, reason: str) -> None:
        meaning = _CLOSE_MEANINGS.get(code, reason or "no reason given") if code is not None else "no close frame"
        tail = "start it again and reconnect" if code in (1001, 1012, None) else "reconnect to start a new session"
        super().__init__(
            f"the server at {url} went away (close code {code}: {meaning}); {tail}"
            if code is not None
            else f"the server at {url} went away ({meaning}); {tail}"
        )
        self.url, self.code, self.reason = url, code, reason


_CLOSE_MEANINGS: Final = {
    1000: "closed normally",
    1001: "the server is going away",
    1006: "the connection dropped",
    1008: "policy: the server closed it",
    1011: "the server hit an internal error",
    1012: "it was stopped or is restarting",
    1013: "try again later",
}


def _server_gone(url: str, exc: BaseException) -> BaseException:
    """websockets' ``ConnectionClosed`` as a `ServerGone`; anything else as it is."""
    from websockets.exceptions import ConnectionClosed

    if not isinstance(exc, ConnectionClosed):
        return exc
    frame = exc.rcvd or exc.sent
    return ServerGone(url, frame.code if frame is not None else None, frame.reason if frame is not None else "")


@dataclass
class RemoteObservation:
    """An observation reply. ``reward`` is the reward since this reader's previous observation;
    ``done`` says an episode ended since then: ``obs`` is then that episode's terminal observation
    and ``info["terminated"]``/``info["truncated"]`` say how it ended (the remote world has
    already started the next episode, whose current observation ``reset`` returns)."""

    obs: np.ndarray | None
    tick: int
    reward: float | None
    done: bool
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> "RemoteObservation":
        fields = dict(data["observation"])
        obs = decode_array(fields.pop("obs"))
        return cls(
            obs=obs, tick=int(fields["tick"]), reward=data.get("reward"), done=bool(data.get("done")), info=fields
        )


@dataclass
class TeamObservation:
    """A ``team_observation`` reply: every seat of the team this client holds, each a
    `RemoteObservation` (its ``reward`` and ``done`` since this client's previous look at that seat),
    by seat name; ``tick``: the newest tick among them."""

    team: str
    tick: int
    seats: dict[str, RemoteObservation]
    session_id: str

    @classmethod
    def from_message(cls, data: dict[str, Any]) -> "TeamObservation":
        seats = {name: RemoteObservation.from_message(seat) for name, seat in data["seats"].items()}
        return cls(team=data["team"], tick=int(data["tick"]), seats=seats, session_id=data["session_id"])

    @property
    def obs(self) -> dict[str, np.ndarray | None]:
        return {name: seat.obs for name, seat in self.seats.items()}

    @property
    def rewards(self) -> dict[str, float | None]:
        return {name: seat.reward for name, seat in self.seats.items()}


class Backoff:
    """Jittered exponential backoff up to a deadline: the wait before retry ``k`` is drawn uniformly
    from ``[c/2, c]`` with ``c = min(cap, base·2^k)`` ("equal jitter": many clients refused at once
    spread out instead of retrying in lockstep), and no wait runs past ``deadline`` seconds after
    the first try. Pure arithmetic; the caller sleeps.

    >>> b = Backoff(deadline=1.0, base=0.1, cap=0.4)
    >>> 0.05 <= b.next_wait(elapsed=0.0) <= 0.1, 0.1 <= b.next_wait(elapsed=0.0) <= 0.2
    (True, True)
    >>> 0.2 <= b.next_wait(elapsed=0.0) <= 0.4, 0.2 <= b.next_wait(elapsed=0.0) <= 0.4  # capped
    (True, True)
    >>> round(b.next_wait(elapsed=0.95), 3), b.next_wait(elapsed=1.0)  # never past the deadline
    (0.05, None)
    """

    def __init__(self, deadline: float, base: float = 0.05, cap: float = 1.0, rng: random.Random | None = None) -> None:
        for name, value in (("deadline", deadline), ("base", base), ("cap", cap)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"backoff {name} must be a non-negative number of seconds, got {value!r}")
        self.deadline, self.base, self.cap = float(deadline), float(base), float(cap)
        self.rng = rng or random.Random()
        self.attempt = 0

    def next_wait(self, elapsed: float) -> float | None:
        """Seconds to wait before the next try, or None when the deadline has passed."""
        left = self.deadline - elapsed
        if left <= 0:
            return None
        c = min(self.cap, self.base * 2.0**self.attempt)
        self.attempt += 1
        return min(left, c / 2 + self.rng.uniform(0, c / 2))


def _ws_url(url: str) -> str:
    url = url.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            url = ws + url[len(http) :]
    if not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url if url.endswith("/ws") else url + "/ws"


def _http_url(url: str) -> str:
    url = _ws_url(url)[: -len("/ws")]
    return "http" + url[2:]


class AsyncClient:
    """One session on a nonstop server, async.

    Parameters
    ----------
    url: ``ws://host:port`` or ``http://host:port`` (``/ws`` is added).
    token: bearer token when the server was started with ``--token``.
    timeout: seconds to wait for any one reply (a ``wait`` for n ticks adds n ticks to it).
    retry_deadline: a request the server refuses with ``BACKPRESSURE`` or ``CAPACITY_REACHED`` (or a
        connection refused with HTTP 503: too many connections) is retried with jittered exponential
        backoff (`Backoff`, from ``retry_base`` up to ``retry_cap`` seconds) for up to this many
        seconds, then the refusal is raised; 0 never retries. ``retries`` counts the retries made.
    """

    def __init__(
        self,
        url: str = "ws://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout: float = 60.0,
        retry_deadline: float = 5.0,
        retry_base: float = 0.05,
        retry_cap: float = 1.0,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise ValueError(f"url must be a non-empty string, got {url!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        Backoff(retry_deadline, retry_base, retry_cap)  # validates
        self.url = _ws_url(url)
        self.token = token
        self.timeout = float(timeout)
        self.retry = (float(retry_deadline), float(retry_base), float(retry_cap))
        self.retries = 0
        self._ws: Any = None
        self._reader: asyncio.Task | None = None
        self._replies: deque[asyncio.Future] = deque()
        self._push: RemoteObservation | None = None
        self._push_event = asyncio.Event()
        self.pushes_received = 0
        self.last: RemoteObservation | None = None
        self.last_team: TeamObservation | None = None

    async def connect(self) -> "AsyncClient":
        from websockets.asyncio.client import connect

        if self._ws is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
            self._ws = await self._retrying(lambda: self._connect_once(connect, headers))
            self._reader = asyncio.create_task(self._read())
        return self

    async def _connect_once(self, connect: Any, headers: dict[str, str] | None) -> Any:
        from websockets.exceptions import InvalidStatus

        try:
            return await connect(self.url, additional_headers=headers, max_size=1 << 24, open_timeout=self.timeout)
        except InvalidStatus as exc:  # refused before the handshake: 503 = too many connections
            response = exc.response
            try:
                data = json.loads(response.body)["data"]
                code, message = data["code"], data["message"]
            except (TypeError, ValueError, KeyError):
                code, message = f"HTTP_{response.status_code}", f"the server refused the connection: {exc}"
            raise ServerError(code, message) from None

    async def _retrying(self, attempt: Any) -> Any:
        """``await attempt()``, retried on a `RETRYABLE` refusal until the retry deadline."""
        loop = asyncio.get_running_loop()
        backoff, start = Backoff(*self.retry), loop.time()
        while True:
            try:
                return await attempt()
            except ServerError as exc:
                wait = backoff.next_wait(loop.time() - start) if exc.code in RETRYABLE else None
                if wait is None:
                    raise
            self.retries += 1
            await asyncio.sleep(wait)

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _read(self) -> None:
        try:
            async for raw in self._ws:
                msg = json.loads(raw)
                if msg.get("type") == "push":
                    self._push = RemoteObservation.from_message(msg["data"])  # newest wins
                    self.pushes_received += 1
                    self._push_event.set()
                elif self._replies:
                    fut = self._replies.popleft()
                    if not fut.done():
                        fut.set_result(msg)
        except Exception as exc:  # hand the failure to whoever waits
            error = _server_gone(self.url, exc)
        else:
            error = ServerGone(self.url, 1000, "")
        while self._replies:
            fut = self._replies.popleft()
            if not fut.done():
                fut.set_exception(error)

    async def request(self, message: dict[str, Any], *, extra_timeout: float = 0.0) -> dict[str, Any]:
        """Send one message and return its reply; raise `ServerError` on an error reply (after retrying
        a `RETRYABLE` one until the retry deadline)."""
        await self.connect()
        return await self._retrying(lambda: self._request_once(message, extra_timeout))

    async def _request_once(self, message: dict[str, Any], extra_timeout: float) -> dict[str, Any]:
        fut = asyncio.get_running_loop().create_future()
        self._replies.append(fut)
        try:
            await self._ws.send(json.dumps(message))
        except Exception as exc:  # a closed connection reads as one line
            gone = _server_gone(self.url, exc)
            if gone is exc:
                raise
            raise gone from None
        reply = await asyncio.wait_for(fut, self.timeout + extra_timeout)
        if reply.get("type") == "error":
            raise ServerError(reply["data"].get("code", "UNKNOWN"), reply["data"].get("message", ""))
        return reply

    async def _observation(self, message: dict[str, Any], extra_timeout: float = 0.0) -> RemoteObservation:
        reply = await self.request(message, extra_timeout=extra_timeout)
        if reply.get("type") == "team_observation":
            raise ServerError("SESSION_ERROR", "this client holds a team: use the team verbs (observe_team, …)")
        self.last = RemoteObservation.from_message(reply["data"])
        return self.last

    async def _team(self, message: dict[str, Any], extra_timeout: float = 0.0) -> TeamObservation:
        reply = await self.request(message, extra_timeout=extra_timeout)
        if reply.get("type") != "team_observation":
            raise ServerError("SESSION_ERROR", "this client holds one seat: use reset, observe, … (not the team verbs)")
        self.last_team = TeamObservation.from_message(reply["data"])
        return self.last_team

    # ---- a whole team (many-seat worlds): every seat's actions in one message, every seat's observations in one
    async def reset_team(self, team: str, **config: Any) -> TeamObservation:
        """Start a session (``config`` as `reset`'s) holding every seat of ``team``."""
        return await self._team({"type": "reset", "data": {**config, "team": team}})

    async def join_team(self, session_id: str, team: str, *, encoding: str | None = None) -> TeamObservation:
        """Take every seat of ``team`` in the running session ``session_id``."""
        return await self._team(
            {"type": "join", "data": _drop_none(session_id=session_id, team=team, encoding=encoding)}
        )

    async def act_team(self, actions: dict[str, Any], *, obs_tick: int | None = None) -> dict[str, Any]:
        """Enqueue each seat's action (``{seat: action}``) and return the ack at once."""
        return (await self.request({"type": "act", "data": _team_actions(actions, obs_tick)}))["data"]

    async def step_team(self, actions: dict[str, Any], *, obs_tick: int | None = None) -> TeamObservation:
        """Enqueue each seat's action; returns the team's observation of the tick that applies them."""
        return await self._team({"type": "step", "data": _team_actions(actions, obs_tick)})

    async def observe_team(self, *, encoding: str | None = None) -> TeamObservation:
        return await self._team({"type": "observe", "data": _drop_none(encoding=encoding)})

    async def wait_team(
        self, ticks: int | None = None, *, until: int | None = None, encoding: str | None = None
    ) -> TeamObservation:
        n = ticks if ticks is not None else max(0, (until or 0) - (self.last_team.tick if self.last_team else 0))
        data = _drop_none(ticks=ticks, until=until, encoding=encoding)
        return await self._team({"type": "wait", "data": data}, extra_timeout=n / 10.0)

    # ---- OpenEnv verbs
    async def reset(self, **config: Any) -> RemoteObservation:
        """Start (or restart with ``seed=``) the session; see `nonstop.server.protocol.ResetData`."""
        return await self._observation({"type": "reset", "data": config})

    async def join(self, session_id: str, seat: str | None = None, *, encoding: str | None = None) -> RemoteObservation:
        """Take ``seat`` (or the first free seat) of the running session ``session_id`` another
        client created; returns that seat's current observation (``info["seat"]`` names it)."""
        data = _drop_none(session_id=session_id, seat=seat, encoding=encoding)
        return await self._observation({"type": "join", "data": data})

    async def step(self, action: Any, *, obs_tick: int | None = None, seat: str | None = None) -> RemoteObservation:
        return await self._observation({"type": "step", "data": _action(action, obs_tick, seat)})

    async def state(self, *, seats: str | None = None) -> dict[str, Any]:
        """The session's counters; on a several-seat world ``seats`` lists the seats this client holds,
        or every seat's with ``seats="all"``."""
        message: dict[str, Any] = {"type": "state"} if seats is None else {"type": "state", "data": {"seats": seats}}
        return (await self.request(message))["data"]

    # ---- realtime verbs
    async def observe(self, *, encoding: str | None = None) -> RemoteObservation:
        return await self._observation({"type": "observe", "data": _drop_none(encoding=encoding)})

    async def act(self, action: Any, *, obs_tick: int | None = None, seat: str | None = None) -> dict[str, Any]:
        """Enqueue ``action`` and return the ack at once (``seq``, ``tick``). ``seat``, if given, is
        checked to be this client's own seat (``SEAT_NOT_HELD`` otherwise)."""
        return (await self.request({"type": "act", "data": _action(action, obs_tick, seat)}))["data"]

    async def wait(
        self, ticks: int | None = None, *, until: int | None = None, encoding: str | None = None
    ) -> RemoteObservation:
        """Wait ``ticks`` ticks from now, or until absolute tick ``until``; returns that observation."""
        n = ticks if ticks is not None else max(0, (until or 0) - (self.last.tick if self.last else 0))
        data = _drop_none(ticks=ticks, until=until, encoding=encoding)
        return await self._observation({"type": "wait", "data": data}, extra_timeout=n / 10.0)  # any world >= 10 Hz

    async def subscribe(self, every: int, *, encoding: str | None = None) -> None:
        """Have the server push the newest observation every ``every`` ticks (0 stops)."""
        await self.request({"type": "subscribe", "data": _drop_none(every=every, encoding=encoding)})

    async def next_push(self, timeout: float | None = None) -> RemoteObservation:
        """The newest pushed observation not yet returned (waits for one)."""
        await asyncio.wait_for(self._push_event.wait(), timeout or self.timeout)
        self._push_event.clear()
        assert self._push is not None, "the event is set once a push has arrived"
        return self._push

    async def close(self) -> None:
        if self._ws is not None:
            try:
                await self._ws.send(json.dumps({"type": "close"}))
            except Exception:  # already gone
                pass
            await self._ws.close()
            self._ws = None
        if self._reader is not None:
            try:
                await asyncio.wait_for(self._reader, 5)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._reader.cancel()
            self._reader = None


def _drop_none(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


def _action(action: Any, obs_tick: int | None, seat: str | None = None) -> dict[str, Any]:
    value = np.asarray(action).tolist() if isinstance(action, (np.ndarray, np.generic)) else action
    return _drop_none(action=value, obs_tick=obs_tick, seat=seat)


def _team_actions(actions: dict[str, Any], obs_tick: int | None) -> dict[str, Any]:
    values = {
        str(seat): np.asarray(a).tolist() if isinstance(a, (np.ndarray, np.generic)) else a
        for seat, a in actions.items()
    }
    return _drop_none(actions=values, obs_tick=obs_tick)


class Client:
    """`AsyncClient` with blocking methods (its event loop runs on a private daemon thread)."""

    def __init__(
        self,
        url: str = "ws://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout: float = 60.0,
        retry_deadline: float = 5.0,
        retry_base: float = 0.05,
        retry_cap: float = 1.0,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nonstop-client", daemon=True)
        self._thread.start()
        kwargs = {
            "token": token,
            "timeout": timeout,
            "retry_deadline": retry_deadline,
            "retry_base": retry_base,
            "retry_cap": retry_cap,
        }
        try:
            self._async = self._run(self._make(url, kwargs))
        except BaseException:
            self._stop_loop()
            raise
        self.url = self._async.url

    async def _make(self, url: str, kwargs: dict[str, Any]) -> AsyncClient:
        return AsyncClient(url, **kwargs)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    @property
    def retries(self) -> int:
        """Retries made after `RETRYABLE` refusals (see `AsyncClient`)."""
        return self._async.retries

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> "Client":
        self._run(self._async.connect())
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def last(self) -> RemoteObservation | None:
        return self._async.last

    def reset(self, **config: Any) -> RemoteObservation:
        return self._run(self._async.reset(**config))

    def join(self, session_id: str, seat: str | None = None, *, encoding: str | None = None) -> RemoteObservation:
        return self._run(self._async.join(session_id, seat, encoding=encoding))

    def step(self, action: Any, *, obs_tick: int | None = None, seat: str | None = None) -> RemoteObservation:
        return self._run(self._async.step(action, obs_tick=obs_tick, seat=seat))

    def state(self, *, seats: str | None = None) -> dict[str, Any]:
        return self._run(self._async.state(seats=seats))

    def observe(self, *, encoding: str | None = None) -> RemoteObservation:
        return self._run(self._async.observe(encoding=encoding))

    def act(self, action: Any, *, obs_tick: int | None = None, seat: str | None = None) -> dict[str, Any]:
        return self._run(self._async.act(action, obs_tick=obs_tick, seat=seat))

    def wait(
        self, ticks: int | None = None, *, until: int | None = None, encoding: str | None = None
    ) -> RemoteObservation:
        return self._run(self._async.wait(ticks, until=until, encoding=encoding))

    def subscribe(self, every: int, *, encoding: str | None = None) -> None:
        self._run(self._async.subscribe(every, encoding=encoding))

    def next_push(self, timeout: float | None = None) -> RemoteObservation:
        return self._run(self._async.next_push(timeout))

    def reset_team(self, team: str, **config: Any) -> TeamObservation:
        return self._run(self._async.reset_team(team, **config))

    def join_team(self, session_id: str, team: str, *, encoding: str | None = None) -> TeamObservation:
        return self._run(self._async.join_team(session_id, team, encoding=encoding))

    def act_team(self, actions: dict[str, Any], *, obs_tick: int | None = None) -> dict[str, Any]:
        return self._run(self._async.act_team(actions, obs_tick=obs_tick))

    def step_team(self, actions: dict[str, Any], *, obs_tick: int | None = None) -> TeamObservation:
        return self._run(self._async.step_team(actions, obs_tick=obs_tick))

    def observe_team(self, *, encoding: str | None = None) -> TeamObservation:
        return self._run(self._async.observe_team(encoding=encoding))

    def wait_team(
        self, ticks: int | None = None, *, until: int | None = None, encoding: str | None = None
    ) -> TeamObservation:
        return self._run(self._async.wait_team(ticks, until=until, encoding=encoding))

    def close(self) -> None:
        if self._loop.is_running():
            try:
                self._run(self._async.close())
            finally:
                self._stop_loop()


def http_get(url: str, path: str, *, token: str | None = None, timeout: float = 10.0) -> Any:
    """GET ``path`` from the server's HTTP side (``/metadata``, ``/sessions`` ...) as JSON."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(_http_url(url) + path, headers=headers, timeout=timeout)
    response.raise_for_status()
    return response.json()


def space_from_json(desc: dict[str, Any]) -> gym.Space:
    """Inverse of `nonstop.server.envspec.describe_space`."""
    kind = desc.get("type")
    if kind == "Discrete":
        return gym.spaces.Discrete(desc["n"], start=desc.get("start", 0))
    if kind == "Box":
        dtype = np.dtype(desc["dtype"])
        shape = tuple(desc["shape"])
        low = np.asarray(desc["low"], dtype=np.float64)
        high = np.asarray(desc["high"], dtype=np.float64)
        return gym.spaces.Box(
            low.astype(dtype) if low.ndim else low.item(),
            high.astype(dtype) if high.ndim else high.item(),
            shape=shape,
            dtype=dtype,
        )
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(desc["nvec"])
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(desc["n"])
    raise ValueError(f"cannot rebuild a {kind!r} space from the server's metadata")


class RemoteEnv(gym.Env):
    """A remote realtime session as a ``gymnasium.Env``.

    ``reset(seed=s)`` (re)starts the remote world with that seed; ``reset()`` after an episode ended
    returns the current observation of the episode the world has already started (mid-episode,
    it ends the episode first); ``step(a)`` submits ``a`` and returns the observation of the tick
    that applied it. ``info`` carries the local view's keys (``nonstop_tick``, ``nonstop_episode``,
    ``nonstop_ticks_elapsed``, ``nonstop_inaction_ticks``, ``nonstop_agent_ticks``,
    ``nonstop_delay``: numpy integers, the counts since the previous call) beside the server's own
    fields (``session_id``, ``time``, …). At an episode's end ``step`` returns its terminal observation
    with ``terminated`` or ``truncated`` set, exactly as the local view (`nonstop.realtime.gym`).
    """

    metadata = {"render_modes": []}

    def __init__(
        self, url: str = "ws://127.0.0.1:8000", *, env: str | None = None, token: str | None = None, **config: Any
    ) -> None:
        meta = http_get(url, "/metadata", token=token)
        env_id = env or meta["default_env"]
        if env_id not in meta["envs"]:
            raise ValueError(f"the server does not serve {env_id!r}; it serves {sorted(meta['envs'])}")
        desc = meta["envs"][env_id]
        self.env_id = env_id
        self.tick_hz = float(desc["tick_hz"])
        self.observation_space = space_from_json(desc["observation"])
        self.action_space = space_from_json(desc["action"])
        self.client = Client(url, token=token)
        self._config = {"env": env_id, "encoding": "b64", **config}
        self._started = False
        self._prev: tuple[int, int, int] | None = None  # tick, inaction and agent ticks last returned

    def _out(self, result: RemoteObservation) -> tuple[np.ndarray, dict[str, Any]]:
        obs = np.asarray(result.obs, dtype=self.observation_space.dtype)
        info = dict(result.info)
        now = (result.tick, int(info.get("inaction_ticks", 0)), int(info.get("agent_ticks", 0)))
        prev = self._prev if self._prev is not None else now
        # the same keys and types as the local Gymnasium view (nonstop.realtime.gym), counted since the last call
        info.update(
            nonstop_tick=np.int64(result.tick),
            nonstop_episode=np.int64(info.get("episode", 0)),
            nonstop_ticks_elapsed=np.int64(now[0] - prev[0]),
            nonstop_inaction_ticks=np.int64(now[1] - prev[1]),
            nonstop_agent_ticks=np.int64(now[2] - prev[2]),
            nonstop_delay=np.int64(info.get("last_delay", -1)),
        )
        self._prev = now
        return obs, info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        config = dict(self._config)
        if seed is not None:
            config["seed"] = seed
        result = self.client.reset(**config) if (seed is not None or not self._started) else self.client.reset()
        self._started = True
        return self._out(result)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.client.step(action)
        obs, info = self._out(result)
        terminated, truncated = bool(result.info.get("terminated")), bool(result.info.get("truncated"))
        if result.done and not (terminated or truncated):  # a server that does not say how it ended
            terminated = True
        return obs, float(result.reward or 0.0), terminated, truncated, info

    def close(self) -> None:
        self.client.close()
        super().close()
