"""Your own world (issue 30 item 1): ``--env module:Id`` and ``--env-module``, trained through the CLI
on a package beside the command, on both clocks, and resumed.

``tests/data/userworld/mypkg`` is the user's package; each test copies it into a fresh directory and
runs nonstop there through a launcher that, like the ``nonstop`` console script, puts its own folder
on ``sys.path`` and not the current directory: the module is found because nonstop looks beside the
command, not because Python happened to.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest

import nonstop
from nonstop.envs import registry

USERWORLD = Path(__file__).parent / "data" / "userworld"
SRC = Path(nonstop.__file__).resolve().parents[1]
LAUNCHER = 'from nonstop.cli import entry\nif __name__ == "__main__":\n    entry()\n'
ID = "mypkg.worlds:Target1D-v0"


@pytest.fixture
def beside(tmp_path):
    """A directory holding the user's package, and a runner of ``nonstop ARGS`` from there."""
    work = tmp_path / "work"
    shutil.copytree(USERWORLD, work, ignore=shutil.ignore_patterns("__pycache__"))
    launcher = tmp_path / "bin" / "nonstop_launcher.py"
    launcher.parent.mkdir()
    launcher.write_text(LAUNCHER)
    imports = tmp_path / "imports.log"
    env = {**os.environ, "PYTHONPATH": str(SRC), "USERWORLD_IMPORT_LOG": str(imports)}

    def run(*args: str, timeout: float = 240, pythonpath: str = "") -> subprocess.CompletedProcess:
        path = {"PYTHONPATH": os.pathsep.join((str(SRC), pythonpath))} if pythonpath else {}
        return subprocess.run(
            [sys.executable, str(launcher), *args],
            cwd=work,
            env={**env, **path},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    run.work = work  # type: ignore[attr-defined]
    run.imports = imports  # type: ignore[attr-defined]
    return run


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_trains_and_resumes_a_world_of_its_own_on_the_virtual_clock(beside):
    first = beside("train", "--env", ID, "--seconds", "10", "--learning-starts", "100", "--out", "runs/v")
    assert first.returncode == 0, first.stderr
    run_dir = beside.work / "runs" / "v"
    assert json.loads((run_dir / "config.json").read_text())["env"] == ID  # the module is saved with the id
    learned = _summary(run_dir)
    assert learned["env_ticks_total"] == 200 and learned["updates"] > 0  # 10 s at the world's own 20 Hz, learning
    refused = beside("train", "--resume", "runs/v", "--seconds", "20")  # a file imports nothing by itself
    assert refused.returncode == 2 and "runs/v/config.json names the module 'mypkg.worlds'" in refused.stderr
    again = beside("train", "--resume", "runs/v", "--seconds", "20", "--env-module", "mypkg.worlds")  # named now
    assert again.returncode == 0, again.stderr
    assert "resuming runs/v" in again.stderr
    resumed = _summary(run_dir)
    assert resumed["env_ticks_total"] == 400 and resumed["updates"] > learned["updates"]
    # export rebuilds the world from the saved id: trusted, from PYTHONPATH
    exported = beside("export", "runs/v", "--out", "exported", "--trust-module", pythonpath=str(beside.work))
    assert exported.returncode == 0, exported.stderr
    assert json.loads((beside.work / "exported" / "policy.json").read_text())["env"] == ID


def test_env_module_names_the_same_world(beside):
    done = beside("train", "--env", "Target1D-v0", "--env-module", "mypkg.worlds", "--seconds", "2", "--out", "runs/m")
    assert done.returncode == 0, done.stderr
    assert json.loads((beside.work / "runs" / "m" / "config.json").read_text())["env"] == ID


def test_compare_takes_a_world_of_its_own(beside):
    done = beside(
        "compare",
        "--env",
        "Target1D-v0",
        "--env-module",
        "mypkg.worlds",
        "--latency",
        "2t",
        "--seconds",
        "2",
        "--plot",
        "",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["env"] == ID and result["tick_hz"] == 20.0


@pytest.mark.wall
def test_trains_and_resumes_on_the_wall_clock_and_its_processes_import_the_module(beside, no_shm_leak):
    first = beside(
        "train", "--env", ID, "--clock", "wall", "--seconds", "6", "--learning-starts", "20", "--out", "runs/w"
    )
    assert first.returncode == 0, first.stderr
    importers = set(beside.imports.read_text().split())
    assert len(importers) >= 2, importers  # this command's process and the world's host process, at least
    learned = _summary(beside.work / "runs" / "w")["updates"]
    again = beside(  # a learner process takes seconds to start
        "train", "--resume", "runs/w", "--seconds", "11", "--trust-module", pythonpath=str(beside.work)
    )
    assert again.returncode == 0, again.stderr
    resumed = _summary(beside.work / "runs" / "w")
    # the learner processes learned (each segment's take a few seconds to start on a loaded machine)
    assert resumed["complete"] is True and resumed["updates"] >= learned and resumed["updates"] > 0
    assert "kept dying" not in first.stderr + again.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("--env", "nosuchpkg.worlds:Target1D-v0"),
            "cannot import module 'nosuchpkg.worlds' (the world's module in 'nosuchpkg.worlds:…'): it must be on PYTHONPATH "
            "or in the directory nonstop runs from",
        ),
        (
            ("--env", "mypkg.worlds:Target2D-v0"),
            "module 'mypkg.worlds' registered no environment 'Target2D-v0' (it registers Target1D-v0)",
        ),
        (("--env", ID, "--env-module", "otherpkg"), "name two modules: give one"),
        (("--env", "Target1D-v0", "--env-module", "my-pkg"), "--env-module takes a Python module name"),
    ],
)
def test_refusals_are_one_line(beside, args, message):
    done = beside("train", *args, "--seconds", "1", "--out", "runs/x")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr
    assert not (beside.work / "runs" / "x").exists()


@pytest.mark.wall
def test_a_script_without_a_main_guard_is_told_how_to_guard(beside, no_shm_leak):
    """Every process nonstop spawns imports the calling script afresh: without the guard each child would
    start the run again (issue 30: "learner 0 kept dying"); each says what to do instead."""
    script = beside.work / "unguarded.py"
    script.write_text(
        "import mypkg.worlds\nfrom nonstop.cli import main\n"
        "main(['train', '--env', 'Target1D-v0', '--clock', 'wall', '--seconds', '1', '--out', 'runs/g'])\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=beside.work,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert 'put the call under `if __name__ == "__main__":`' in done.stderr, done.stderr
    assert "already holds a run" not in done.stderr


def _forget_mypkg() -> None:
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


@pytest.fixture
def user_module(monkeypatch):
    """The user's package found only beside the current directory; everything it registered is undone after."""
    monkeypatch.chdir(USERWORLD)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(USERWORLD))])
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    _forget_mypkg()  # imported by an earlier test of this process: it must be found afresh here
    yield
    _forget_mypkg()
    gymnasium.registry.pop("Target1D-v0", None)
    registry._MODULE_IDS.pop("mypkg.worlds", None)


def test_make_takes_module_id_and_env_module(user_module):
    env = nonstop.make(ID, seed=0)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (2,) and env.tick_hz == 20.0
        env.step(2)
        assert env.tick_log.tau_m == pytest.approx(1 / 20)
    finally:
        env.close()
    assert str(USERWORLD) in sys.path and str(USERWORLD) in os.environ["PYTHONPATH"].split(os.pathsep)
    env = nonstop.make("Target1D-v0", env_module="mypkg.worlds")
    env.close()
    with pytest.raises(ValueError, match="name two modules"):
        nonstop.make(ID, env_module="otherpkg")
    with pytest.raises(ValueError, match="registered no environment 'Nope-v0'"):
        nonstop.make("mypkg.worlds:Nope-v0")


@pytest.mark.wall
def test_serve_builds_a_world_of_its_own_in_its_tick_processes(beside, tmp_path, no_shm_leak):
    import signal
    import socket
    import time

    from nonstop.server.client import Client, http_get

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = tmp_path / "bin" / "nonstop_launcher.py"
    env = {**os.environ, "PYTHONPATH": str(SRC), "USERWORLD_IMPORT_LOG": str(beside.imports)}
    server = subprocess.Popen(
        [
            sys.executable,
            str(launcher),
            "serve",
            "--env",
            "Target1D-v0",
            "--env-module",
            "mypkg.worlds",
            "--port",
            str(port),
            "--tick-procs",
            "1",
            "--log-level",
            "warning",
        ],
        cwd=beside.work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                http_get(f"http://127.0.0.1:{port}", "/health", timeout=2)
                break
            except Exception:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()[1][-2000:]
                time.sleep(0.5)
        with Client(f"ws://127.0.0.1:{port}") as world:
            world.reset(seed=0)
            world.act(2)  # walk right, towards or past the target
            later = world.wait(4)
        assert later.tick >= 4 and later.info["agent_ticks"] == 1 and later.info["total_reward"] < 0
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
    assert len(set(beside.imports.read_text().split())) >= 2  # the server and its tick process


def test_make_parallel_takes_a_seat_worlds_module():
    """A seat world named with its module (here nonstop's own duel module, which registers multi/duel)."""
    env = nonstop.make_parallel("multi/duel", env_module="nonstop.envs.duel", seed=0)
    try:
        observations, _ = env.reset(seed=0)
        assert sorted(observations) == sorted(env.possible_agents)
    finally:
        env.close()
    with pytest.raises(ValueError, match="registered no environment 'multi/nope'"):
        nonstop.make_parallel("nonstop.envs.duel:multi/nope")
