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

from conftest import process_alive, segments_of

from nonstop.learning.checkpoint import latest_checkpoint
from nonstop.realtime.lifeline import ORPHAN_EXIT, hold_lifeline, reap

SRC = str(Path(__file__).parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
TRAIN = [
    sys.executable,
    "-m",
    "nonstop.cli",
    "train",
    "--env",
    "CartPole",
    "--learning-starts",
    "50",
    "--batch-size",
    "8",
    "--progress-every",
    "0.5",
    "--checkpoint-every",
    "1000",
]


def _default_sigint() -> None:
    # a background job starts with SIGINT ignored, and Python then keeps it so: give the child
    # the disposition a terminal's foreground job has, so Ctrl-C reaches it as KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, preexec_fn=_default_sigint
    )


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
@pytest.mark.wall
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
    proc = _start(
        [
            *TRAIN,
            "--clock",
            "wall",
            "--n-learners",
            "2",
            "--learner-mode",
            "hogwild",
            "--seconds",
            "600",
            "--out",
            str(run),
        ]
    )
    children: set[int] = set()
    try:
        # host + 2 learners + the resource tracker, all up and training
        _wait_until(lambda: _progress_rows(run) >= 2 and len(_children(proc.pid)) >= 4, 180, proc, "a running trainer")
        children = _children(proc.pid)
        assert segments_of(proc.pid), "the trainer owns no shared memory? the test would prove nothing"
        proc.kill()
        proc.wait(timeout=10)
        _wait_until(
            lambda: not any(process_alive(pid) for pid in children), 10, what=f"the children {sorted(children)} to exit"
        )
        _wait_until(lambda: not segments_of(proc.pid), 10, what="its shared memory to be unlinked")
    finally:
        _kill_all(proc, children)


@pytest.mark.wall
def test_sigkill_of_the_server_leaves_no_tick_worker(tmp_path):
    from nonstop.server.app import free_port

    port = free_port()
    proc = _start(
        [
            sys.executable,
            "-m",
            "nonstop.cli",
            "serve",
            "--env",
            "CartPole",
            "--port",
            str(port),
            "--tick-procs",
            "2",
            "--warm-envs",
            "0",
            "--log-level",
            "warning",
        ]
    )
    children: set[int] = set()
    try:
        names = lambda: [Path(f"/proc/{p}/cmdline").read_bytes() for p in _children(proc.pid) if process_alive(p)]  # noqa: E731
        _wait_until(lambda: sum(b"spawn_main" in n for n in names()) >= 2, 120, proc, "two tick workers")
        from nonstop.server.client import Client

        client = Client(f"ws://127.0.0.1:{port}")
        _wait_until(lambda: _connects(client), 120, proc, "the server to accept a client")
        client.reset(seed=0)  # a session ticking on a worker, its channels in shared memory
        assert segments_of(proc.pid)
        children = _children(proc.pid)
        proc.kill()
        proc.wait(timeout=10)
        _wait_until(
            lambda: not any(process_alive(pid) for pid in children),
            10,
            what=f"the tick workers {sorted(children)} to exit",
        )
        _wait_until(lambda: not segments_of(proc.pid), 10, what="the session's shared memory to be unlinked")
    finally:
        _kill_all(proc, children)
        if "client" in locals():
            try:
                client.close()
            except Exception:  # its server is gone on purpose
                pass


def _connects(client) -> bool:
    try:
        client.__enter__()
    except OSError:
        return False
    return True


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


@pytest.mark.wall
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
    _wait_until(lambda: not process_alive(pid), 10, what=f"the orphan {pid} to exit")
    assert time.monotonic() - died < 3  # within a second of its parent, with room for a loaded machine


def test_hold_lifeline_validates_its_arguments():
    with pytest.raises(ValueError, match="parent_pid"):
        hold_lifeline(0)
    with pytest.raises(ValueError, match="poll"):
        hold_lifeline(os.getppid(), poll=0)


@pytest.mark.wall
def test_reap_climbs_the_ladder_for_a_child_that_ignores_sigterm():
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('up', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "up"
    started = time.monotonic()
    assert reap(child, timeout=0.2, kill_after=0.2) == -signal.SIGKILL
    assert time.monotonic() - started < 10
    assert ORPHAN_EXIT == 129


# ----------------------------------------------------------------------------- failures named in one line


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("nonstop: error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


@pytest.mark.wall
@pytest.mark.slow
def test_a_killed_host_is_named_in_one_line_and_the_run_keeps_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc = _start([*TRAIN, "--clock", "wall", "--seconds", "600", "--checkpoint-every", "1", "--out", str(run)])
    children: set[int] = set()
    try:
        _wait_until(
            lambda: latest_checkpoint(run) is not None and len(_children(proc.pid)) >= 3,
            180,
            proc,
            "a first checkpoint",
        )
        children = _children(proc.pid)
        spawned = sorted(p for p in children if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes())
        host = spawned[0]  # the world starts before the learners
        os.kill(host, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        _kill_all(proc, children)
    assert proc.returncode == 1, err[-3000:]
    line = _one_line_error(err)
    assert f"host process {host}" in line and "died (killed by SIGKILL)" in line, line
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False and "host" in summary["reason"], summary
    assert latest_checkpoint(run) is not None  # the newest good checkpoint is kept
    _wait_until(lambda: not any(process_alive(pid) for pid in children), 10, what="the other children to exit")


def test_a_full_disk_stops_checkpointing_with_a_warning_and_the_world_keeps_ticking(
    tmp_path, capsys, monkeypatch, no_shm_leak
):
    import errno

    from nonstop.cli import main
    from nonstop.learning import checkpoint

    real_save, calls = checkpoint.save_checkpoint, []

    def save_until_the_disk_fills(path, state):
        calls.append(path)
        if len(calls) >= 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(path, state)

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_until_the_disk_fills)
    run = tmp_path / "run"
    args = [
        "train",
        "--env",
        "CartPole",
        "--learning-starts",
        "50",
        "--batch-size",
        "8",
        "--progress-every",
        "1",
        "--checkpoint-every",
        "2",
        "--seconds",
        "8",
        "--out",
        str(run),
    ]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert len(calls) == 2  # the first one written, the second hit the full disk, then no more tries
    assert "the disk is full" in captured.err and captured.err.count("cannot write checkpoint") == 1
    assert "Traceback" not in captured.err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is True and summary["env_ticks_total"] == 400  # all 8 s of the world ticked
    assert latest_checkpoint(run).path == calls[0]


def test_retention_never_counts_a_corrupt_checkpoint_as_kept(tmp_path):
    from nonstop.learning.checkpoint import checkpoint_path, keep_last, save_checkpoint

    paths = [save_checkpoint(checkpoint_path(tmp_path, u), {"u": u}) for u in (10, 20, 30)]
    paths[2].write_bytes(paths[2].read_bytes()[:-7])  # the newest is truncated
    removed = keep_last(tmp_path, 2)
    assert removed == []  # two whole ones are 10 and 20: nothing older to drop
    assert all(p.exists() for p in paths)
    later = save_checkpoint(checkpoint_path(tmp_path, 40), {"u": 40})
    assert keep_last(tmp_path, 2) == [paths[0]]  # kept: 40 and 20 (whole); 30 (corrupt) never counted
    assert later.exists() and paths[1].exists()


@pytest.mark.slow
def test_bad_run_directories_end_in_one_clear_line(tmp_path):
    base = [*TRAIN, "--seconds", "1"]
    run = tmp_path / "run"
    done = subprocess.run([*base, "--out", str(run)], capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    again = subprocess.run([*base, "--out", str(run)], capture_output=True, text=True, env=ENV, timeout=300)
    assert again.returncode == 2 and "--resume" in _one_line_error(again.stderr)

    for ckpt in (run / "checkpoints").glob("ckpt-*.pt"):
        ckpt.write_bytes(b"NSCKPT garbage")
    corrupt = subprocess.run(
        [*base, "--out", str(run), "--resume"], capture_output=True, text=True, env=ENV, timeout=300
    )
    assert corrupt.returncode == 1 and "none of the 1 checkpoints loads" in _one_line_error(corrupt.stderr)


def test_a_read_only_run_directory_ends_in_one_clear_line(tmp_path, capsys, monkeypatch, no_shm_leak):
    from nonstop.cli import main

    locked = tmp_path / "locked"
    real_mkdir = Path.mkdir

    def read_only_mkdir(self, *args, **kwargs):  # root writes through permission bits: simulate them
        if self == locked or locked in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only_mkdir)
    assert main(["train", "--env", "CartPole", "--seconds", "1", "--out", str(locked / "run")]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "Permission denied" in line and str(locked / "run") in line, line


def test_ctrl_c_again_skips_the_final_checkpoint_and_still_ends_cleanly(tmp_path, capsys, monkeypatch, no_shm_leak):
    from nonstop.experiment import ending as trainer
    from nonstop.cli import main
    from nonstop.experiment import TrainingRun

    real_advance, real_save, saves, pressed = TrainingRun.advance, trainer.Checkpointer.save, [], []

    def advance_then_ctrl_c(self, seconds):
        if self.world.slot.read().tick >= 100:
            pressed.append(True)
            raise KeyboardInterrupt  # the first Ctrl-C, in the middle of the run
        return real_advance(self, seconds)

    def save_then_ctrl_c_again(self, snapshot, updates, replay=None):
        saves.append(bool(pressed))
        if pressed:
            raise KeyboardInterrupt  # pressed again while the final checkpoint is written
        return real_save(self, snapshot, updates, replay=replay)

    monkeypatch.setattr(TrainingRun, "advance", advance_then_ctrl_c)
    monkeypatch.setattr(trainer.Checkpointer, "save", save_then_ctrl_c_again)
    run = tmp_path / "run"
    code = main(
        [
            "train",
            "--env",
            "CartPole",
            "--learning-starts",
            "50",
            "--progress-every",
            "1",
            "--checkpoint-every",
            "1",
            "--seconds",
            "60",
            "--out",
            str(run),
        ]
    )
    assert code == 130
    assert saves == [False, False, True]  # two periodic checkpoints, then the final one that Ctrl-C skipped
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] is False and summary["reason"] == "interrupted (Ctrl-C)"
    assert any("final checkpoint skipped" in note for note in summary["notes"]), summary
    from nonstop.learning.runlog import read_ticklog

    assert latest_checkpoint(run) is not None and len(read_ticklog(run)) > 0


def test_a_worker_that_is_not_restarted_is_reported_once_and_the_world_ticks_on():
    from nonstop.inference.schedulers import make_scheduler
    from nonstop.inference.workers import InferencePool
    from nonstop.policies import Constant, ConstantPolicy, LatencyPolicy
    from nonstop.realtime.host import Session

    with Session("theory/inaction", clock="virtual", seed=0) as world:

        def policy(i: int) -> LatencyPolicy:
            return LatencyPolicy(ConstantPolicy(world.action_space, 1), Constant(2 / 60), seed=i)

        pool = InferencePool(world, policy, make_scheduler("max_time", 2), max_restarts=0).start()
        world.run_for(1.0)
        pool.kill(0)
        world.run_for(2.0)
        pool.stop()
    kinds = [(e.worker, e.kind) for e in pool.events]
    assert kinds == [(0, "died"), (0, "gave up")], pool.events  # once, not at every check after
    assert pool.workers[0].deaths == 1
    assert len(world.tick_log) == 180  # the world never waited


def test_a_command_started_with_popen_lifeline_ends_with_its_parent():
    middle = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "from nonstop.realtime.lifeline import popen_lifeline\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], preexec_fn=popen_lifeline())\n"
            "print(child.pid, flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        child = int(middle.stdout.readline())
        assert process_alive(child)
        middle.kill()
        middle.wait(timeout=10)
        _wait_until(lambda: not process_alive(child), 5, what=f"the command {child} to end with its parent")
    finally:
        if middle.poll() is None:
            middle.kill()
        middle.communicate()
