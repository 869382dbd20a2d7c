"""Every part that dies says so (issue 40): a learner or an inference worker that dies, on any backend,
gets one line on stderr at once (which part, its pid, the cause, restarted or not, the budget left) and a
row in ``summary.json``'s ``deaths``.

The process test kills a learner process and a model process with SIGKILL from outside, as the OOM
killer would, in a short wall-clock run; the thread and virtual tests kill them as their backends die
(an exception in the worker's thread, an update that raises).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nonstop.cli import main
from nonstop.experiment import TrainConfig, TrainingRun
from nonstop.learning.dqn import DQNConfig
from nonstop.realtime.deaths import Death, exit_cause
from nonstop.realtime.lifeline import PartFailed

ARGS = ["train", "--env", "CartPole", "--learning-starts", "20", "--batch-size", "8", "--progress-every", "1"]


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def _killer(
    names: tuple[str, ...], ready: Callable[[], bool], deadline_s: float, killed: dict[str, int]
) -> threading.Thread:
    """A thread that SIGKILLs the first child process of each name once ``ready()`` (the run is going),
    its pid into ``killed``; it gives up ``deadline_s`` seconds after it starts."""

    def kill() -> None:
        give_up = time.monotonic() + deadline_s
        while time.monotonic() < give_up and not ready():
            time.sleep(0.05)
        for child in mp.active_children():
            if child.name in names and child.name not in killed and child.pid is not None:
                os.kill(child.pid, signal.SIGKILL)
                killed[child.name] = child.pid

    return threading.Thread(target=kill, name="test-killer", daemon=True)


def _rows(path: Path) -> int:
    try:
        return len(path.read_text().splitlines()) - 1
    except OSError:
        return 0


@pytest.mark.wall
def test_a_killed_learner_process_and_model_process_each_say_so_and_the_summary_lists_them(
    tmp_path, capfd, no_shm_leak
):
    out = tmp_path / "run"
    killed: dict[str, int] = {}
    ready = lambda: _rows(out / "progress.csv") >= 2  # noqa: E731 - the workers act and the learner learns
    killer = _killer(("nonstop-learner-0", "nonstop-policy"), ready, deadline_s=60.0, killed=killed)
    killer.start()
    code = main(
        [*ARGS, "--clock", "wall", "--seconds", "8", "--backend", "process", "--n-learners", "1", "--out", str(out)]
    )
    killer.join(timeout=5)
    err = capfd.readouterr().err
    assert code == 0, err
    assert set(killed) == {"nonstop-learner-0", "nonstop-policy"}, (killed, err)
    learner = f"nonstop: learner 0 (pid {killed['nonstop-learner-0']}) died: killed by SIGKILL; restarted (4 of 5 restarts within 60 s left)"
    assert [line for line in err.splitlines() if line.startswith("nonstop: learner 0 ")] == [learner], err
    worker = [line for line in err.splitlines() if line.startswith("nonstop: inference worker 0 ")]
    assert worker == [
        f"nonstop: inference worker 0 (pid {killed['nonstop-policy']}) died: killed by SIGKILL; restarted "
        "(4 of 5 restarts within 60 s left)"
    ], err
    deaths = _summary(out)["deaths"]
    assert [(d["part"], d["where"], d["cause"], d["restarted"], d["budget_left"]) for d in deaths] == sorted(
        [
            ("learner 0", f"pid {killed['nonstop-learner-0']}", "killed by SIGKILL", True, 4),
            ("inference worker 0", f"pid {killed['nonstop-policy']}", "killed by SIGKILL", True, 4),
        ],
        key=lambda row: [d["part"] for d in deaths].index(row[0]),
    )
    assert all(d["time"] > 0 for d in deaths)


def test_a_thread_workers_exception_is_a_death_said_once_and_recorded(tmp_path, capsys, monkeypatch, no_shm_leak):
    from nonstop.experiment import registry

    policy = registry.lookup("policy_backend", "thread")

    class CrashesOnce:
        crashed = False

        def __init__(self, inner):
            self.inner = inner

        def act(self, obs):
            if not CrashesOnce.crashed and self.inner is not None:
                CrashesOnce.crashed = True
                raise RuntimeError("the model hit a bad frame (simulated)")
            return self.inner.act(obs)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setitem(registry._BUILTIN["policy_backend"], "thread", lambda run, i: CrashesOnce(policy(run, i)))
    out = tmp_path / "run"
    assert main([*ARGS, "--seconds", "4", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "died:" in line]
    assert len(lines) == 1, err
    assert re.fullmatch(
        r"nonstop: inference worker 0 \(a thread of pid \d+\) died: RuntimeError: the model hit a bad frame "
        r"\(simulated\); restarted \(4 of 5 restarts within 60 s left\)",
        lines[0],
    ), lines[0]
    (death,) = _summary(out)["deaths"]
    assert death["part"] == "inference worker 0" and death["restarted"] is True
    assert death["cause"] == "RuntimeError: the model hit a bad frame (simulated)"


def test_a_virtual_learner_past_its_budget_says_it_was_not_restarted(capsys, no_shm_leak):
    cfg = TrainConfig(
        env="CartPole",
        seconds=10.0,
        algo_settings=DQNConfig.for_family("classic", learning_starts=20, batch_size=8),
        max_restarts=1,
        restart_window=60.0,
    )
    run = TrainingRun(cfg).build().start()
    try:
        run.advance(1.0)
        run.learners.kill(0)
        run.advance(0.5)
        run.learners.kill(0)
        with pytest.raises(PartFailed, match="learner 0 kept dying: 2 deaths, more than 1 restarts within 60 s"):
            run.advance(0.5)
        deaths = run.deaths()
    finally:
        run.teardown()
    err = capsys.readouterr().err.splitlines()
    told = [line for line in err if line.startswith("nonstop: learner 0 ")]
    assert len(told) == 2 and told[0].endswith(
        "died: RuntimeError: learner 0 killed; restarted (0 of 1 restarts within 60 s left)"
    )
    assert told[1].endswith("not restarted (2 deaths, more than 1 restarts within 60 s: the run stops)"), told
    assert [(d["part"], d["restarted"]) for d in deaths] == [("learner 0", True), ("learner 0", False)]


def test_a_death_names_its_signal_or_exit_code():
    assert exit_cause(-signal.SIGKILL) == "killed by SIGKILL" and exit_cause(3) == "exit code 3"
    death = Death("learner 2", "pid 7", "exit code 3", restarted=False, why_not="restarts are off", time=1.25)
    assert death.line() == "learner 2 (pid 7) died: exit code 3; not restarted (restarts are off)"
    assert death.as_dict()["budget_left"] is None
