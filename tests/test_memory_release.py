"""A worker hands its forward pass's working set back between passes (`nonstop.policies.memory`),
so N workers sharing one θ do not keep N working sets (issue 12's ≤ 1.5× target lives in
``nonstop bench weights``; these tests check the mechanism and its wiring)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from nonstop.inference.workers import ProcessPolicy
from nonstop.policies.base import Decision
from nonstop.policies.memory import WorkingSetRelease, heap_free_bytes

pytestmark = pytest.mark.skipif(heap_free_bytes() is None, reason="needs glibc's malloc_trim (Linux)")

MIB = 2**20


def _anonymous_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Anonymous line in smaps_rollup")


class _Churner:
    """A policy whose pass allocates and frees ~32 MiB in 64 KiB pieces (below glibc's mmap
    threshold, so from the heap, as a forward pass's activations are), under one piece it keeps:
    the freed memory is a hole in the heap that glibc's own top trimming cannot return."""

    def __init__(self) -> None:
        self.kept: list[np.ndarray] = []

    def act(self, obs: object) -> Decision:
        pieces = [np.ones(64 * 1024 // 8) for _ in range(512)]
        self.kept.append(np.ones(64 * 1024 // 8))
        total = float(sum(p[0] for p in pieces))
        del pieces
        return Decision(int(total))


def _churner() -> _Churner:
    return _Churner()


_SCRIPT = """
import sys, time
import numpy as np
from nonstop.policies.memory import WorkingSetRelease
def anon():
    for line in open('/proc/self/smaps_rollup'):
        if line.startswith('Anonymous:'):
            return int(line.split()[1]) * 1024
pieces = [np.ones(8192) for _ in range(512)]  # 32 MiB from the heap,
pin = np.ones(8192)  # and one piece above them that stays: freeing the rest leaves a hole, not a top
del pieces
before = anon()
release = WorkingSetRelease(min_free=int(sys.argv[1]))
release.after_pass()
time.sleep(0.5)
release.close()
print(before, anon(), release.trims)
"""


def _in_fresh_process(min_free: int) -> tuple[int, int, int]:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(min_free)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after, trims = (int(x) for x in done.stdout.split())
    return before, after, trims


def test_a_heap_holding_more_than_the_threshold_free_is_trimmed():
    before, after, trims = _in_fresh_process(4 * MIB)
    assert trims == 1
    assert before - after > 16 * MIB, (before, after)  # most of the 32 MiB went back


def test_a_heap_below_the_threshold_is_left_alone():
    before, after, trims = _in_fresh_process(1024 * MIB)
    assert trims == 0
    assert before - after < 4 * MIB, (before, after)


@pytest.mark.slow
def test_a_process_worker_releases_its_working_set_unless_told_not_to():
    kept = {}
    for trim_above in (None, 4 * MIB):
        policy = ProcessPolicy(_churner, trim_above=trim_above)
        try:
            assert policy.act(np.zeros(1)).action == 512
            time.sleep(0.5)  # the trim runs after the reply, on the worker's own thread
            kept[trim_above] = _anonymous_bytes(policy._process.pid)
        finally:
            policy.close()
    assert kept[None] - kept[4 * MIB] > 16 * MIB, kept


@pytest.mark.parametrize("bad", [-1, 1.5, "4MiB", True])
def test_a_bad_threshold_is_refused_before_a_process_starts(bad):
    with pytest.raises(ValueError, match="trim_above must be a number of bytes >= 0 or None"):
        ProcessPolicy(_churner, trim_above=bad)
    with pytest.raises(ValueError, match="min_free must be a number of bytes"):
        WorkingSetRelease(bad)
