"""Waking an asyncio event loop from tick threads: `LoopWaker` resolves the futures a session's
waiters parked (`nonstop.server.session.ServerSession.wait_tick`), one loop wake-up per batch.
"""

from __future__ import annotations

import asyncio
import threading

__all__ = ["LoopWaker"]


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class LoopWaker:
    """Resolves futures of one event loop from tick threads, one loop wake-up per batch.

    ``call_soon_threadsafe`` per future costs a self-pipe write each (a syscall that also hands the
    GIL around); with many sessions due close together, the futures released while the loop has not
    yet run share one wake-up instead.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._ready: list[asyncio.Future] = []
        self._lock = threading.Lock()
        self._armed = False

    def resolve(self, fut: asyncio.Future) -> None:
        """Any thread: resolve ``fut`` on its loop soon."""
        with self._lock:
            self._ready.append(fut)
            if self._armed:
                return
            self._armed = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready, self._armed = self._ready, [], False
        for fut in ready:
            _resolve(fut)
