"""A policy in a process of its own (`ProcessPolicy`): real models on one torch thread each, so N_I
workers use N_I cores. Its worker thread in `nonstop.inference.workers` ships each observation over a pipe."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from nonstop.policies.memory import DEFAULT_MIN_FREE, check_min_free
from nonstop.realtime.deaths import exit_cause
from nonstop.realtime.lifeline import hold_lifeline, reap

__all__ = ["ProcessPolicy"]


def _policy_process(conn: Any, factory: Callable[[], Any], torch_threads: int | None, trim_above: int | None) -> None:
    import signal

    from nonstop.policies.memory import WorkingSetRelease

    hold_lifeline()  # a model process never outlives the pool that asked for it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    if torch_threads is not None:  # None: a policy with no model here (a remote lane) never imports torch
        try:
            import torch

            torch.set_num_threads(torch_threads)
        except ImportError:
            pass
    policy = factory()
    release = WorkingSetRelease(trim_above)
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            break
        try:
            conn.send(("ok", policy.act(msg)))
        except Exception:
            conn.send(("error", traceback.format_exc()))
        release.after_pass()  # the decision is out: the pass's working set goes back in the background
    release.close()


class ProcessPolicy:
    """A policy running in its own process (real models: one torch thread per
    process by default, so N_I processes use N_I cores, not N_I × all cores).

    ``factory`` must be picklable (a module-level function or a
    ``functools.partial`` of one). ``act`` ships the observation over a pipe
    (~100 µs, small next to a model's inference) and returns its `Decision`.
    After each pass the process hands its forward pass's working set back to the OS when it
    holds more than ``trim_above`` bytes free (`nonstop.policies.memory`; None: never), so N
    workers sharing one θ do not also keep N working sets. ``torch_threads=None``: the process never
    imports torch (a policy without a model, a `nonstop.inference.lanering.RemoteLane`).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        torch_threads: int | None = 1,
        start_timeout: float = 120.0,
        trim_above: int | None = DEFAULT_MIN_FREE,
        wait: bool = True,
    ) -> None:
        check_min_free(trim_above, "trim_above")  # at the door, not in the child
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_policy_process, args=(child, factory, torch_threads, trim_above), name="nonstop-policy", daemon=True
        )
        self._process.start()
        child.close()
        self.start_timeout = start_timeout
        self._ready = False
        self._lost = False  # its pipe closed under `act`: the process is dead or dying
        if wait:
            self.wait_started()

    def wait_started(self, timeout: float | None = None) -> "ProcessPolicy":
        """Block until the process has built its policy (``timeout``: ``start_timeout``). With
        ``wait=False`` N processes start together (`InferencePool.start` waits for all of them after
        spawning all): on N cores about one start's time, not N. A failed start stops the process
        and raises."""
        if self._ready:
            return self
        timeout = self.start_timeout if timeout is None else timeout
        try:
            if not self._conn.poll(timeout):
                raise TimeoutError(f"policy process did not start within {timeout:g}s")
            self._conn.recv()
        except (EOFError, OSError) as exc:
            self.close()
            raise RuntimeError(f"policy process {self._process.pid} died while building its policy") from exc
        except TimeoutError:
            self.close()
            raise
        self._ready = True
        return self

    def act(self, obs: np.ndarray) -> Any:
        if not self._ready:
            self.wait_started()
        try:
            self._conn.send(obs)
            kind, payload = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            self._lost = True
            raise RuntimeError(f"policy process {self._process.pid} died") from exc
        if kind == "error":
            raise RuntimeError(f"policy raised in its process:\n{payload}")
        return payload

    @property
    def pid(self) -> int | None:
        """The model process's pid."""
        return self._process.pid

    def exit_cause(self, wait: float = 1.0) -> str | None:
        """What ended the model process (`nonstop.realtime.deaths.exit_cause`): None while it runs; for
        one whose pipe closed (`act` saw it die), up to ``wait`` seconds for the kernel to finish its exit."""
        if not self._lost and self._process.is_alive():
            return None
        self._process.join(wait)
        code = self._process.exitcode
        return None if code is None else exit_cause(code)

    def kill(self) -> None:
        self._process.kill()

    def close(self) -> None:
        try:
            if self._process.is_alive():
                self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        reap(self._process, timeout=2)
        self._conn.close()
