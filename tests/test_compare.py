"""``nonstop compare``: four schedulers, one env, one latency (virtual clock)."""

from __future__ import annotations

import argparse
import json

import pytest

from nonstop.commands.compare import add_arguments, run_compare
from nonstop.studies.compare import (
    SCHEDULERS,
    compare,
    default_plot_path,
    machine_diagnosis,
    plot_compare,
    resolve_n_workers,
    to_json,
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nonstop compare")
    add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def inaction_result():
    return compare("theory/inaction", "4t", seconds=5.0)


def test_staggering_beats_sequential_on_the_inaction_mdp(inaction_result):
    s = inaction_result["schedulers"]
    assert list(s) == list(SCHEDULERS)
    assert inaction_result["n_workers"] == 4  # ⌈4 ticks / 1 tick⌉
    assert s["sequential"]["inaction_fraction"] == pytest.approx(0.75, abs=0.005)  # 1 − 1/4, to a tick
    assert s["sequential"]["inaction_fraction"] > s["max_time"]["inaction_fraction"]
    assert s["unstaggered"]["inaction_fraction"] == pytest.approx(
        0.75, abs=0.005
    )  # 4 workers firing together buy nothing
    for name in ("max_time", "exp_time"):
        assert s[name]["inaction_fraction"] == 0.0
        assert s[name]["tau_i_mean_ticks"] == pytest.approx(1.0)
        assert s[name]["actions_per_s"] == pytest.approx(60.0)
    for summary in s.values():
        assert summary["delay_mean_ticks"] == pytest.approx(4.0)
        # theory/inaction truncates only after 10,000 ticks: nothing completes in 5 s
        assert summary["episode_return_kind"] == "total"


def test_virtual_clock_runs_are_reproducible(inaction_result):
    again = compare("theory/inaction", "4t", seconds=5.0)
    assert to_json(again) == to_json(inaction_result)


def test_plot_is_written(inaction_result, tmp_path):
    path = plot_compare(inaction_result, tmp_path / "deep" / "compare.png")
    assert path.exists() and path.stat().st_size > 10_000


def test_table_headers_stay_whole_at_80_columns(inaction_result):
    from rich.cells import cell_len
    from rich.console import Console

    from nonstop.commands.compare import render_table

    console = Console(width=80, record=True, color_system=None)
    render_table(inaction_result, console)
    text = console.export_text()
    assert "…" not in text and all(cell_len(line) <= 80 for line in text.splitlines())
    for word in ("scheduler", "inaction", "delay", "acts/s", "return", "sequential"):
        assert word in text


def test_cli_prints_the_table_and_json_last(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = run_compare(parse(["--env", "CartPole", "--latency", "3t", "--seconds", "8", "--json"]))
    assert rc == 0
    out = capsys.readouterr().out
    for name in SCHEDULERS:
        assert name in out
    data = json.loads(out.strip().splitlines()[-1])
    assert set(data["schedulers"]) == set(SCHEDULERS)
    assert data["env"] == "CartPole" and data["tick_hz"] == 50.0 and data["n_workers"] == 3
    seq, stag = data["schedulers"]["sequential"], data["schedulers"]["max_time"]
    assert seq["inaction_fraction"] > stag["inaction_fraction"]
    # a random CartPole agent drops the pole within seconds: returns are episode means
    assert seq["episode_return_kind"] == "mean_completed" and seq["episodes_ended"] > 0
    assert "logs" not in data
    # default plot path: runs/compare-<env>.png, folder created
    assert (tmp_path / "runs" / "compare-CartPole.png").exists()
    assert data["plot"] == str(default_plot_path("CartPole"))


def test_n_workers_resolution():
    assert resolve_n_workers("auto", 6 / 60, 1 / 60) == 6  # exact ratio: no rounding up to 7
    assert resolve_n_workers("auto", 6.2 / 60, 1 / 60) == 7
    assert resolve_n_workers("auto", 0.001, 1 / 60) == 1
    assert resolve_n_workers(2, 0.5, 1 / 60) == 2
    assert parse(["--n-workers", "auto"]).n_workers == "auto"
    assert parse(["--n-workers", "5"]).n_workers == 5


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"env": "NoSuchGame"}, ValueError, "unknown environment id 'NoSuchGame'"),
        ({"env": "theory/inaction", "latency": "gamma:1,2"}, ValueError, "bad latency spec 'gamma:1,2'"),
        ({"env": "theory/inaction", "latency": "fast"}, ValueError, "bad latency spec 'fast'"),
        ({"env": "theory/inaction", "n_workers": 0}, ValueError, "n_workers must be >= 1"),
        ({"env": "theory/inaction", "n_workers": 2.5}, TypeError, "n_workers must be a positive int"),
        ({"env": "theory/inaction", "seconds": 0}, ValueError, "seconds must be a positive"),
        ({"env": "theory/inaction", "clock": "sundial"}, ValueError, "clock must be one of"),
        ({"env": "theory/inaction", "seed": -1}, ValueError, "seed must be an int >= 0"),
    ],
)
def test_bad_inputs_raise_clear_errors(kwargs, error, match):
    """Each setting of the shared run (`CompareRun`) is checked as ``compare`` takes it, before anything runs."""
    with pytest.raises(error, match=match):
        compare(**{"seconds": 1.0, **kwargs})


def test_a_setting_compare_does_not_have_is_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'secs'"):
        compare("theory/inaction", "4t", secs=1.0)


@pytest.mark.parametrize("value, match", [("0", "must be >= 1"), ("many", "positive integer or 'auto'")])
def test_bad_n_workers_on_the_command_line(value, match, capsys):
    with pytest.raises(SystemExit):
        parse(["--n-workers", value])
    assert match in capsys.readouterr().err


def test_run_compare_raises_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="unknown environment id"):
        run_compare(parse(["--env", "Boxin"]))
    assert not (tmp_path / "runs").exists()


def _on_a_loaded_machine(result: dict) -> dict:
    """``result`` as a wall-clock run on a busy 2-core machine reads: the demo's 55 % inaction for the
    staggered run, its workers acting every 2.2 ticks instead of every tick, and 8 % of ticks late."""
    loaded = {**result, "clock": "wall", "schedulers": {name: dict(s) for name, s in result["schedulers"].items()}}
    staggered = loaded["schedulers"]["exp_time"]
    staggered.update(
        tau_i_mean_ticks=2.2,
        inaction_fraction=0.55,
        overruns=int(0.08 * staggered["ticks"]),
        lateness_p99_us=21_000.0,
        load_average=3.4,
    )
    loaded["machine_limits"] = machine_diagnosis(loaded, cores=2)
    return loaded


def test_compare_says_when_the_machine_not_the_scheduler_is_the_limit(inaction_result):
    import io

    from nonstop._console import Console
    from nonstop.commands.compare import render_machine_limits

    assert inaction_result["machine_limits"] == []  # the virtual clock never blames the machine
    loaded = _on_a_loaded_machine(inaction_result)
    lines = loaded["machine_limits"]
    assert [line.split(":")[0] for line in lines[:-1]] == ["exp_time", "exp_time"]  # sequential and unstaggered act
    assert "ran late" in lines[0] and "every 2.20 ticks" in lines[1] and "starved of CPU" in lines[1]  # once per τ_θ
    assert "load average 3.4" in lines[-1] and "--clock virtual" in lines[-1] and "--n-learners" not in lines[-1]
    out = io.StringIO()
    render_machine_limits(loaded, Console(file=out, force_terminal=True, color_system="standard", width=400))
    printed = out.getvalue().splitlines()
    assert len(printed) == 3 and all(line.startswith("\x1b[33m") for line in printed), printed  # yellow, one per line
    assert json.loads(to_json(loaded))["machine_limits"] == lines


def test_demo_prints_the_machine_diagnosis_under_its_table(inaction_result, tmp_path, monkeypatch, capsys):
    import nonstop.commands.compare as compare_module
    from nonstop.commands.demo import add_arguments as demo_arguments
    from nonstop.commands.demo import run_demo

    loaded = _on_a_loaded_machine(
        {**inaction_result, "schedulers": {k: inaction_result["schedulers"][k] for k in ("sequential", "exp_time")}}
    )
    monkeypatch.setattr(compare_module, "compare", lambda *a, **k: loaded)
    parser = argparse.ArgumentParser()
    demo_arguments(parser)
    assert (
        run_demo(
            parser.parse_args(["--env", "theory/inaction", "--train-seconds", "0", "--out", str(tmp_path / "demo")])
        )
        == 0
    )
    text = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    for line in loaded["machine_limits"]:
        assert " ".join(line.split()) in text


def test_any_scheduler_can_be_compared_and_the_return_per_tick_is_reported(capsys, tmp_path, monkeypatch):
    """`--schedulers` picks among every scheduler (default: the four above); each row reports the reward
    per tick beside inaction and delay. On theory/inaction β's tick earns 0 and an agent's at most 1
    (the random policy picks the noop, worth 0, a third of the time)."""
    args = parse(["--schedulers", "exp_time,quantile_hold,fill"])
    assert args.schedulers == ("exp_time", "quantile_hold", "fill") and parse([]).schedulers == SCHEDULERS
    result = compare("theory/inaction", "lognormal:4t,0.5", seconds=10.0, schedulers=args.schedulers)
    assert list(result["schedulers"]) == ["exp_time", "quantile_hold", "fill"]
    for s in result["schedulers"].values():
        assert s["reward_per_tick"] == pytest.approx(s["reward_total"] / s["ticks"])
        assert 0.0 < s["reward_per_tick"] <= 1.0 - s["inaction_fraction"] + 1e-12
    monkeypatch.chdir(tmp_path)
    assert (
        run_compare(
            parse(
                [
                    "--env",
                    "theory/inaction",
                    "--latency",
                    "4t",
                    "--seconds",
                    "3",
                    "--schedulers",
                    "exp_time,fill",
                    "--plot",
                    "",
                    "--json",
                ]
            )
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "fill" in out and "reward" in out
    assert set(json.loads(out.strip().splitlines()[-1])["schedulers"]) == {"exp_time", "fill"}
    with pytest.raises(SystemExit):
        parse(["--schedulers", "exp_time,fastest"])


def test_compare_composes_one_run_per_scheduler_on_one_seed_and_latency(monkeypatch):
    """Each scheduler is a `Run` of stand-ins (no pool of compare's own, no branch on a backend): the same
    world seed and latency for all, and a backend that cannot host stand-ins is refused before any runs."""
    from pathlib import Path

    import nonstop.studies.compare as compare_module
    import nonstop.experiment.run as run_module

    built = []

    class Counted(run_module.Run):
        def __init__(self, cfg):
            built.append(cfg)
            super().__init__(cfg)

    monkeypatch.setattr(run_module, "Run", Counted)
    result = compare("theory/inaction", "4t", seconds=1.0, seed=3, schedulers=("sequential", "exp_time"))
    assert [c.scheduler for c in built] == ["sequential", "exp_time"] and [c.n_inference for c in built] == [1, 4]
    assert {(c.env, c.seed, c.latency, c.interaction, c.learning) for c in built} == {
        ("theory/inaction", 3, "4t", "stand_in", "none")
    }
    assert result["schedulers"]["exp_time"]["inaction_fraction"] == 0.0
    source = Path(compare_module.__file__).read_text()
    assert "InferencePool" not in source and '"ray"' not in source
    built.clear()
    with pytest.raises(ValueError, match="--interaction stand_in runs policies that need no model"):
        compare("theory/inaction", "4t", seconds=1.0, backend="batched")
    assert built == []
