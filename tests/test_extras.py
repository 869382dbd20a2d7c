"""The base install is small: torch (extra ``learn``) and matplotlib (extra ``plot``) are optional.

Each check runs in a fresh interpreter where both are made unimportable (a ``sitecustomize`` that
answers ModuleNotFoundError for them, as a machine without them would): the worlds, the seat
worlds, the server and `nonstop envs` work; the commands that need an extra say which one, before
they run or write anything."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCKER = """
import importlib.abc
import sys


class _Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "matplotlib"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Missing())
"""


@pytest.fixture
def without_extras(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src), os.environ.get("PYTHONPATH", "")])}

    def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", textwrap.dedent(code)] if code else [sys.executable, "-m", "nonstop.cli", *args]
        return subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)

    return run


def test_worlds_server_and_envs_need_neither_torch_nor_matplotlib(without_extras):
    done = without_extras(
        code="""
        import sys
        try:
            import torch  # noqa: F401
        except ModuleNotFoundError:
            pass
        else:
            raise SystemExit("the blocker let torch in")
        import nonstop
        env = nonstop.make("CartPole", clock="virtual")
        env.reset(seed=0)
        env.step(0)
        env.close()
        seats = nonstop.make_parallel("multi/duel", clock="virtual")
        seats.reset(seed=0)
        seats.close()
        from nonstop.server.app import create_app
        create_app(None)
        assert not {"torch", "matplotlib"} & set(sys.modules), sorted(m for m in sys.modules if m in ("torch", "matplotlib"))
        print("fine")
    """
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("fine"), done.stderr[-2000:]
    envs = without_extras("envs")
    assert envs.returncode == 0 and "CartPole" in envs.stdout, envs.stderr[-2000:]


def test_commands_that_need_an_extra_name_it_before_anything_runs(without_extras, tmp_path):
    train = without_extras("train", "--env", "CartPole", "--seconds", "1", "--out", str(tmp_path / "run"))
    assert train.returncode == 2
    assert "needs PyTorch" in train.stderr and "nonstop[learn]" in train.stderr and "Traceback" not in train.stderr
    assert not (tmp_path / "run").exists()  # nothing written
    report = without_extras("report", str(tmp_path / "run"))
    assert report.returncode == 2 and "nonstop[plot]" in report.stderr
    compare = without_extras("compare", "--env", "CartPole", "--latency", "2t", "--seconds", "1", "--plot", "")
    assert compare.returncode == 0, compare.stderr[-2000:]  # no picture asked for: no matplotlib needed


def test_benches_that_need_an_extra_are_listed_with_it_and_say_so_when_run(without_extras):
    listing = without_extras("bench", "--help")
    assert listing.returncode == 0, listing.stderr[-2000:]
    text = " ".join(listing.stdout.split())
    for name in ("models", "learn", "nlstar", "weights", "clock", "nstar"):
        assert f" {name} " in text, name  # every bench is offered, whatever is installed
    assert "unavailable: needs PyTorch" in text and "nonstop[learn]" in text
    run = without_extras("bench", "models", "--quick", "--json")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1 and "nonstop[learn]" in lines[0], run.stderr[-2000:]
    plot = without_extras("bench", "nstar", "--quick")  # draws runs/nstar.png unless --plot ''
    assert plot.returncode == 2 and "nonstop[plot]" in plot.stderr and "Traceback" not in plot.stderr
