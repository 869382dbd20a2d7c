"""Lifelines between nonstop's processes: a child never outlives its parent, a parent never leaves
a child behind.

Child side: `hold_lifeline(parent_pid)` is the first thing every child entry point calls (the
wall-clock host, process policies, learners, server tick workers, bench children). From then on,
whatever ends the parent — SIGKILL, an OOM kill, a crash — the child leaves within a second:

* on Linux the kernel sends ``SIGHUP`` the moment the parent dies (``prctl(PR_SET_PDEATHSIG)``
  through ``ctypes``); the parent pid is checked right after, which closes the race of a parent
  that died while the child was starting;
* everywhere, a daemon thread polls ``os.getppid()`` every ``poll`` seconds. This also covers a
  Linux subtlety: the death signal fires when the *thread* that started the child ends, so a child
  started by a supervisor thread gets a ``SIGHUP`` while its parent lives; the handler checks the
  parent pid and ignores such a signal, and the poll stays on watch.

An orphaned child raises ``SystemExit(129)`` in its main thread, so its ``finally`` blocks run (a
host flushes what it can, every holder closes its shared-memory mapping), and ``os._exit`` follows
after ``grace`` seconds whatever the main thread is stuck in. Shared memory needs nothing more:
segments are created with the resource tracker that every spawned child shares, and the tracker
unlinks every segment its creator did not, once the last process holding its pipe is gone — the
last one out unlinks what it owned.

Parent side: `reap(process, timeout)` is the one join → terminate → kill ladder, and
`RestartBudget` says when a part that keeps dying (a learner, an inference worker) has been
restarted enough: then the run ends with that cause instead of restarting it forever.

A stop the user asked for is never lost: the ``nonstop`` command's Ctrl-C and SIGTERM handlers
call `stop_requested` before raising, and the run loops (`VirtualClock.run`, a wall-clock session's
wait) call `raise_if_stop_requested` at every event, because Python swallows an exception raised
while a finalizer or ``__del__`` runs, and a signal may land just there.

>>> import multiprocessing as mp
>>> p = mp.get_context("spawn").Process(target=int)
>>> p.start()
>>> reap(p, timeout=30)  # it exits by itself: nothing is terminated
0
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import Any, Final

__all__ = [
    "hold_lifeline",
    "popen_lifeline",
    "reap",
    "RestartBudget",
    "PartFailed",
    "ORPHAN_EXIT",
    "stop_requested",
    "raise_if_stop_requested",
    "pending_stop",
]

#: Exit status of a child that left because its parent died: 128 + SIGHUP, as if the signal had killed it.
ORPHAN_EXIT: Final = 128 + int(signal.SIGHUP)
_PR_SET_PDEATHSIG: Final = 1


def _set_parent_death_signal(signum: int) -> bool:
    """Ask the Linux kernel to send ``signum`` when our parent dies; False where unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def hold_lifeline(parent_pid: int | None = None, *, poll: float = 0.2, grace: float = 0.5) -> bool:
    """Make this process leave within about a second once ``parent_pid`` is gone. Call it first
    thing in a child's entry point, from its main thread. ``parent_pid`` defaults to the pid of the
    process that started this one as multiprocessing recorded it before the start, so a parent
    that died before this call is noticed at once (``os.getppid()`` outside multiprocessing).
    Returns whether the kernel's death signal is set (the pid poll runs either way).
    """
    if parent_pid is None:
        import multiprocessing

        parent = multiprocessing.parent_process()
        parent_pid = parent.pid if parent is not None and parent.pid else os.getppid()
    if not isinstance(parent_pid, int) or isinstance(parent_pid, bool) or parent_pid <= 0:
        raise ValueError(f"parent_pid must be a positive process id, got {parent_pid!r}")
    if not (poll > 0 and grace >= 0):
        raise ValueError(f"poll must be positive and grace non-negative, got poll={poll!r}, grace={grace!r}")
    on_main = threading.current_thread() is threading.main_thread()
    leaving = threading.Event()

    def orphaned() -> bool:
        return os.getppid() != parent_pid

    def leave(*_: Any) -> None:
        """Runs on the main thread (signal handler): unwind now, and be gone after ``grace``."""
        if not orphaned() or leaving.is_set():
            return  # the thread that started us ended, not our parent: stay (the poll keeps watch)
        leaving.set()
        threading.Thread(target=_exit_after, args=(grace,), name="nonstop-lifeline-exit", daemon=True).start()
        raise SystemExit(ORPHAN_EXIT)

    if on_main:
        signal.signal(signal.SIGHUP, leave)
    armed = _set_parent_death_signal(signal.SIGHUP) if on_main else False
    if orphaned():  # the parent died before the death signal was armed
        os._exit(ORPHAN_EXIT)

    def watch() -> None:
        while not leaving.is_set():
            time.sleep(poll)
            if orphaned():
                if on_main:
                    os.kill(os.getpid(), signal.SIGHUP)  # unwind on the main thread, as the kernel would
                    _exit_after(grace + poll)
                os._exit(ORPHAN_EXIT)

    threading.Thread(target=watch, name="nonstop-lifeline", daemon=True).start()
    return armed


#: The signal of a stop the user asked for (0: none). Set only by the ``nonstop`` command's handlers.
pending_stop: int = 0


def stop_requested(signum: int) -> None:
    """Record that the user asked this process to stop (called by a signal handler)."""
    global pending_stop
    pending_stop = int(signum)


def raise_if_stop_requested() -> None:
    """Raise the exception of a requested stop again (KeyboardInterrupt for SIGINT, else
    ``SystemExit(128 + signal)``), in case the first one was swallowed."""
    if pending_stop:
        if pending_stop == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + pending_stop)


def popen_lifeline(signum: int = signal.SIGTERM) -> Any:
    """A ``preexec_fn`` for `subprocess.Popen` (from the main thread): the command gets ``signum``
    (SIGTERM: it shuts down as it would on ``kill``) when this process dies. Linux only; elsewhere
    it does nothing. The parent pid is checked after arming, which closes the start-up race."""
    parent_pid = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec: no Python threads, no imports
        if _set_parent_death_signal(signum) and os.getppid() != parent_pid:
            os.kill(os.getpid(), signum)

    return arm


def _exit_after(seconds: float) -> None:
    time.sleep(seconds)
    os._exit(ORPHAN_EXIT)


def reap(process: Any, timeout: float = 5.0, *, kill_after: float = 2.0) -> int | None:
    """Make sure a child process is gone: wait ``timeout`` s for it to exit on its own, then
    terminate it (SIGTERM) and wait ``kill_after`` s more, then kill it (SIGKILL). Works on a
    `multiprocessing.Process` and on a `subprocess.Popen`. Returns the exit code."""
    if timeout < 0 or kill_after < 0:
        raise ValueError(f"timeouts must be non-negative, got timeout={timeout!r}, kill_after={kill_after!r}")
    if getattr(process, "pid", None) is None:
        return None  # never started
    wait = _waiter(process)
    for stop, last in ((None, timeout), (process.terminate, kill_after), (process.kill, None)):
        if stop is not None:
            try:
                stop()
            except (ProcessLookupError, OSError):
                pass
        if wait(last):
            break
    return getattr(process, "exitcode", None) if hasattr(process, "exitcode") else process.returncode


def _waiter(process: Any) -> Any:
    if hasattr(process, "exitcode"):  # multiprocessing.Process

        def wait(t: float | None) -> bool:
            process.join(t)
            return process.exitcode is not None

        return wait
    import subprocess

    def wait_popen(t: float | None) -> bool:
        try:
            process.wait(t)
            return True
        except subprocess.TimeoutExpired:
            return False

    return wait_popen


class PartFailed(RuntimeError):
    """A part of a run (a learner, an inference worker) kept dying past its `RestartBudget`: the run
    cannot go on as configured. The message names the part, how often it died, and its last cause."""


class RestartBudget:
    """At most ``max_restarts`` restarts within any ``window_s`` seconds of clock time (the caller
    passes the time: virtual or wall). A part that dies now and then is restarted for ever; one
    that dies again and again (a bad model, an out-of-memory loop) exhausts the budget, and its
    supervisor ends the run with the cause rather than burn the machine restarting it.

    >>> budget = RestartBudget(2, window_s=10.0)
    >>> [budget.spend(t) for t in (0.0, 1.0, 2.0)]  # the third restart within 10 s is refused
    [True, True, False]
    >>> budget.spend(12.5)  # the first two have left the window
    True
    >>> RestartBudget(0, window_s=1.0).spend(0.0)  # 0: never restart
    False
    >>> budget.left(13.0)  # what a death's line says of it
    1
    """

    def __init__(self, max_restarts: int = 5, window_s: float = 60.0) -> None:
        if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
        if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) or not 0 < window_s < float("inf"):
            raise ValueError(f"window_s must be a positive finite number of seconds, got {window_s!r}")
        self.max_restarts, self.window_s = max_restarts, float(window_s)
        self._times: list[float] = []  # restarts granted within the window, oldest first

    def spend(self, now: float) -> bool:
        """Whether a part that died at ``now`` may be restarted (and count it if so)."""
        self._times = [t for t in self._times if t > now - self.window_s]
        if len(self._times) >= self.max_restarts:
            return False
        self._times.append(now)
        return True

    def left(self, now: float) -> int:
        """Restarts still allowed at ``now`` (the ones granted within the window counted)."""
        return max(0, self.max_restarts - sum(t > now - self.window_s for t in self._times))

    def describe(self) -> str:
        return f"{self.max_restarts} restarts within {self.window_s:g} s"
