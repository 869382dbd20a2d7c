"""Wire types of the nonstop server: every message, as pydantic models (docs/design.md §4).

One WebSocket carries JSON objects ``{"type": ..., "data": {...}}``. The lockstep half is OpenEnv's
(``reset``, ``step``, ``state``, ``close``, replied with ``observation`` / ``state`` / ``error``
exactly as OpenEnv's server does, so OpenEnv's own client plays unmodified); the realtime half is
ours: ``observe`` (latest observation, without acting), ``act`` (enqueue, answered at once with an
``ack``), ``wait`` (until tick t + n, the world does not stop) and ``subscribe`` (``push`` messages
every k ticks, newest wins). Unknown fields are rejected everywhere (``extra="forbid"``); nothing on
the wire is pickled: arrays travel as base64 of their raw bytes or as JSON lists.

Seats (docs/design.md §4b): a session of a several-seat world (``multi/duel``, ``multi/Boxing``) has one
seat per agent. The client whose ``reset`` creates it takes the first seat; others ``join`` it by
session id, naming a seat or taking the first free one, and each connection then observes, acts and
reads its counters (inaction, delay) for its own seat only. A seat whose client leaves is played by
its β; the session ends when its last seated client leaves (or by timeout, ``max_ticks``, error).
A client may hold a whole **team** instead (``reset`` or ``join`` with ``team``: every seat whose name
up to the last ``_`` is that team): it sends every seat's action in one ``act`` or ``step``
(``actions``: ``{seat: action}``) and observes every seat in one ``team_observation`` reply.

Spectators: ``/ws/watch/{session_id}`` speaks the same messages about another client's session,
read-only (`nonstop.server.live`): ``observe``, ``state``, ``wait`` and ``subscribe`` are answered
as on ``/ws``; ``reset``, ``step`` and ``act`` get a ``READ_ONLY`` error; ``close`` or a lost
spectator never ends the session, and watching does not count as the owner's activity.

>>> msg = parse_message('{"type": "wait", "data": {"ticks": 3}}')
>>> (msg.type, msg.data.ticks)
('wait', 3)
>>> try:
...     parse_message('{"type": "wait", "data": {"tiks": 3}}')
... except ProtocolError as err:
...     err.code
'VALIDATION_ERROR'
"""

from __future__ import annotations

import base64
import json
from enum import Enum
from typing import Annotated, Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

__all__ = [
    "ErrorCode",
    "ProtocolError",
    "ResetData",
    "ResetMessage",
    "StepMessage",
    "StateMessage",
    "CloseMessage",
    "ObserveMessage",
    "ActMessage",
    "WaitMessage",
    "SubscribeMessage",
    "JoinData",
    "JoinMessage",
    "ActionData",
    "ObservationReply",
    "PushReply",
    "TeamObservationReply",
    "StateReply",
    "SeatState",
    "AckReply",
    "ErrorReply",
    "EncodedArray",
    "SessionConfig",
    "parse_message",
    "loads_json",
    "encode_array",
    "decode_array",
    "message_schemas",
    "MAX_MESSAGE_BYTES",
    "MAX_WAIT_TICKS",
]

#: Bigger text frames are refused with MESSAGE_TOO_LARGE (the connection stays open).
MAX_MESSAGE_BYTES: Final = 64 * 1024
#: Longest single ``wait``: ten minutes of a 60 Hz world.
MAX_WAIT_TICKS: Final = 36_000
ENCODINGS: Final = ("b64", "list", "none")


class ErrorCode(str, Enum):
    """Error codes: OpenEnv's seven (its client prints them verbatim) and the realtime ones."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    # nonstop's own
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    ACTION_OUT_OF_RANGE = "ACTION_OUT_OF_RANGE"
    NO_SESSION = "NO_SESSION"
    SESSION_ENDED = "SESSION_ENDED"
    BACKPRESSURE = "BACKPRESSURE"
    UNAUTHORIZED = "UNAUTHORIZED"
    READ_ONLY = "READ_ONLY"  # a spectator socket tried to reset, step or act
    # seats (several-seat worlds)
    SEAT_NOT_HELD = "SEAT_NOT_HELD"  # an action (or a request) names a seat this connection does not hold
    UNKNOWN_SEAT = "UNKNOWN_SEAT"  # a seat name the session's env does not have
    SEAT_TAKEN = "SEAT_TAKEN"  # join named a seat another client holds
    SESSION_FULL = "SESSION_FULL"  # join named no seat and every seat is held
    UNKNOWN_TEAM = "UNKNOWN_TEAM"  # a team the session's env does not have (a seat's team: its name up to the last _)


class ProtocolError(Exception):
    """A request the server refuses; becomes an ``error`` reply, never a dropped connection."""

    def __init__(self, code: ErrorCode | str, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code).value
        self.message = message

    def reply(self) -> "ErrorReply":
        return ErrorReply(data={"message": self.message, "code": self.code})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- arrays


class EncodedArray(_Strict):
    """A numpy array as raw bytes in base64 (``np.frombuffer(b64decode(data), dtype).reshape(shape)``)."""

    dtype: str = Field(description="numpy dtype string, e.g. '|u1'")
    shape: list[Annotated[int, Field(ge=0)]]
    b64: str


def encode_array(arr: np.ndarray, encoding: str) -> Any:
    """``b64`` → `EncodedArray` dict, ``list`` → nested lists, ``none`` → None (metadata only)."""
    if encoding == "b64":
        arr = np.ascontiguousarray(arr)
        return {"dtype": arr.dtype.str, "shape": list(arr.shape), "b64": base64.b64encode(arr.tobytes()).decode()}
    if encoding == "list":
        return arr.tolist()
    if encoding == "none":
        return None
    raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")


def decode_array(value: Any) -> np.ndarray | None:
    """Inverse of `encode_array` (a list becomes a float64/int64 array as numpy infers)."""
    if value is None:
        return None
    if isinstance(value, dict):
        enc = EncodedArray.model_validate(value)
        return np.frombuffer(base64.b64decode(enc.b64), np.dtype(enc.dtype)).reshape(enc.shape)
    return np.asarray(value)


# ----------------------------------------------------------------------------- client → server

Encoding = Literal["b64", "list", "none"]
ActionValue = int | float | list[int] | list[float] | list[list[float]]
SeatName = Annotated[str, Field(min_length=1, max_length=64)]


class SessionConfig(_Strict):
    """How a session is built. Every field is optional; the server fills its defaults."""

    env: str | None = Field(default=None, max_length=200, description="env id among those the server serves")
    default: Literal["noop", "repeat", "random"] | None = Field(
        default=None, description="β; the env's own choice if absent"
    )
    queue_mode: Literal["latest", "fifo"] = "latest"
    record: bool | None = Field(default=None, description="record a replay (server default if absent)")
    encoding: Encoding | None = Field(default=None, description="how observations travel (server default if absent)")
    max_ticks: int | None = Field(default=None, ge=1, le=10**9, description="end the session after this many ticks")


class ResetData(SessionConfig):
    """OpenEnv's reset parameters (``seed``, ``episode_id``) plus the session config.

    On a connection without a session, ``reset`` starts one. On a running session it ends the
    current episode (the world resets at its next tick); a ``seed`` or a different config restarts
    the world (a new run and a new replay), since a running env cannot be re-seeded mid-run.
    """

    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    episode_id: str | None = Field(default=None, max_length=255)
    team: SeatName | None = Field(
        default=None,
        description="a new session of a many-seat world: take every seat of this team (replies: team_observation)",
    )


class ResetMessage(_Strict):
    type: Literal["reset"] = "reset"
    data: ResetData = Field(default_factory=ResetData)


class ActionData(_Strict):
    """An action. ``obs_tick`` is the tick of the observation it was computed from (default: the
    newest observation this connection was sent), so the server measures its delay. ``seat``, if
    given, must be the seat this connection holds (a check: a connection acts for its own seat only).
    A connection holding a team sends ``actions`` instead: ``{seat: action}`` for any of its seats
    (one message for the whole team; a seat left out gets nothing this time, so its β acts)."""

    action: ActionValue | None = None
    actions: dict[SeatName, ActionValue] | None = Field(
        default=None, min_length=1, description="a team's actions by seat (a connection holding a team)"
    )
    obs_tick: int | None = Field(default=None, ge=0)
    seat: SeatName | None = Field(default=None, description="the seat this action is for: the connection's own")
    metadata: dict[str, Any] | None = Field(default=None, description="accepted for OpenEnv's typed actions; unused")

    @model_validator(mode="after")
    def _one_of_action_or_actions(self) -> "ActionData":
        if (self.action is None) == (self.actions is None):
            raise ValueError("give exactly one of 'action' (one seat) or 'actions' ({seat: action}, a team)")
        if self.actions is not None and self.seat is not None:
            raise ValueError("'actions' names its seats: leave out 'seat'")
        return self


class StepMessage(_Strict):
    """OpenEnv's step: enqueue the action, return the observation of the tick that applied it."""

    type: Literal["step"] = "step"
    data: ActionData


class StateQuery(_Strict):
    seats: Literal["mine", "all"] = Field(
        default="mine",
        description="several-seat worlds: the reply's seats lists the seats this client holds (mine: one row for "
        "a seat, a team's rows for a team) or every seat of the world (all)",
    )


class StateMessage(_Strict):
    """The session's counters; ``data.seats`` says whose seat rows come back (``mine`` by default)."""

    type: Literal["state"] = "state"
    data: StateQuery = Field(default_factory=StateQuery)


class CloseMessage(_Strict):
    type: Literal["close"] = "close"


class ObserveData(_Strict):
    encoding: Encoding | None = None


class ObserveMessage(_Strict):
    """The newest observation, without acting and without waiting."""

    type: Literal["observe"] = "observe"
    data: ObserveData = Field(default_factory=ObserveData)


class ActMessage(_Strict):
    """Enqueue an action and return at once with an ``ack``; the world never waits for it."""

    type: Literal["act"] = "act"
    data: ActionData


class WaitData(_Strict):
    """Wait ``ticks`` ticks from now, or until absolute tick ``until``: exactly one of the two."""

    ticks: int | None = Field(default=None, ge=1, le=MAX_WAIT_TICKS)
    until: int | None = Field(default=None, ge=0)
    encoding: Encoding | None = None

    @model_validator(mode="after")
    def _one_target(self) -> "WaitData":
        if (self.ticks is None) == (self.until is None):
            raise ValueError("give exactly one of 'ticks' (relative) or 'until' (absolute tick)")
        return self

    def target(self, tick: int) -> int:
        """The absolute tick to wait for, when the session is at ``tick``."""
        if self.until is not None:
            return self.until
        assert self.ticks is not None, "_one_target: a wait has ticks or until"
        return tick + self.ticks


class WaitMessage(_Strict):
    type: Literal["wait"] = "wait"
    data: WaitData


class SubscribeData(_Strict):
    """Push the newest observation every ``every`` ticks (0 stops). A slow reader skips ticks."""

    every: int = Field(ge=0, le=MAX_WAIT_TICKS)
    encoding: Encoding | None = None


class SubscribeMessage(_Strict):
    type: Literal["subscribe"] = "subscribe"
    data: SubscribeData


class JoinData(_Strict):
    """Take a seat in a running session another client created: ``seat`` names it, or, absent,
    the first free seat is taken. Answered with that seat's current observation."""

    session_id: str = Field(min_length=1, max_length=64, description="the session to join (its session_id)")
    seat: SeatName | None = Field(default=None, description="the seat to take; absent: the first free one")
    team: SeatName | None = Field(default=None, description="take every seat of this team (instead of one seat)")
    encoding: Encoding | None = None

    @model_validator(mode="after")
    def _seat_or_team(self) -> "JoinData":
        if self.seat is not None and self.team is not None:
            raise ValueError("give 'seat' (one seat) or 'team' (all of a team's seats), not both")
        return self


class JoinMessage(_Strict):
    type: Literal["join"] = "join"
    data: JoinData


ClientMessage = Annotated[
    ResetMessage
    | StepMessage
    | StateMessage
    | CloseMessage
    | ObserveMessage
    | ActMessage
    | WaitMessage
    | SubscribeMessage
    | JoinMessage,
    Field(discriminator="type"),
]
_CLIENT: Final[TypeAdapter[Any]] = TypeAdapter(ClientMessage)
MESSAGE_TYPES: Final = ("reset", "step", "state", "close", "observe", "act", "wait", "subscribe", "join")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} overflows a float")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def loads_json(raw: str | bytes) -> Any:
    """``json.loads`` of standard JSON only: ``NaN``, ``Infinity`` and numbers past a float (``1e400``,
    which Python would read as infinity) are refused with ``INVALID_JSON``. Integers stay exact; one
    too big for an action's space is refused when the action is checked (``ACTION_OUT_OF_RANGE``).

    >>> loads_json('{"action": [0.5, 2]}')
    {'action': [0.5, 2]}
    >>> try:
    ...     loads_json('{"action": [1e400]}')
    ... except ProtocolError as err:
    ...     err.code
    'INVALID_JSON'
    """
    try:
        return json.loads(raw, parse_float=_finite_float, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ProtocolError(ErrorCode.INVALID_JSON, f"invalid JSON: {exc}") from None


def parse_message(raw: str | bytes) -> Any:
    """Parse and validate one client message or raise `ProtocolError` with the OpenEnv code."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, f"message of {len(raw)} bytes exceeds {MAX_MESSAGE_BYTES}")
    obj = loads_json(raw)
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"a message is a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    if kind not in MESSAGE_TYPES:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE, f"Unknown message type: {kind!r}; expected one of {', '.join(MESSAGE_TYPES)}"
        )
    try:
        return _CLIENT.validate_python(obj)
    except (ValidationError, RecursionError) as exc:
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in getattr(exc, "errors", lambda: [])()[:5]
        )
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"invalid {kind!r} message: {detail or exc}") from None


# ----------------------------------------------------------------------------- server → client


class ObservationFields(_Strict):
    """The ``observation`` dict of an observation reply (what OpenEnv's client hands its user)."""

    obs: Any = Field(description="the env observation: EncodedArray (b64), nested lists, or null")
    tick: int
    time: float = Field(description="the session's clock at this tick: tick · τ_M seconds since its tick 0")
    episode: int
    terminated: bool
    truncated: bool
    total_reward: float
    inaction_ticks: int
    agent_ticks: int
    last_delay: int
    session_id: str
    lifecycle: str
    seat: str | None = Field(default=None, description="the seat these counters are for (several-seat worlds)")


class ObservationData(_Strict):
    """OpenEnv's StepResult shape: ``reward`` is the reward since this connection's previous
    observation; ``done`` says an episode ended since then, and ``observation`` is then that episode's
    terminal one, its ``terminated``/``truncated`` saying how it ended (the world has already started
    the next episode, whose current observation ``reset`` returns)."""

    observation: ObservationFields
    reward: float | None = None
    done: bool = False


class ObservationReply(_Strict):
    type: Literal["observation"] = "observation"
    data: ObservationData


class PushReply(_Strict):
    type: Literal["push"] = "push"
    data: ObservationData


class TeamObservationData(_Strict):
    """A team's observations in one message (a connection holding a team: its ``reset``, ``join``,
    ``observe``, ``wait``, ``step`` and pushes): each of its seats' `ObservationData` by seat name, each
    ``reward`` and ``done`` since this connection's previous look at that seat (an agent that died
    reports ``done`` once, its ``terminated`` set; the world goes on for the others)."""

    team: str
    session_id: str
    tick: int
    seats: dict[str, ObservationData]


class TeamObservationReply(_Strict):
    type: Literal["team_observation"] = "team_observation"
    data: TeamObservationData


class SeatState(_Strict):
    """One seat's counters in a ``state`` reply: who holds it, its inaction and its delay."""

    seat: str
    held: bool = Field(description="a client holds it (else its β plays it)")
    agent_ticks: int
    inaction_ticks: int
    last_delay: int = Field(description="ticks between the observation and the tick of its last applied action")
    total_reward: float


class StateData(BaseModel):
    """OpenEnv's State (``episode_id``, ``step_count``) plus the realtime facts. The counters are
    this connection's seat's; ``seats`` lists the held seats' rows, or every seat's when the request
    asked ``{"seats": "all"}`` (several-seat worlds)."""

    model_config = ConfigDict(extra="forbid")
    episode_id: str | None = None
    step_count: int = 0
    session_id: str
    lifecycle: str
    end_reason: str | None = None
    env: str
    tick: int
    tick_hz: float
    episode: int
    inaction_ticks: int
    agent_ticks: int
    total_reward: float
    queue: dict[str, int]
    record: bool
    seat: str | None = None
    seats: list[SeatState] | None = None


class StateReply(_Strict):
    type: Literal["state"] = "state"
    data: StateData


class AckData(_Strict):
    seq: int = Field(description="the action's sequence number in the session's queue")
    tick: int = Field(description="the world's tick when the action was enqueued")
    obs_tick: int
    seats: int | None = Field(default=None, description="a team's act: how many seats' actions were enqueued")


class AckReply(_Strict):
    type: Literal["ack"] = "ack"
    data: AckData


class ErrorData(_Strict):
    message: str
    code: str


class ErrorReply(_Strict):
    type: Literal["error"] = "error"
    data: ErrorData


def message_schemas() -> dict[str, Any]:
    """JSON Schema of every message, for ``GET /schema`` (OpenEnv's keys first)."""
    return {
        "action": ActionData.model_json_schema(),
        "observation": ObservationFields.model_json_schema(),
        "state": StateData.model_json_schema(),
        "client_messages": {
            m.model_fields["type"].default: m.model_json_schema()
            for m in (
                ResetMessage,
                StepMessage,
                StateMessage,
                CloseMessage,
                ObserveMessage,
                ActMessage,
                WaitMessage,
                SubscribeMessage,
                JoinMessage,
            )
        },
        "server_messages": {
            m.model_fields["type"].default: m.model_json_schema()
            for m in (ObservationReply, PushReply, TeamObservationReply, StateReply, AckReply, ErrorReply)
        },
    }
