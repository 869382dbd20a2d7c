"""Every end of a run is a clean end (issue 14): a signal stops a command on either clock with the
conventional exit code and a final checkpoint; a killed parent leaves no child and no shared memory
behind; a dead host is named in one line. Each test kills on purpose, then asserts what is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SHM_DIR

from nonstop.learning.checkpoint import latest_checkpoint
from nonstop.realtime.lifeline import ORPHAN_EXIT, hold_lifeline, reap

SRC = str(Path(__file__).parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
TRAIN = [sys.executable, "-m", "nonstop.cli", "train", "--env", "CartPole", "--learning-starts", "50",
         "--batch-size", "8", "--progress-every", "0.5", "--checkpoint-every", "1000"]  # fmt: skip


def _default_sigint() -> None:
    # a background job starts with SIGINT ignored, and Python then keeps it so: give the child
    # the disposition a terminal's foreground job has, so Ctrl-C reaches it as KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=_default_sigint)  # fmt: skip


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc), zombies excluded."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _segments_of(pid: int) -> list[str]:
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith("nonstop_") and f"_{pid}_" in p.name)


def _wait_until(predicate, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"process exited ({proc.returncode}) while waiting for {what}:\n{err[-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _progress_rows(run: Path) -> int:
    path = run / "progress.csv"
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


def _kill_all(proc: subprocess.Popen, pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


# ----------------------------------------------------------------------------- signals stop a run


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_a_virtual_clock_train_with_a_final_checkpoint(tmp_path, signum, code):
    run = tmp_path / "run"
    proc = _start([*TRAIN, "--latency", "5t", "--seconds", "100000", "--out", str(run)])
    try:
        _wait_until(lambda: _progress_rows(run) >= 3, 120, proc, "progress rows")
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        _kill_all(proc, set())
    assert proc.returncode == code, err[-3000:]
    assert took < 30, f"took {took:.1f} s to stop"  # generous: the final checkpoint and log are written first
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.state["env_ticks"] > 0  # the final checkpoint, not a periodic one
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] and summary["complete"] is False and summary["reason"], summary
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- no orphans


@pytest.mark.wall
def test_sigkill_of_a_wall_clock_train_leaves_no_child_and_no_shared_memory(tmp_path):
    run = tmp_path / "run"
    proc = _start([*TRAIN, "--clock", "wall", "--n-learners", "2", "--learner-mode", "hogwild", "--seconds", "600",
                   "--out", str(run)])  # fmt: skip
    children: set[int] = set()
    try:
        # host + 2 learners + the resource tracker, all up and training
        _wait_until(lambda: _progress_rows(run) >= 2 and len(_children(proc.pid)) >= 4, 180, proc, "a running trainer")
        children = _children(proc.pid)
        assert _segments_of(proc.pid), "the trainer owns no shared memory? the test would prove nothing"
        proc.kill()
        proc.wait(timeout=10)
        _wait_until(lambda: not any(_alive(pid) for pid in children), 10, what=f"the children {sorted(children)} to exit")
        _wait_until(lambda: not _segments_of(proc.pid), 10, what="its shared memory to be unlinked")
    finally:
        _kill_all(proc, children)


@pytest.mark.wall
def test_sigkill_of_the_server_leaves_no_tick_worker(tmp_path):
    from nonstop.server.app import free_port

    port = free_port()
    proc = _start([sys.executable, "-m", "nonstop.cli", "serve", "--env", "CartPole", "--port", str(port),
                   "--tick-procs", "2", "--warm-envs", "0", "--log-level", "warning"])  # fmt: skip
    children: set[int] = set()
    try:
        names = lambda: [Path(f"/proc/{p}/cmdline").read_bytes() for p in _children(proc.pid) if _alive(p)]  # noqa: E731
        _wait_until(lambda: sum(b"spawn_main" in n for n in names()) >= 2, 120, proc, "two tick workers")
        children = _children(proc.pid)
        proc.kill()
        proc.wait(timeout=10)
        _wait_until(lambda: not any(_alive(pid) for pid in children), 10, what=f"the tick workers {sorted(children)} to exit")
    finally:
        _kill_all(proc, children)


def _orphan_child(ready, parent_pid) -> None:
    hold_lifeline(parent_pid)
    ready.set()
    time.sleep(60)


def _middle(ready, grandchild_pid) -> None:
    """A parent that starts a lifeline child, then dies without a word."""
    import multiprocessing as mp

    child = mp.get_context("spawn").Process(target=_orphan_child, args=(ready, os.getpid()))
    child.start()
    grandchild_pid.value = child.pid
    ready.wait(60)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_lifeline_child_leaves_within_a_second_when_its_parent_is_killed():
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, grandchild_pid = ctx.Event(), ctx.Value("i", 0)
    middle = ctx.Process(target=_middle, args=(ready, grandchild_pid))
    middle.start()
    assert ready.wait(60)
    reap(middle, timeout=30)
    assert middle.exitcode == -signal.SIGKILL
    died = time.monotonic()
    pid = grandchild_pid.value
    _wait_until(lambda: not _alive(pid), 10, what=f"the orphan {pid} to exit")
    assert time.monotonic() - died < 3  # within a second of its parent, with room for a loaded machine


def test_hold_lifeline_validates_its_arguments():
    with pytest.raises(ValueError, match="parent_pid"):
        hold_lifeline(0)
    with pytest.raises(ValueError, match="poll"):
        hold_lifeline(os.getppid(), poll=0)


def test_reap_climbs_the_ladder_for_a_child_that_ignores_sigterm():
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                              "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert child.stdout.readline().strip() == "up"
    started = time.monotonic()
    assert reap(child, timeout=0.2, kill_after=0.2) == -signal.SIGKILL
    assert time.monotonic() - started < 10
    assert ORPHAN_EXIT == 129
