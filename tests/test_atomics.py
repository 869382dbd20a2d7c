"""Atomics on shared-memory words (nonstop.realtime.atomics) and the paths that rely on them:
counters that lose nothing across processes, locks that a killed holder cannot keep, and a clear
refusal where no atomics backend exists."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing import shared_memory

import gymnasium as gym
import numpy as np
import pytest

import nonstop.learning.weights as weights_module
import nonstop.realtime.atomics as atomics
from nonstop.learning.weights import SharedWeights, TrainingState
from nonstop.realtime.atomics import (
    ACQUIRE,
    RELAXED,
    SEQ_CST,
    AtomicsUnavailableError,
    RobustLock,
    SharedWords,
    pid_alive,
)
from nonstop.realtime.channels import ActionQueue, LatestSlot

N_INCREMENTS = 20_000
CTX = mp.get_context("spawn")


# ----------------------------------------------------------------------------- the words themselves


def test_words_are_signed_64_bit_and_read_modify_write_is_exact():
    words = SharedWords(np.zeros(4, np.int64), count=4)
    try:
        words.store(0, -(2**63))
        assert words.load(0) == -(2**63)
        words.store(1, 2**63 - 1)
        assert words.fetch_add(1, 1) == 2**63 - 1 and words.load(1) == -(2**63)  # wraps like int64
        assert words.fetch_add(2, -3) == 0 and words.load(2, RELAXED) == -3
        assert words.compare_exchange(2, -3, 9) and not words.compare_exchange(2, -3, 10)
        assert words.load(2, SEQ_CST) == 9
        assert words.cell(3).load(ACQUIRE) == 0
    finally:
        words.close()


def test_words_validate_at_the_door():
    buf = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="multiple of 8"):
        SharedWords(buf, 4)
    with pytest.raises(ValueError, match="count must be"):
        SharedWords(buf, 0, 0)
    with pytest.raises(ValueError, match="do not fit"):
        SharedWords(buf, 8, 4)
    with pytest.raises(TypeError, match="writable"):
        SharedWords(bytes(32))
    words = SharedWords(buf, 8, 2)
    with pytest.raises(IndexError, match="out of range"):
        words.load(2)
    with pytest.raises(ValueError):  # an order a load cannot have
        words.load(0, atomics.RELEASE)
    words.close()
    assert words.closed
    with pytest.raises(ValueError):
        words.load(0)


def test_words_address_the_buffer_the_other_views_see():
    buf = np.zeros(6, np.int64)
    words = SharedWords(buf, 16, 2)
    words.store(0, 41)
    words.fetch_add(1, -2)
    assert buf.tolist() == [0, 0, 41, -2, 0, 0]
    words.close()


# ----------------------------------------------------------------------------- counters across processes


def _bump(name: str, n: int, start: mp.Event) -> None:
    shm = shared_memory.SharedMemory(name=name)
    words = SharedWords(shm.buf, 0, 1)
    start.wait()
    for _ in range(n):
        words.fetch_add(0, 1)
    words.close()
    shm.close()


def test_fetch_add_from_two_processes_loses_nothing():
    shm = shared_memory.SharedMemory(create=True, size=64)
    words = SharedWords(shm.buf, 0, 1)
    try:
        words.store(0, 0)
        start = CTX.Event()
        procs = [CTX.Process(target=_bump, args=(shm.name, N_INCREMENTS, start)) for _ in range(2)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0, 0]
        assert words.load(0) == 2 * N_INCREMENTS
    finally:
        words.close()
        shm.close()
        shm.unlink()


def _claim(state: TrainingState, n: int, start: mp.Event, out: mp.Queue) -> None:
    start.wait()
    steps = [state.claim_update() for _ in range(n)]
    out.put((min(steps), max(steps), len(set(steps))))
    state.close()


def test_hogwild_update_counter_from_two_learner_processes_loses_nothing(no_shm_leak):
    """Issue 14: 2 processes x 20,000 Hogwild updates left the plain counter at 24,436."""
    state = TrainingState.create(4)
    try:
        start, out = CTX.Event(), CTX.Queue()
        procs = [CTX.Process(target=_claim, args=(state, N_INCREMENTS, start, out)) for _ in range(2)]
        for p in procs:
            p.start()
        start.set()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
        assert state.updates == 2 * N_INCREMENTS
        assert all(distinct == N_INCREMENTS for _, _, distinct in results)  # every update got its own number
        assert min(lo for lo, _, _ in results) == 1 and max(hi for _, hi, _ in results) == 2 * N_INCREMENTS
    finally:
        state.unlink()


def _locked_increments(name: str, n: int, start: mp.Event) -> None:
    shm = shared_memory.SharedMemory(name=name)
    words = SharedWords(shm.buf, 0, 1)
    plain = np.ndarray((1,), np.int64, shm.buf, 8)  # a plain word: only the lock keeps it exact
    lock = RobustLock(words, 0)
    start.wait()
    for _ in range(n):
        with lock:
            plain[0] = plain[0] + 1
    del plain
    words.close()
    shm.close()


def test_robust_lock_excludes_processes_and_orders_plain_data():
    shm = shared_memory.SharedMemory(create=True, size=64)
    shm.buf[:16] = bytes(16)
    try:
        start = CTX.Event()
        procs = [CTX.Process(target=_locked_increments, args=(shm.name, 5_000, start)) for _ in range(2)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0, 0]
        assert int(np.ndarray((1,), np.int64, shm.buf, 8)[0]) == 10_000
    finally:
        shm.close()
        shm.unlink()


def test_robust_lock_excludes_threads_of_one_process():
    words = SharedWords(np.zeros(1, np.int64))
    lock = RobustLock(words, 0)
    total = [0]

    def work() -> None:
        for _ in range(2_000):
            with lock:
                v = total[0]
                time.sleep(0) if v % 97 == 0 else None  # give the others a chance to barge in
                total[0] = v + 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert total[0] == 8_000 and lock.owner == 0
    words.close()


@pytest.mark.wall
def test_robust_lock_timeout_and_release_by_a_non_holder():
    words = SharedWords(np.zeros(1, np.int64))
    lock = RobustLock(words, 0)
    words.store(0, os.getppid())  # held by a live process that is not us
    t0 = time.monotonic()
    assert lock.acquire(timeout=0.05) is False
    assert time.monotonic() - t0 >= 0.05
    with pytest.raises(RuntimeError, match="not by this process"):
        lock.release()
    words.store(0, 0)
    assert lock.acquire(timeout=0) and lock.owner == os.getpid()
    lock.release()
    with pytest.raises(ValueError, match="no word"):
        RobustLock(words, 1)
    with pytest.raises(TypeError):
        RobustLock(np.zeros(1, np.int64), 0)  # type: ignore[arg-type]
    words.close()


# ----------------------------------------------------------------------------- holders that die


def _hold_and_hang(name: str, ready: mp.Event) -> None:
    shm = shared_memory.SharedMemory(name=name)
    words = SharedWords(shm.buf, 0, 1)
    RobustLock(words, 0).acquire()
    ready.set()
    time.sleep(600)  # killed while holding the lock


@pytest.mark.wall
@pytest.mark.parametrize("reaped", [False, True], ids=["zombie", "reaped"])
def test_lock_of_a_sigkilled_holder_is_recovered(reaped):
    shm = shared_memory.SharedMemory(create=True, size=64)
    words = SharedWords(shm.buf, 0, 1)
    try:
        words.store(0, 0)
        ready = CTX.Event()
        p = CTX.Process(target=_hold_and_hang, args=(shm.name, ready))
        p.start()
        assert ready.wait(60)
        lock = RobustLock(words, 0)
        assert lock.owner == p.pid and pid_alive(p.pid)
        assert lock.acquire(timeout=0.05) is False  # a live holder keeps it
        os.kill(p.pid, signal.SIGKILL)
        if reaped:
            p.join(30)
        else:  # not yet reaped: a zombie still answers kill(pid, 0), but it is dead
            deadline = time.monotonic() + 30
            while pid_alive(p.pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert not pid_alive(p.pid)
        assert lock.acquire(timeout=10) is True
        assert lock.steals == 1 and lock.owner == os.getpid()
        lock.release()
        p.join(30)
    finally:
        words.close()
        shm.close()
        shm.unlink()


def _submit_holding_the_lock(queue: ActionQueue, ready: mp.Event) -> None:
    queue.submit(1, obs_tick=0, episode=0)
    queue._lock.acquire()  # as if killed in the middle of a submit
    ready.set()
    time.sleep(600)


def test_action_queue_survives_a_submitter_killed_inside_its_lock(no_shm_leak):
    q = ActionQueue.create(gym.spaces.Discrete(4), mode="fifo")
    try:
        ready = CTX.Event()
        p = CTX.Process(target=_submit_holding_the_lock, args=(q, ready))
        p.start()
        assert ready.wait(60)
        p.kill()
        p.join(30)
        assert q.take(episode=0).record.action == 1  # the host steals the lock: the world goes on
        assert q.lock_steals == 1
        q.submit(2, obs_tick=1, episode=0)
        assert q.take(episode=0).record.action == 2 and q.counters()["submitted"] == 2
    finally:
        q.unlink()


def _publish_holding_the_lock(weights: SharedWeights, ready: mp.Event) -> None:
    weights.publish(np.full(weights.n_params, 1.0, np.float32))
    weights._lock.acquire()  # as if killed in the middle of a publish
    weights._hdr.store(0, 2)  # ``begun`` moved, buffer half written: a reader must not take it
    ready.set()
    time.sleep(600)


def test_weights_publish_survives_a_learner_killed_mid_publish(no_shm_leak):
    weights = SharedWeights.create(8)
    try:
        ready = CTX.Event()
        p = CTX.Process(target=_publish_holding_the_lock, args=(weights, ready))
        p.start()
        assert ready.wait(60)
        p.kill()
        p.join(30)
        out = np.zeros(8, np.float32)
        assert weights.read_into(out) == 1 and out.tolist() == [1.0] * 8
        assert weights.publish(np.full(8, 3.0, np.float32)) == 2  # the lock is stolen from the dead learner
        assert weights.read_into(out) == 2 and out.tolist() == [3.0] * 8
    finally:
        weights.unlink()


def test_target_seqlock_survives_a_writer_killed_mid_copy(no_shm_leak):
    state = TrainingState.create(3)
    try:
        state.params[:] = 1.0
        assert state.write_target() == 2
        out = np.zeros(3, np.float32)
        assert state.read_target_into(out) == 2 and out.tolist() == [1.0] * 3
        state._hdr.store(weights_module._TARGET_VERSION, 3)  # a writer died between odd and even
        assert state.read_target_into(out) is None  # never taken as complete
        state.params[:] = 5.0
        assert state.write_target() == 4  # the next writer does not invert odd and even
        assert state.read_target_into(out) == 4 and out.tolist() == [5.0] * 3
    finally:
        state.unlink()


def test_pass_turn_moves_only_the_expected_turn(no_shm_leak):
    state = TrainingState.create(1)
    try:
        assert state.pass_turn(0) and state.turn == 1
        assert not state.pass_turn(0) and state.turn == 1  # a stale skip does nothing
    finally:
        state.unlink()


def test_pid_alive():
    assert pid_alive(os.getpid()) and not pid_alive(0) and not pid_alive(-1)
    p = CTX.Process(target=time.sleep, args=(0,))
    p.start()
    p.join(30)
    assert not pid_alive(p.pid)


# ----------------------------------------------------------------------------- no backend: refuse


def test_without_an_atomics_backend_shared_memory_is_refused_not_corrupted(monkeypatch, no_shm_leak):
    monkeypatch.setattr(atomics, "_backend", None)
    monkeypatch.setattr(atomics, "_IMPORT_ERROR", "ModuleNotFoundError: No module named 'atomicshm'", raising=False)
    with pytest.raises(AtomicsUnavailableError, match="pip install atomicshm"):
        LatestSlot.create(np.zeros(3, np.float32))
    with pytest.raises(AtomicsUnavailableError, match="torn"):
        ActionQueue.create(gym.spaces.Discrete(2))
    with pytest.raises(AtomicsUnavailableError):
        SharedWeights.create(4)
    with pytest.raises(AtomicsUnavailableError):
        SharedWords(np.zeros(1, np.int64))
