"""The server's routes, one module per area, as FastAPI's routers are meant to be.

``admin`` (``/health``, ``/metadata``, ``/schema``, ``/sessions``, ``/replays``), ``ws`` (the
protocol's socket ``/ws``), ``openenv`` (OpenEnv's ``POST /reset``, ``POST /step``, ``GET /state``)
and ``mcp`` (both JSON-RPC dialects at ``/mcp``). Each router finds the app's session manager with
`manager_of`; `nonstop.server.app.create_app` composes them behind the edge's middleware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nonstop.server.sessions import SessionManager

__all__ = ["manager_of"]


def manager_of(app: Any) -> SessionManager:
    """``app``'s session manager, built from ``app.state.manager_options`` at first use when the app
    was made without one (the manager's worker processes start with the server, not with the app)."""
    if app.state.manager is None:
        from nonstop.server.sessions import SessionManager

        app.state.manager = SessionManager(**app.state.manager_options)
    return app.state.manager
