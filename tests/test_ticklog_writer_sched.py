"""The tick log's background writer never preempts the appender when a seal wakes it (issue 41).

A seal hands its chunk to the writer thread by waking it. As an ordinary thread, woken on the
appender's core, it preempted the appender, which then waited behind the machine's other work:
1-5 ms at a third of the seals on a loaded machine (``nonstop bench ticklog --sched normal``).
The writer now runs as SCHED_BATCH (the same CPU share, no preemption on wake-up)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from nonstop.realtime.ticklog import SEAT_COLUMNS, TickLog

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")


def _append(log: TickLog, ticks: range) -> None:
    values = np.zeros(len(SEAT_COLUMNS))
    for t in ticks:
        log.append_tick(t, t / 60, t / 60, episode=0, terminated=False, truncated=False, step_s=0.0, seats=values)


def _policy_soon(tid: int, want: int, seconds: float = 5.0) -> int:
    """The thread's scheduling policy, once it is ``want`` or ``seconds`` have passed (the writer sets
    its own as it starts)."""
    end = time.monotonic() + seconds
    while (policy := os.sched_getscheduler(tid)) != want and time.monotonic() < end:
        time.sleep(0.01)
    return policy


def test_writer_thread_is_batch_under_an_ordinary_appender(tmp_path) -> None:
    assert os.sched_getscheduler(0) == os.SCHED_OTHER, "the test process itself must be an ordinary one"
    log = TickLog(1 / 60, directory=tmp_path / "log", chunk_rows=16)
    try:
        writer = log._writer
        assert writer is not None
        tid = writer.thread.native_id
        assert tid is not None
        assert _policy_soon(tid, os.SCHED_BATCH) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the appender's own thread is untouched
        _append(log, range(1, 50))  # three seals: the chunks still reach the directory
    finally:
        log.close()
    assert len(list((tmp_path / "log").glob("chunk-*.npz"))) == 4
    assert len(TickLog.load(tmp_path / "log")) == 49
