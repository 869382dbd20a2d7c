"""What `nonstop bench` prints around its figures: a quick run says it is not the measurement,
plots land under runs/, and a target never reached is said in words."""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

import pytest

from nonstop.bench import learn
from nonstop.bench.common import QUICK_NOTE, verdict
from nonstop.cli import build_parser
from nonstop.commands.bench import run_bench as cmd_bench


def _fake_bench(result: dict) -> types.ModuleType:
    module = types.ModuleType("fake_bench")
    module.run = lambda args: dict(result)
    return module


def _bench_args(quick: bool, as_json: bool) -> argparse.Namespace:
    module = _fake_bench({"meets_target": False})
    return argparse.Namespace(bench="fake", quick=quick, json=as_json, bench_module=module)


def test_a_quick_run_says_it_is_not_the_measurement(capsys) -> None:
    cmd_bench(_bench_args(quick=True, as_json=True))
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["quick"] is True and last["meets_target"] is False and last["quick_note"] == QUICK_NOTE
    cmd_bench(_bench_args(quick=True, as_json=False))
    out = capsys.readouterr().out
    assert "meets_target" in out and QUICK_NOTE in out
    for as_json in (True, False):  # a full run is the measurement: no such note
        cmd_bench(_bench_args(quick=False, as_json=as_json))
        assert "quick run" not in capsys.readouterr().out
    assert "quick run" in verdict(False, quick=True) and "quick" not in verdict(False, quick=False)


def test_bench_plots_default_under_runs() -> None:
    parser = build_parser()
    nstar = Path(parser.parse_args(["bench", "nstar"]).plot)
    nlstar = Path(parser.parse_args(["bench", "nlstar"]).plot)
    assert nlstar.parent == nstar.parent == Path("runs")


def _learn_result(reached: int | None) -> dict:
    row = {
        "ticks": 1500,
        "updates": 10,
        "episodes": 2,
        "return_last20": 12.0,
        "inaction_fraction": 0.1,
        "delay_mean_ticks": 1.0,
        "wall_s": 1.0,
    }
    return {
        "zero_latency": {**row, "ticks": 3000},
        "target_return": 400,
        "ticks_to_target": reached,
        "latency": 5,
        "ordering": {"staggered": row},
    }


def test_bench_learn_says_a_missed_target_in_words(capsys) -> None:
    learn.render(_learn_result(None))
    out = capsys.readouterr().out
    assert "target 400 not reached in 3,000 ticks" in out and "None" not in out
    learn.render(_learn_result(2400))
    assert "target 400 reached at tick 2,400" in capsys.readouterr().out


# ----------------------------------------------------------------------------- wide tables off a terminal


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()]


def test_a_table_keeps_its_width_when_stdout_is_not_a_terminal(capsys, monkeypatch) -> None:
    import io

    from rich.table import Table

    from nonstop._console import Console
    from nonstop.commands.bench import _render_flat

    monkeypatch.delenv("COLUMNS", raising=False)
    value = "staggered exp_time at 6 ticks per inference: inaction 0.000, delay 6.0 ticks, N_I* 6 (theory 6)"
    _render_flat({"bench": "fake", "inaction_fraction_sequential_vs_staggered": value})
    lines = _table_lines(capsys.readouterr().out)  # capsys: a pipe, as in CI
    assert any(value in line for line in lines), lines  # one cell on one line: no wrap, no "…"
    assert max(map(len, lines)) > 80 and not any("…" in line for line in lines)

    # a width the user chose ($COLUMNS) is kept, and a terminal is fitted as rich always did
    monkeypatch.setenv("COLUMNS", "80")
    _render_flat({"bench": "fake", "inaction_fraction_sequential_vs_staggered": value})
    assert max(map(len, _table_lines(capsys.readouterr().out))) <= 80
    monkeypatch.delenv("COLUMNS")
    terminal = io.StringIO()
    table = Table("figure", "value")
    table.add_row("inaction_fraction_sequential_vs_staggered", value)
    Console(file=terminal, force_terminal=True, color_system=None, width=80).print(table)
    assert max(map(len, _table_lines(terminal.getvalue()))) <= 80
    # a long plain line stays one line in a log; a rule keeps the usual width
    piped = io.StringIO()
    console = Console(file=piped)
    console.print("x" * 150)
    console.rule("section")
    assert [len(line) for line in piped.getvalue().splitlines()] == [150, 80]


# ----------------------------------------------------------------------------- benches whose extra is missing


def test_a_bench_that_cannot_import_is_offered_with_the_extra_to_install(tmp_path, monkeypatch, capsys) -> None:
    import sys

    import nonstop.bench
    from nonstop.cli import main

    (tmp_path / "bench_needs_plots.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(nonstop.bench, "BENCHMARKS", {**nonstop.bench.BENCHMARKS, "plots": "bench_needs_plots"})
    monkeypatch.setattr(nonstop.bench, "REQUIRES", {**nonstop.bench.REQUIRES, "gpu": ("no_such_module_here",)})
    monkeypatch.setitem(nonstop.bench.BENCHMARKS, "gpu", "nonstop.bench.clock")  # importable; its need is not
    help_text = build_parser()._subparsers._group_actions[0].choices["bench"].format_help()
    listed = " ".join(help_text.split())
    assert "plots" in listed and "unavailable: needs matplotlib" in listed and "nonstop[plot]" in listed
    assert "gpu" in listed and "cannot be imported here" in listed and "no_such_module_here" in listed
    assert main(["bench", "plots", "--quick", "--json", "--any-option", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs matplotlib" in err[0] and "pip install 'nonstop[plot]'" in err[0], err
    sys.modules.pop("bench_needs_plots", None)
    with pytest.raises(SystemExit) as stop:  # an available bench still refuses unknown options, as argparse does
        main(["bench", "clock", "--no-such-option"])
    assert stop.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
