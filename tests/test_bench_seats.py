"""``nonstop bench seats`` (issue 32 item 6) runs end to end: quick, on the virtual clock (its figures
exact) through the command line with JSON last, and on the wall clock in a short run. Its speed
target is judged by the benchmark's own full run, never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nonstop.bench.channels import our_segments

pytest.importorskip("magent2")
pytest.importorskip("torch")

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _bench(*argv: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "nonstop", "bench", "seats", "--quick", "--json", *argv]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_bench_seats_quick_on_the_virtual_clock_one_batch_a_tick_across_seats() -> None:
    before = set(our_segments())
    result = _bench("--clock", "virtual", "--seats", "2,18", "--seconds", "1", "--warmup-s", "0.5")
    assert set(our_segments()) - before == set()  # every seat's slot and queue unlinked
    assert result["bench"] == "seats" and result["clock"] == "virtual" and result["meets_target"] is True
    runs = {(r["mode"], r["seats"]): r for r in result["results"]}
    assert set(runs) == {("server", 2), ("pools", 2), ("server", 18), ("pools", 18)}
    for n in (2, 18):
        server, pools = runs["server", n], runs["pools", n]
        assert server["batch_sizes"] == {str(n): server["batch_sizes"][str(n)]}  # every batch: every seat
        assert server["seats_acted_every_tick"] == n == pools["seats_acted_every_tick"]
        assert server["inaction_max"] == 0.0 and server["delay_mean_ticks"] == 1.0
        # declared H100 k=1 line: one batch of n against n passes of one
        assert server["forward_ms_per_tick"] == pytest.approx(0.315 + 0.005 * n)
        assert pools["forward_ms_per_tick"] == pytest.approx(n * 0.32, rel=0.1)  # a pass a seat a tick


@pytest.mark.wall
def test_bench_seats_quick_on_the_wall_clock_reports_every_figure() -> None:
    result = _bench("--seats", "2", "--seconds", "1.5", "--warmup-s", "0.5")
    assert result["clock"] == "wall" and {r["mode"] for r in result["results"]} == {"server", "pools"}
    for r in result["results"]:
        for key in ("inaction_max", "delay_mean_ticks", "forward_ms_per_tick", "lateness_p99_ms", "batch_size_mean"):
            assert isinstance(r[key], float), (r["mode"], key)
        assert r["ticks"] >= 25
    assert isinstance(result["meets_target"], bool) and result["judged"]["seats"] == 2


def test_bench_seats_refuses_bad_counts() -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    cmd = [sys.executable, "-m", "nonstop", "bench", "seats", "--seats", "0,500"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode != 0 and "--seats" in out.stderr and "Traceback" not in out.stderr


def test_bench_seats_json_carries_the_verdict_as_a_flag_and_the_table_renders_it(capsys: pytest.CaptureFixture) -> None:
    from nonstop.bench import seats

    result = _bench("--clock", "virtual", "--seats", "2")
    assert result["meets_target"] is True and "verdict" not in result  # rich markup stays out of the JSON
    seats.render(result)
    shown = capsys.readouterr().out
    assert "judged:" in shown and "meets" in shown and "[green]" not in shown


def test_bench_seats_acts_for_a_thousand_seats_on_a_map_sized_for_them() -> None:
    """Issue 43: ``--seats 1000`` runs battle on the smallest map holding 1,000 agents (115: 1,058),
    every seat acted for at every tick in one batch a tick (two blocks, a team each)."""
    result = _bench("--clock", "virtual", "--seats", "1000", "--mode", "server", "--seconds", "1", "--warmup-s", "0.5")
    (run,) = result["results"]
    assert (run["seats"], run["map_size"], run["agents"]) == (1000, 115, 1058)
    assert run["seats_acted_every_tick"] == 1000 and run["inaction_max"] == 0.0 and run["delay_mean_ticks"] == 1.0
    assert run["batch_sizes"] == {"1000": run["batch_sizes"]["1000"]}
    assert result["judged"]["seats"] == 1000 and result["meets_target"] is True


@pytest.mark.wall
def test_bench_seats_says_how_the_forward_fits_the_tick_and_what_the_host_costs() -> None:
    result = _bench("--seats", "4", "--mode", "server", "--seconds", "1", "--warmup-s", "0.5")
    (run,) = result["results"]
    fit = run["forward_fit"]
    assert fit["tau_m_ms"] == 50.0 and isinstance(fit["fits"], bool) and fit["batch_ms"]["p99"] > 0
    assert "of the 50 ms tick" in fit["how"] and result["judged"]["forward_fit"] == fit
    assert run["host_cpu_ms_per_tick"] > 0 and len(run["load_average"]) == 3


@pytest.mark.parametrize(
    "argv,said",
    [(["--seats", "4000"], "1..3200"), (["--seats", "200", "--map-size", "45"], "162 agents")],
)
def test_bench_seats_refuses_more_seats_than_the_world_has(argv: list[str], said: str) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-m", "nonstop", "bench", "seats", *argv], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode != 0 and said in out.stderr and "Traceback" not in out.stderr


def test_bench_seats_runs_no_pool_a_seat_past_162_and_says_so(capsys: pytest.CaptureFixture) -> None:
    from nonstop.bench import seats

    result = _bench("--clock", "virtual", "--seats", "170", "--seconds", "0.5", "--warmup-s", "0.2")
    assert [(r["mode"], r["seats"], r["map_size"]) for r in result["results"]] == [("server", 170, 50)]
    assert result["skipped"] == [{"mode": "pools", "seats": 170, "why": result["skipped"][0]["why"]}]
    seats.render(result)
    assert "170 seats, pools: skipped" in capsys.readouterr().out
