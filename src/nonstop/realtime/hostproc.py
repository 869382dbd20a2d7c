"""The wall-clock host's process machinery: where the host runs (its own process, or a thread where
no process can start: `host_mechanism`), at what scheduling priority (`raise_priority`), and the
entry point that builds the world, ticks it on the `WallClock` and sends its log back through a pipe
(`host_main`). `nonstop.realtime.host.Session` starts it and collects what it sends.
"""

from __future__ import annotations

import ast
import multiprocessing as mp
import os
import signal
import sys
import traceback
from types import FrameType
from typing import Any, Final

from nonstop.realtime.channels import ActionQueue, LatestSlot
from nonstop.realtime.clock import WallClock
from nonstop.realtime.defaults import make_default
from nonstop.realtime.hostloop import STATE_FAILED, Host
from nonstop.realtime.lifeline import hold_lifeline
from nonstop.realtime.worlds import EnvSource, build_env

__all__ = [
    "HOST_SCHED",
    "HOST_MODES",
    "raise_priority",
    "main_reimport_safe",
    "host_mechanism",
    "host_main",
    "flat_channels",
]

#: How the wall-clock host process may be scheduled (``Session(host_sched=...)``).
HOST_SCHED: Final = ("auto", "fifo", "nice", "normal")
#: SCHED_FIFO priority of the host: above every normal task, far below the kernel's own threads.
_FIFO_PRIORITY = 10
_NICE = -10


def raise_priority(policy: str, pid: int = 0) -> str:
    """Give process ``pid`` (0: this one) a realtime scheduling priority, as far as permitted.

    ``fifo``: SCHED_FIFO, so the host preempts every normal task the moment its deadline comes (on
    a loaded 2-core machine p99 tick lateness fell from ~18 ms to under 1 µs, ``nonstop bench clock``);
    the kernel's RT throttling still leaves others 5 % of each core. ``nice``: nice −10. ``auto``:
    fifo, else nice. Without the permission (CAP_SYS_NICE) nothing changes, silently. Returns the
    policy actually in force: ``"fifo"``, ``"nice"`` or ``"normal"``.
    """
    if policy not in HOST_SCHED:
        raise ValueError(f"host_sched must be one of {HOST_SCHED}, got {policy!r}")
    if policy in ("auto", "fifo"):
        try:
            os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(_FIFO_PRIORITY))
            return "fifo"
        except (PermissionError, OSError, AttributeError):
            if policy == "fifo":
                return "normal"
    if policy in ("auto", "nice"):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, _NICE)
            return "nice"
        except (PermissionError, OSError, AttributeError):
            pass
    return "normal"


#: Where the wall-clock host runs (``Session(host_mode=...)``).
HOST_MODES: Final = ("auto", "process", "thread")


def _guarded_by_main_check(path: str, line: int) -> bool:
    """Whether ``line`` of the script at ``path`` lies inside ``if __name__ == "__main__":``."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return True  # cannot tell: assume the usual guarded script
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            if node.body[0].lineno <= line <= (node.body[-1].end_lineno or line):
                return True
    return False


def main_reimport_safe() -> bool:
    """Whether a spawned child can re-import ``__main__`` without re-running this very call.

    Python's ``spawn`` start method imports the parent's main script again in the child. A script
    that starts a wall-clock session at top level, without an ``if __name__ == "__main__":``
    guard, would then start it again in the child, which multiprocessing forbids. We look at
    the call stack: if it passes through ``__main__``'s top-level code outside such a guard,
    spawning is not safe.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None:
        return True  # interactive, ``python -c``, notebooks: nothing is re-imported
    if not os.path.isfile(path):
        return False  # ``python - < script``: a child cannot re-import "<stdin>" at all
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            return _guarded_by_main_check(path, frame.f_lineno)
        frame = frame.f_back
    return True


def host_mechanism(requested: str) -> str:
    """``"process"`` or ``"thread"``: where a wall-clock host runs for ``host_mode=requested``.

    ``"auto"`` gives the host its own process (its own interpreter and GIL, realtime priority:
    ``nonstop bench clock``), except where no child process can be started: inside a daemonic
    process (Gymnasium's ``AsyncVectorEnv`` and SB3's ``SubprocVecEnv`` workers) or from the
    top level of a script without a ``__main__`` guard (see `main_reimport_safe`). There the host
    runs as a thread of this process, on the same clock and channels.
    """
    if requested not in HOST_MODES:
        raise ValueError(f"host_mode must be one of {HOST_MODES}, got {requested!r}")
    if requested == "process" and mp.current_process().daemon:
        raise RuntimeError(
            "host_mode='process' cannot start a host process inside a daemonic process "
            "(multiprocessing forbids it); use host_mode='auto' or 'thread'"
        )
    if requested != "auto":
        return requested
    if mp.current_process().daemon or not main_reimport_safe():
        return "thread"
    return "process"


def host_main(conn: Any, env: EnvSource, env_kwargs: dict, slot: LatestSlot, queue: ActionQueue, cfg: dict) -> None:
    """Entry point of the host on the wall clock: its own process, or a thread of the session's
    (``cfg["thread"]``: then the channels are the session's own objects and stay open)."""
    in_thread = cfg.get("thread", False)
    if not in_thread:
        hold_lifeline()  # a host process never ticks on for a dead session
        # The session owns shutdown: Ctrl-C reaches it, and it asks us to stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    host = None
    status, tb = "ok", ""
    try:
        world = build_env(env, env_kwargs)
        if cfg.get("seats") is not None:  # one β per seat
            default: Any = [make_default(d, noop_action=n) for d, n in zip(cfg["default"], cfg["noop_action"])]
        else:
            default = make_default(cfg["default"], noop_action=cfg["noop_action"])
        host = Host(
            world,
            slot,
            queue,
            tau_m=cfg["tau_m"],
            default=default,
            seed=cfg["seed"],
            max_ticks=cfg["max_ticks"],
            unthrottled=cfg["unthrottled"],
            meta=cfg["meta"],
            recorder=cfg.get("recorder"),
            render_slot=cfg.get("render_slot"),
            log_dir=cfg["log_dir"],
            log_chunk_rows=cfg["log_chunk_rows"],
            seats=cfg.get("seats"),
        )
        clock = WallClock(origin=cfg["origin"], spin=cfg["spin"])
        # an unthrottled host never sleeps: at realtime priority it would take a core outright
        host.log.meta["host_sched"] = raise_priority(cfg["host_sched"]) if not cfg["unthrottled"] else "normal"
        parent = None if in_thread else mp.parent_process()
        process = host.run(clock)
        wake = next(process)
        conn.send(("ready", host.origin))
        n = 0
        while True:
            woke = clock.sleep_until(wake)
            wake = process.send(woke)
            n += 1
            if n & 63 == 0 and parent is not None and not parent.is_alive():
                break  # orphaned: stop rather than tick forever
    except StopIteration:
        pass
    except BaseException:
        status, tb = "error", traceback.format_exc()
        slot.host_state = STATE_FAILED
    finally:
        payload: Any = None
        if host is not None:
            try:
                # streaming to a directory: the parent reads the chunks there, nothing big crosses the pipe
                payload = {"directory": str(host.log.directory)} if host.log.directory is not None else None
                log = host.close_log()
                if payload is None:  # in memory: chunk by chunk, never the whole log as one copy
                    for rows in log.row_blocks():
                        conn.send(("chunk", rows))
                    payload = {"meta": log.meta, "tau_m": log.tau_m, "seats": log.seats}
            except BaseException:
                if status == "ok":
                    status, tb = "error", traceback.format_exc()
        try:
            conn.send((status, (payload, tb)))
        except (BrokenPipeError, OSError):
            pass
        if host is not None and in_thread:
            host.env.close()
        if not in_thread:
            for channel in flat_channels(slot, queue, cfg.get("render_slot")):
                channel.close()


def flat_channels(*items: Any) -> list[Any]:
    """Channels (or lists of them, one per seat) flattened, Nones left out."""
    out: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out.extend(c for c in item if c is not None)
        elif item is not None:
            out.append(item)
    return out
