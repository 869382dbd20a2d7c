"""`nonstop demo` keeps its lesson on a loaded machine: when the wall clock cannot keep pace (the
staggered workers starved of CPU), it says so and shows the same comparison on the virtual clock.

The loaded machine is a recorded result: the real comparison on the virtual clock, with the
staggered run's figures made what a busy 2-core machine gave (55 % inaction, workers acting every
2.2 ticks). The virtual re-run is real.
"""

from __future__ import annotations

import argparse

import pytest

import nonstop.commands.compare as compare_module
from nonstop.commands.demo import LESSON_INACTION, QUICK, add_arguments, lesson_kept, run_demo
from nonstop.studies.compare import compare, machine_diagnosis

ENV = "theory/inaction"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def _as_on_the_wall_clock(result: dict, staggered_inaction: float, tau_i: float) -> dict:
    wall = {**result, "clock": "wall", "schedulers": {name: dict(s) for name, s in result["schedulers"].items()}}
    wall["schedulers"]["exp_time"].update(
        inaction_fraction=staggered_inaction, tau_i_mean_ticks=tau_i, load_average=3.4
    )
    wall["machine_limits"] = machine_diagnosis(wall, cores=2)
    return wall


@pytest.fixture
def recorded(monkeypatch):
    """`compare` as the demo calls it: the wall clock answers with ``recorded.wall`` (a loaded machine),
    the virtual clock really runs; ``recorded.calls`` lists the clocks asked for."""

    class Recorded:
        wall: dict | None = None
        calls: list[str] = []

    def fake(env, latency, *, clock, **kwargs):
        Recorded.calls.append(clock)
        real = compare(env, latency, clock="virtual", **kwargs)
        return Recorded.wall if clock == "wall" else real

    Recorded.calls = []
    monkeypatch.setattr(compare_module, "compare", fake)
    Recorded.base = compare(ENV, "6t", seconds=3.0, schedulers=("sequential", "exp_time"))
    return Recorded


def _text(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())  # the console wraps long lines


def test_a_machine_that_cannot_keep_pace_is_named_and_the_lesson_shown_on_the_virtual_clock(recorded, tmp_path, capsys):
    recorded.wall = _as_on_the_wall_clock(recorded.base, staggered_inaction=0.55, tau_i=2.2)
    out = tmp_path / "demo"
    assert run_demo(_parse(["--env", ENV, "--seconds", "3", "--train-seconds", "0", "--out", str(out)])) == 0
    assert recorded.calls == ["wall", "virtual"]
    text = _text(capsys)
    assert "could not keep pace with the wall clock" in text and "every 2.20 ticks" in text and "55%" in text
    assert "starved of CPU" in text  # the machine diagnosis, under the wall clock's table
    assert "On the virtual clock, staggering 6 workers cut inaction from 83% to 0%" in text
    assert "could not show its lesson" not in text
    assert {p.name for p in out.glob("*.npz")} == {
        "sequential-wall.npz",
        "exp_time-wall.npz",
        "sequential.npz",
        "exp_time.npz",
    }


def test_a_machine_that_keeps_pace_gets_no_second_run(recorded, tmp_path, capsys):
    recorded.wall = _as_on_the_wall_clock(
        recorded.base, staggered_inaction=0.04, tau_i=1.04
    )  # six busy processes, 2 cores
    assert run_demo(_parse(["--env", ENV, "--seconds", "3", "--train-seconds", "0", "--out", str(tmp_path / "d")])) == 0
    assert recorded.calls == ["wall"]
    text = _text(capsys)
    assert (
        "could not keep pace" not in text
        and "On the wall clock, staggering 6 workers cut inaction from 83% to 4%" in text
    )


def test_a_lesson_missed_on_the_virtual_clock_too_is_said_plainly(recorded, tmp_path, capsys, monkeypatch):
    recorded.wall = _as_on_the_wall_clock(recorded.base, staggered_inaction=0.55, tau_i=2.2)
    missed = _as_on_the_wall_clock(recorded.base, staggered_inaction=0.5, tau_i=2.0)
    missed["clock"] = "virtual"
    monkeypatch.setattr(
        compare_module, "compare", lambda env, latency, *, clock, **k: recorded.wall if clock == "wall" else missed
    )
    assert run_demo(_parse(["--env", ENV, "--seconds", "3", "--train-seconds", "0", "--out", str(tmp_path / "d")])) == 0
    assert "this demo could not show its lesson here" in _text(capsys)


def test_the_lesson_bound():
    def result(sequential: float, staggered: float) -> dict:
        return {
            "schedulers": {
                "sequential": {"inaction_fraction": sequential},
                "exp_time": {"inaction_fraction": staggered},
            }
        }

    assert lesson_kept(result(0.83, 0.0)) and lesson_kept(result(0.83, LESSON_INACTION))
    assert not lesson_kept(result(0.83, LESSON_INACTION + 0.01))
    assert not lesson_kept(result(0.05, 0.1))  # staggering must also beat sequential


def test_quick_caps_both_parts(monkeypatch, tmp_path):
    seen = {}

    def stop(env, latency, *, seconds, clock, **kwargs):
        seen["seconds"] = seconds
        raise KeyboardInterrupt  # enough: the caps are applied before anything runs

    monkeypatch.setattr(compare_module, "compare", stop)
    args = _parse(["--quick", "--out", str(tmp_path / "d")])
    with pytest.raises(KeyboardInterrupt):
        run_demo(args)
    assert seen["seconds"] == QUICK["seconds"] and args.train_seconds == QUICK["train_seconds"]
    args = _parse(["--quick", "--seconds", "1", "--out", str(tmp_path / "e")])  # a cap, never a raise
    with pytest.raises(KeyboardInterrupt):
        run_demo(args)
    assert seen["seconds"] == 1.0
