"""What `nonstop bench` prints around its figures: a quick run says it is not the measurement,
plots land under runs/, and a target never reached is said in words."""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

from nonstop.bench import learn
from nonstop.bench.common import QUICK_NOTE, verdict
from nonstop.cli import build_parser, cmd_bench


def _fake_bench(result: dict) -> types.ModuleType:
    module = types.ModuleType("fake_bench")
    module.run = lambda args: dict(result)
    return module


def _bench_args(quick: bool, as_json: bool) -> argparse.Namespace:
    module = _fake_bench({"meets_target": False})
    return argparse.Namespace(bench="fake", quick=quick, json=as_json, bench_module=module)


def test_a_quick_run_says_it_is_not_the_measurement(capsys) -> None:
    cmd_bench(_bench_args(quick=True, as_json=True), None)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["quick"] is True and last["meets_target"] is False and last["quick_note"] == QUICK_NOTE
    cmd_bench(_bench_args(quick=True, as_json=False), None)
    out = capsys.readouterr().out
    assert "meets_target" in out and QUICK_NOTE in out
    for as_json in (True, False):  # a full run is the measurement: no such note
        cmd_bench(_bench_args(quick=False, as_json=as_json), None)
        assert "quick run" not in capsys.readouterr().out
    assert "quick run" in verdict(False, quick=True) and "quick" not in verdict(False, quick=False)


def test_bench_plots_default_under_runs() -> None:
    parser = build_parser()
    nstar = Path(parser.parse_args(["bench", "nstar"]).plot)
    nlstar = Path(parser.parse_args(["bench", "nlstar"]).plot)
    assert nlstar.parent == nstar.parent == Path("runs")


def _learn_result(reached: int | None) -> dict:
    row = {"ticks": 1500, "updates": 10, "episodes": 2, "return_last20": 12.0, "inaction_fraction": 0.1,
           "delay_mean_ticks": 1.0, "wall_s": 1.0}  # fmt: skip
    return {"zero_latency": {**row, "ticks": 3000}, "target_return": 400, "ticks_to_target": reached,
            "latency": 5, "ordering": {"staggered": row}}  # fmt: skip


def test_bench_learn_says_a_missed_target_in_words(capsys) -> None:
    learn.render(_learn_result(None))
    out = capsys.readouterr().out
    assert "target 400 not reached in 3,000 ticks" in out and "None" not in out
    learn.render(_learn_result(2400))
    assert "target 400 reached at tick 2,400" in capsys.readouterr().out
