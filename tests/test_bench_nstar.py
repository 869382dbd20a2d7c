"""``nonstop bench nstar`` end to end on the virtual clock (fast, exact), and its argument checks.
The wall-clock figures live in the benchmark's own output, never in timed unit tests."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from nonstop.bench import nstar


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    nstar.add_arguments(parser)
    return parser.parse_args(argv)


def test_quick_virtual_nstar_equals_theory_and_reports_the_machine():
    result = nstar.run(_args(["--quick", "--tau-theta", "1,3,5", "--plot", ""]))
    got = sorted((r["scheduler"], r["tau_theta_ticks"], r["nstar_measured"]) for r in result["rows"])
    assert got == sorted(
        (name, tau, tau) for name in ("max_time", "exp_time", "quantile_hold") for tau in (1, 3, 5)
    )  # constant latency: every scheduler needs exactly ⌈τ_θ/τ_M⌉
    assert all(r["lower_bound"] == r["tau_theta_ticks"] for r in result["rows"])
    assert result["all_match_theory"]
    for row in result["rows"]:
        if row["nstar_measured"] > 1:  # one worker short does leave β ticks
            assert row["inaction_at_nstar_minus_1"] > 0
        assert row["inaction_at_nstar"] == 0.0 and row["tau_i_cv"] == 0.0
        assert row["tick_cycle"] is None  # whole-tick phases: only where starts align to ticks (wall)
    assert len(result["loadavg_before"]) == 3 and result["machine"]["cpu_count"]
    json.loads(json.dumps(result, allow_nan=False))


@pytest.mark.parametrize(
    "argv, match",
    [(["--tau-theta", "1,x"], "--tau-theta takes comma-separated"), (["--tau-theta", "0"], "positive finite")],
)
def test_bad_tau_theta_fails_before_any_run(argv, match):
    with pytest.raises(ValueError, match=match):
        nstar.run(_args(argv + ["--plot", ""]))


@pytest.mark.slow
def test_lognormal_quantile_hold_beats_the_paper_and_stays_near_the_bound(tmp_path):
    """Variable latency (σ = 0.5, τ̄ = 4 ticks): quantile_hold's N_I* is within 2× the bound while
    Algorithm 2 needs more; both rows carry the formula, the bound, the delay paid and all trials;
    the auto row reports the workers it chose. A σ sweep also writes the N_I*-against-σ plot."""
    result = nstar.run(
        _args(
            [
                "--quick",
                "--latency",
                "lognormal",
                "--sigma",
                "0.25,0.5",
                "--tau-theta",
                "4",
                "--scheduler",
                "exp_time,quantile_hold",
                "--plot",
                str(tmp_path / "n.png"),
            ]
        )
    )
    rows = {(r["scheduler"], r["sigma"]): r for r in result["rows"]}
    hold, exp = rows[("quantile_hold", 0.5)], rows[("exp_time", 0.5)]
    assert hold["lower_bound"] == exp["lower_bound"] == 4
    assert hold["nstar_measured"] <= 2 * 4 < exp["nstar_measured"]
    assert hold["inaction_at_nstar"] <= 0.005 and hold["inaction_at_nstar_minus_1"] > 0.005
    assert hold["delay_mean_ticks"] > exp["delay_mean_ticks"]  # the trade: delay for workers
    assert str(hold["nstar_measured"] - 1) in hold["trials"]
    assert rows[("auto", 0.5)]["n_workers_chosen"] >= 4 and rows[("auto", 0.5)]["inaction_at_nstar"] <= 0.01
    assert result["quantile_hold_within_2x_bound"] is True
    # beside N_I*, what it earns: the hold's delay costs return where the world drifts, nothing where it does not
    for row in (hold, exp, rows[("auto", 0.5)]):
        drift, still = row["return"]["delay_world"], row["return"]["still_world"]
        assert drift["p_minimax"] == 0.97 and still["p_minimax"] == 1.0 and still["regret_delay"] == 0.0
        for world in (drift, still):
            parts = world["regret_learning"] + world["regret_inaction"] + world["regret_delay"]
            assert parts == pytest.approx(world["regret"], abs=1e-9) and world["regret_learning"] == 0.0
    assert hold["return"]["delay_world"]["regret_delay"] > exp["return"]["delay_world"]["regret_delay"] + 0.2
    assert hold["return"]["delay_world"]["return_mean"] < exp["return"]["delay_world"]["return_mean"]
    assert (tmp_path / "n.png").exists() and (tmp_path / "n_sigma.png").exists()
    json.loads(json.dumps(result, allow_nan=False))


def test_empirical_latency_file_is_rescaled_to_each_mean(tmp_path):
    path = tmp_path / "times.txt"
    path.write_text("# measured seconds\n0.05\n0.05\n0.10\n")
    result = nstar.run(
        _args(
            [
                "--latency",
                f"empirical:{path}",
                "--tau-theta",
                "3",
                "--scheduler",
                "quantile_hold",
                "--quick",
                "--plot",
                "",
            ]
        )
    )
    (hold, auto) = result["rows"]
    assert result["empirical_source"] == str(path) and hold["lower_bound"] == 3
    assert hold["tau_theta_mean_ticks"] == pytest.approx(3, rel=0.1)
    assert hold["nstar_measured"] <= 6 and hold["inaction_at_nstar"] <= 0.005
    with pytest.raises(
        ValueError, match="--latency must be one of constant, normal, lognormal, egreedy, empirical:FILE"
    ):
        nstar.run(_args(["--latency", "gamma", "--plot", ""]))


def test_a_scheduler_that_needs_more_than_the_cap_is_reported_above_it(capsys, monkeypatch):
    """Algorithm 1 pads every worker to the largest τ_θ seen: under a heavy tail it needs far more
    than 4× the bound when it starts cold (τ̂max = 0: every new maximum re-spaces it; started from the
    declared 99.9 % point it needed 188 here). With the cap there the row says "> cap" with every trial,
    instead of searching on to 100,000 workers; rows that pass are unaffected."""
    result = nstar.run(
        _args(
            [
                "--quick",
                "--latency",
                "lognormal",
                "--tau-theta",
                "4",
                "--scheduler",
                "max_time,quantile_hold",
                "--max-workers",
                "0",
                "--tau-theta-max",
                "cold",
                "--plot",
                "",
            ]
        )
    )
    rows = {r["scheduler"]: r for r in result["rows"]}
    alg1, hold = rows["max_time"], rows["quantile_hold"]
    assert alg1["nstar_measured"] is None and alg1["nstar_above"] == 256  # the floor of the cap
    assert alg1["ratio_to_bound"] is None and alg1["inaction_at_nstar"] > 0.005  # it still misses there
    assert max(int(n) for n in alg1["trials"]) == 256
    assert hold["nstar_measured"] is not None and hold["nstar_above"] is None
    assert result["above_cap"] == [{"scheduler": "max_time", "tau_theta_ticks": 4, "sigma": 0.5, "nstar_above": 256}]
    monkeypatch.setenv("COLUMNS", "200")  # the whole table on one line per row
    nstar.render(result)
    assert "> 256" in capsys.readouterr().out
    json.loads(json.dumps(result, allow_nan=False))


def test_a_spent_time_budget_ends_the_search_with_what_it_showed():
    """Each row gets its first trial; past --time-budget no other starts, and the row says so (a Ray
    search on a loaded machine would otherwise start hundreds of actors)."""
    result = nstar.run(
        _args(["--tau-theta", "5", "--scheduler", "exp_time,max_time", "--time-budget", "1e-6", "--plot", ""])
    )
    assert result["time_budget_s"] == 1e-6
    for row in result["rows"]:  # the first trial (at the formula, 5) passes; 4 would have been next
        assert row["trials"] == {"5": 0.0} and row["budget_exhausted"]
        assert row["nstar_measured"] is None and row["nstar_at_most"] == 5 and row["nstar_above"] is None
    assert [r["scheduler"] for r in result["budget_exhausted"]] == ["exp_time", "max_time"]
    assert result["above_cap"] == []
    with pytest.raises(ValueError, match="--time-budget must be a positive number of seconds, got -1.0"):
        nstar.run(_args(["--tau-theta", "5", "--time-budget", "-1", "--plot", ""]))


def test_a_search_cut_short_is_not_a_match():
    """A row whose search the time budget stopped has no N_I*: the run must not say that every row
    matches theory (all() over the measured rows alone would)."""
    result = nstar.run(
        _args(["--quick", "--tau-theta", "3", "--scheduler", "exp_time", "--time-budget", "1e-9", "--plot", ""])
    )
    (row,) = result["rows"]
    assert row["budget_exhausted"] and row["nstar_measured"] is None
    assert result["all_match_theory"] is False and result["all_within_theory_plus_1"] is False


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--nodes", "2"], "needs --backend ray"),
        (["--nodes", "0"], "--nodes must be an integer >= 1"),
    ],
)
def test_nodes_needs_a_local_ray_cluster(argv, match):
    with pytest.raises(ValueError, match=match):
        nstar.run(_args(argv + ["--plot", ""]))


def test_a_failed_ray_trial_keeps_the_rows_trials(monkeypatch):
    """A Ray trial that cannot run (an actor that does not start: a node out of memory) stops that
    row's search with the reason, and the trials measured before it survive in the result (before,
    the exception ended the run and every measured trial was lost)."""
    real_trial = nstar.trial

    def fake_trial(spec, warm=None):
        assert spec.backend == "ray"
        if spec.n_workers == 3:  # the first trial runs (one worker short of theory: it fails)
            return real_trial(dataclasses.replace(spec, n_workers=1, backend="thread"))
        raise RuntimeError("Ray actor did not start within 120s: node out of memory")

    monkeypatch.setattr(nstar, "trial", fake_trial)
    result = nstar._run(_args(["--quick", "--tau-theta", "3", "--scheduler", "exp_time", "--plot", ""]), "ray")
    (row,) = result["rows"]
    assert row["nstar_measured"] is None and row["trials"] == {"3": row["inaction_at_nstar"]}
    assert row["trials"]["3"] > 0.5  # what the one worker measured, kept
    assert "trial of 6 workers failed" in row["stopped_by"] and "out of memory" in row["stopped_by"]
    assert not row["budget_exhausted"] and result["budget_exhausted"] == []
    assert result["stopped"][0]["nstar_above"] == 3 and result["above_cap"] == []
    assert result["all_match_theory"] is False
    nstar.render(result)  # the human table shows the stopped row's bracket, not a crash


def test_wall_formula_counts_the_tau_theta_the_world_saw(monkeypatch):
    """On the wall clock a row's formula is the τ_θ its workers really took, from the start their
    schedule counted to the action in hand: a constant 70-tick latency whose Ray calls add up to
    1.05 ticks, a few past 71, needs 72 workers in flight, not ⌈mean⌉ = 71. Trials faked: inaction
    only below 72 workers, as such τ_θ leave it."""
    import numpy as np

    tau_m = 1 / 60
    seen = 70 * tau_m + np.linspace(0.1, 1.05, 400) * tau_m  # 70.1 .. 71.05 ticks: 5 % past 71

    def fake_trial(spec, warm=None):
        n = spec.n_workers
        return {
            "inaction_fraction": 0.0 if n >= 72 else 0.01,
            "tau_i_mean_ticks": 1.0,
            "tau_i_cv": 0.0,
            "delay_mean_ticks": 72.0,
            "delay_p99_ticks": 72.0,
            "world_taus_s": seen,
            "tau_theta_max_ticks": float(seen.max() / tau_m) - 0.2,
            "tau_theta_mean_ticks": float(seen.mean() / tau_m) - 0.2,
            "tau_theta_world_max_ticks": float(seen.max() / tau_m),
            "tau_theta_world_mean_ticks": float(seen.mean() / tau_m),
        }

    monkeypatch.setattr(nstar, "trial", fake_trial)
    result = nstar._run(
        _args(["--clock", "wall", "--tau-theta", "70", "--scheduler", "quantile_hold,exp_time,max_time", "--plot", ""]),
        "ray",
    )
    rows = {r["scheduler"]: r for r in result["rows"]}
    hold, alg2, alg1 = rows["quantile_hold"], rows["exp_time"], rows["max_time"]
    assert hold["nstar_measured"] == 72 and hold["formula_tau"] == "world"
    assert hold["nstar_formula"] == 72 and hold["matches_theory"]  # in flight: 71 always, a 72nd 5 % of the time
    assert alg2["nstar_formula"] == 71  # Algorithm 2's mean: ⌈70.6⌉
    assert alg1["nstar_formula"] == 72 and alg1["tau_theta_world_max_ticks"] == pytest.approx(71.05)  # the max
    assert "world_taus_s" not in hold  # the samples feed the formula, not the JSON


def test_algorithm_1_started_as_the_authors_start_it_needs_its_formula():
    """ε-greedy at ε 0.5, τ̄_θ 5 ticks (Figure 7): Algorithm 1 started from the declared maximum with the
    workers staggered by it over N (the authors' t_theta_max) needs its own formula ⌈τ_θmax/τ_M⌉ (+1 at
    most); started cold (τ̂max = 0, no stagger) it needs far more. Each start is its own labelled row."""
    result = nstar.run(
        _args(
            [
                "--quick",
                "--latency",
                "egreedy",
                "--sigma",
                "0.5",
                "--tau-theta",
                "5",
                "--scheduler",
                "max_time",
                "--tau-theta-max",
                "declared,cold",
                "--return-seeds",
                "0",
                "--plot",
                "",
            ]
        )
    )
    rows = {r["start"]: r for r in result["rows"]}
    assert set(rows) == {"authors (declared)", "cold (0)"}
    authors, cold = rows["authors (declared)"], rows["cold (0)"]
    assert (
        authors["initial_estimate_ticks"] >= authors["tau_theta_max_ticks"] and cold["initial_estimate_ticks"] is None
    )
    assert authors["nstar_measured"] <= authors["nstar_formula"] + 1
    assert cold["nstar_measured"] > 2 * cold["nstar_formula"]


def test_at_workers_measures_the_inaction_at_each_n_without_a_search():
    result = nstar.run(
        _args(
            [
                "--quick",
                "--latency",
                "egreedy",
                "--sigma",
                "0",
                "--tau-theta",
                "5",
                "--jitter",
                "0.01",
                "--scheduler",
                "max_time,exp_time",
                "--at-workers",
                "4,6",
                "--return-seeds",
                "0",
                "--plot",
                "",
            ]
        )
    )
    for row in result["rows"]:
        assert row["fixed_workers"] and set(row["trials"]) == {"4", "6"} and row["nstar_measured"] is None
        assert row["trials"]["4"] > 0.1  # 4 workers cannot cover 5-tick inferences
        assert row["jitter"] == 0.01 and row["start"] == "authors (declared)"
    assert {r["scheduler"]: r["trials"]["6"] for r in result["rows"]}["max_time"] == 0.0


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--tau-theta-max", "soon"], "--tau-theta-max takes"),
        (["--jitter", "0.1"], "--jitter is the forward pass's spread"),
        (["--at-workers", "2.5"], "--at-workers takes"),
    ],
)
def test_bad_start_jitter_or_workers_fail_before_any_run(argv, match):
    with pytest.raises(ValueError, match=match):
        nstar.run(_args(argv + ["--plot", "", "--return-seeds", "0"]))
