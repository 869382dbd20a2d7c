"""OpenEnv's HTTP routes: ``POST /reset``, ``POST /step``, ``GET /state`` (`nonstop.server.openenv_http`
says how HTTP sessions are named and bound to their client's key). Each route finds the app's
`HttpPlayers` on ``app.state.http_players``; a refusal keeps the protocol's code, with its HTTP status."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from nonstop.server.openenv_http import KEY_COOKIE, client_key, refusal, validation_error
from nonstop.server.protocol import (
    ActionData,
    ErrorCode,
    ProtocolError,
    ResetData,
    StateQuery,
    StateMessage,
    StepMessage,
    loads_json,
)

__all__ = ["router"]

router = APIRouter()


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    data = loads_json(raw)
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, "the body must be a JSON object")
    return data


def _session_id(data: dict[str, Any]) -> str | None:
    sid = data.pop("session_id", None)
    if sid is not None and not isinstance(sid, str):
        raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"session_id must be a string, got {sid!r}")
    return sid


@router.post("/reset")
async def reset(request: Request) -> JSONResponse:
    """OpenEnv's reset: ``{"seed": 7, "episode_id": "..."}`` plus nonstop's session config."""
    try:
        data = await _body(request)
        sid = _session_id(data)
        try:
            reset_data = ResetData(**data)
        except ValidationError as exc:
            raise validation_error(exc, "reset") from None
        reply, key = await request.app.state.http_players.reset(sid, client_key(request), reset_data)
        response = JSONResponse(reply)
        response.set_cookie(KEY_COOKIE, key, httponly=True, samesite="strict")
        return response
    except ProtocolError as exc:
        return refusal(exc)


@router.post("/step")
async def step(request: Request) -> JSONResponse:
    """OpenEnv's step: ``{"action": {"action": 1}}``; returns the tick that applied it."""
    try:
        data = await _body(request)
        sid = _session_id(data)
        action = data.pop("action", None)
        data.pop("timeout_s", None), data.pop("request_id", None)  # OpenEnv's; a step here never hangs
        if data:
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, f"unknown fields in step: {sorted(data)}")
        if not isinstance(action, dict):
            raise ProtocolError(ErrorCode.VALIDATION_ERROR, 'step needs {"action": {"action": ...}}')
        try:
            msg = StepMessage(data=ActionData(**action))
        except ValidationError as exc:
            raise validation_error(exc, "action") from None
        reply = await request.app.state.http_players.get(sid, client_key(request)).handle(msg)
        return JSONResponse(reply["data"])
    except ProtocolError as exc:
        return refusal(exc)


@router.get("/state")
async def state(request: Request, session_id: str | None = None, seats: str = "mine") -> JSONResponse:
    """OpenEnv's state (``episode_id``, ``step_count``) and the session's realtime counters; ``seats``:
    ``mine`` (the held seats' rows only) or ``all`` (every seat's)."""
    try:
        try:
            msg = StateMessage(data=StateQuery.model_validate({"seats": seats}))
        except ValidationError as exc:
            raise validation_error(exc, "state") from None
        conn = request.app.state.http_players.get(session_id, client_key(request))
        return JSONResponse((await conn.handle(msg)).data.model_dump())
    except ProtocolError as exc:
        return refusal(exc)
