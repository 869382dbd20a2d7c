"""Read-only routes about the server and its sessions: ``/health`` (503 when ticks stop advancing),
``/metadata``, ``/schema``, ``/sessions``, ``/sessions/{id}`` and ``/replays``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from nonstop.server.protocol import MESSAGE_TYPES, message_schemas
from nonstop.server.routes import manager_of

__all__ = ["router", "DESCRIPTION"]

router = APIRouter()

DESCRIPTION = (
    "Realtime worlds that never wait: the world ticks on its own clock; when no action is "
    "ready the default behaviour β acts and the tick counts as inaction."
)


@router.get("/health")
def health(request: Request) -> JSONResponse:
    app = request.app
    report = manager_of(app).health()
    report["connections"] = app.state.connections
    report["max_connections"] = app.state.settings.max_connections
    return JSONResponse(report, status_code=200 if report["ticks_advancing"] else 503)


@router.get("/metadata")
def metadata(request: Request) -> dict[str, Any]:
    m = manager_of(request.app)
    return {
        "name": "nonstop",
        "description": DESCRIPTION,
        "default_env": m.default_env,
        "envs": {
            env_id: {
                "tick_hz": spec.tick_hz,
                "default_beta": spec.default_beta,
                "description": spec.description,
                **spec.spaces(),
            }
            for env_id, spec in m.specs.items()
        },
        "messages": list(MESSAGE_TYPES),
        "max_sessions": m.max_sessions,
        "idle_timeout_s": m.idle_timeout,
        "records_replays": m.record,
    }


@router.get("/schema")
def schema() -> dict[str, Any]:
    return message_schemas()


@router.get("/sessions")
def sessions(request: Request) -> list[dict[str, Any]]:
    return manager_of(request.app).list_sessions()


@router.get("/sessions/{sid}")
def session(request: Request, sid: str) -> JSONResponse:
    for info in manager_of(request.app).list_sessions():
        if info["session_id"] == sid:
            return JSONResponse(info)
    return JSONResponse({"type": "error", "data": {"message": f"no session {sid}", "code": "NO_SESSION"}}, 404)


@router.get("/replays")
def replays(request: Request) -> list[dict[str, Any]]:  # names only: where they lie is no client's business
    return [{"name": r["name"], "bytes": r["bytes"]} for r in manager_of(request.app).list_replays()]
