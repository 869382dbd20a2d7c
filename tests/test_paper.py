"""`nonstop paper FIG`: every figure of the paper behind one command (issue 25, items 3-4).

The pure parts (the figure table, the commands it runs, the encounter counts of Figures 4 and
11-13, β's lines) are checked directly; the figures that run here without the user's ROMs run
their ``tiny`` budget end to end and must show the paper's effect (marked ``slow``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from nonstop.cli import build_parser, main
from nonstop.studies.paper import BUDGET_NAMES, FIGURES, beta_returns, encounter_series, figure_listing

pytest.importorskip("torch")


def test_every_figure_of_the_paper_is_listed_with_a_command_per_budget_that_parses():
    assert sorted(FIGURES) == [4, 5, 6, 7, 8, 11, 12, 13, 14]
    parser = build_parser()
    for entry in figure_listing():
        if not entry["offered"]:
            assert entry["figure"] == 14 and "Rainbow" in entry["why_not"] and not entry["commands"]
            continue
        assert sorted(entry["commands"]) == sorted(BUDGET_NAMES) and sorted(entry["costs"]) == sorted(BUDGET_NAMES)
        for command in entry["commands"].values():
            argv = command.split()[1:]
            parser.parse_args(argv)  # a flag the verb does not take would exit here
            assert argv[0] in ("sweep", "bench")


def test_the_paper_budget_uses_the_papers_settings():
    commands = {f.number: f.command("paper") for f in FIGURES.values() if f.kind != "none"}
    assert "2xdeep" in " ".join(commands[6]) and "Boxing,Krull,NameThisGame" in commands[6]
    assert (
        commands[11][commands[11].index("--seeds") + 1] == "10"
    )  # Figures 11-12: "10 runs with different random seeds"
    assert all(i in " ".join(commands[4]) for i in ("infer_then_learn", "learn_then_infer", "parallel_learning"))
    assert "596" in commands[7][commands[7].index("--tau-theta") + 1]  # the 1B model at the Game Boy's rate
    assert commands[8][commands[8].index("--backend") + 1] == "ray"


def test_list_prints_every_figure_and_json_on_the_last_line(capsys):
    assert main(["paper", "--list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["figures"]
    assert [f["figure"] for f in listing] == sorted(FIGURES)


def test_rainbow_is_refused_plainly(capsys, tmp_path):
    assert main(["paper", "14", "--out", str(tmp_path), "--json"]) == 2
    captured = capsys.readouterr()
    assert "not offered" in captured.err and "Rainbow" in captured.err and "Traceback" not in captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["not_offered"]
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("fig", [4, 5, 11, 12, 13])
def test_game_boy_figures_name_what_is_missing_in_one_line(fig, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NONSTOP_ROMS", str(tmp_path))  # a ROM directory with no ROM in it
    assert main(["paper", str(fig), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "ROM" in err and "NONSTOP_ROMS" in err and "docs/concepts.md#game-boy-worlds" in err
    if fig != 5:
        assert "PokemonBattle:state=PATH" in err and "PokemonCatch:state=PATH" in err
    assert not (tmp_path / "out").exists()


def test_a_bad_figure_number_is_refused(capsys):
    assert main(["paper", "9"]) == 2
    assert "FIG must be one of 4, 5, 6, 7, 8, 11, 12, 13, 14" in capsys.readouterr().err


def test_battles_won_are_battles_whose_last_faint_was_the_opponents():
    # three battles: won (+1 last), lost after a win (-1 last), won after losing one of ours; a fourth still running
    episode = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3])
    reward = np.array([0, 1, 0, 1, 0, -1, -1, 1, 0, 1.0])
    source = np.array([1, 1, 0, 1, 0, 1, 1, 1, 1, 1])
    action = np.array([1, 2, 0, 0, 3, 1, 2, 2, 2, 1])  # action 0 from the agent is a noop too
    series = encounter_series("PokemonBattle", np.arange(1, 11), episode, reward, source, action)
    assert [e["success"] for e in series] == [True, False, True]
    assert [e["end_tick"] for e in series] == [3, 6, 9]
    assert [e["non_noop_actions"] for e in series] == [2, 3, 6]


def test_beta_lines_are_the_worlds_noop_and_random_returns():
    lines = beta_returns("delay-world", episodes=2, max_ticks=1200)
    # the delay world pays 1 when the action names the state (8 states): a fixed or random guess earns ~1/8 a tick
    assert 0 <= lines["noop"] <= 1200 and 60 <= lines["random"] <= 240 and lines["noop"] != lines["random"]


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


#: docs/commands.md's and docs/paper.md's figure commands, run here as written (plus --json) from a scratch
#: directory, their output checked; tests/test_doc_commands.py lists them as run here (CHECKED_HERE)
#: rather than running the same minutes-long figure a second time
FIGURE_6 = "nonstop paper 6 --budget tiny"
FIGURE_7 = "nonstop paper 7"


def _run_as_written(command: str, cwd: Path, monkeypatch, capsys) -> tuple[dict, Path]:
    """``command`` (plus --json) in-process from ``cwd``: its JSON document and its default --out."""
    monkeypatch.chdir(cwd)
    assert main([*command.split()[1:], "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1]), cwd / "runs" / "paper"


@pytest.mark.slow
def test_figure_6_tiny_shows_staggered_beating_sequential_and_2xdeep_slower(tmp_path, capsys, monkeypatch):
    document, tmp_path = _run_as_written(FIGURE_6, tmp_path, monkeypatch, capsys)
    assert document["budget"] == "tiny"
    for name in ("fig6.png", "fig6.csv", "fig6.json"):
        assert (tmp_path / name).stat().st_size > 0
    rows = [r for r in _csv(tmp_path / "fig6.csv") if r["interaction"] in ("staggered", "sequential")]
    by = {(r["arch"], r["params"], r["interaction"]): r for r in rows}
    for arch, params in {(r["arch"], r["params"]) for r in rows}:
        staggered, sequential = by[(arch, params, "staggered")], by[(arch, params, "sequential")]
        assert float(staggered["mean_return"]) >= float(sequential["mean_return"]), (arch, params)
        assert float(sequential["inaction_fraction"]) > float(staggered["inaction_fraction"])
    # the 2xDeep network declares a longer delay than the 15-layer one of the same size
    for params in ("1M", "100M"):
        assert int(by[("2xdeep", params, "staggered")]["delay"][:-1]) > int(
            by[("impala", params, "staggered")]["delay"][:-1]
        )
    betas = {
        r["interaction"]: float(r["mean_return"])
        for r in _csv(tmp_path / "fig6.csv")
        if r["interaction"].startswith("beta")
    }
    assert set(betas) == {"beta_noop", "beta_random"}
    # at 1M the learned staggered agent beats β's lines
    assert float(by[("impala", "1M", "staggered")]["mean_return"]) > max(betas.values())
    assert document["figure"] == 6 and document["png"].endswith("fig6.png")


@pytest.mark.slow
def test_figure_7_tiny_starts_algorithm_1_as_the_authors_do_and_labels_the_cold_start(tmp_path, capsys, monkeypatch):
    document, out = _run_as_written(FIGURE_7, tmp_path, monkeypatch, capsys)
    rows = document["rows"]
    assert (out / "fig7.png").exists() and document["budget"] == "tiny"  # the default budget
    search = [r for r in rows if r["part"] == "search"]
    assert {r["epsilon"] for r in search} == {0.0, 0.5} and {r["tau_theta_ticks"] for r in search} == {5.0, 5.5, 8.0}
    assert {r["start"] for r in search} == {"authors (declared)", "cold (0)"}  # the cold start: its own rows
    for r in search:
        assert r["nstar_measured"] >= r["lower_bound"]
        if r["scheduler"] == "max_time" and r["start"] == "authors (declared)":
            assert r["within_formula_plus_1"], r  # Algorithm 1 as the authors start it: its formula (+1)
    at = {(r["scheduler"], r["epsilon"], r["tau_theta_ticks"], r["start"]): r["nstar_measured"] for r in search}
    for tau in (5.0, 8.0):  # started cold, Algorithm 1 pays for the spread far past its formula
        assert at[("max_time", 0.5, tau, "cold (0)")] > 2 * at[("max_time", 0.5, tau, "authors (declared)")]
    # the jitter sweep and the two clocks' table
    assert {r["jitter"] for r in rows if r["part"] == "jitter"} == {0.001, 0.01, 0.05}
    clocks = [r for r in rows if r["part"] == "clocks"]
    assert {(r["clock"], r["scheduler"]) for r in clocks} == {
        (c, s) for c in ("virtual", "wall") for s in ("max_time", "exp_time")
    }
    assert all(r["inaction_at_n"] and "6" in r["inaction_at_n"] for r in clocks)


def test_nlstar_refuses_learner_processes_past_the_cores(capsys):
    assert main(["bench", "nlstar", "--max-learners", "999", "--plot", ""]) == 2
    assert "--backend ray" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time (tests/test_ray_backend.py)
def test_figure_8s_bench_measures_on_ray_actors_past_the_cores(tmp_path, capsys):
    """Figure 8's cheapest subset: N_L* of the k = 1 net on Ray actors of a local 127.0.0.1 cluster,
    the search allowed past this machine's cores; a 1M net keeps up with 60 Hz on one learner."""
    pytest.importorskip("ray")
    from nonstop.bench.common import usable_cores

    learners = usable_cores() + 1
    assert (
        main(
            [
                "bench",
                "nlstar",
                "--backend",
                "ray",
                "--k",
                "1",
                "--batch",
                "16",
                "--window",
                "1",
                "--max-learners",
                str(learners),
                "--plot",
                str(tmp_path / "f8.png"),
                "--json",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["backend"] == "ray" and result["max_learners"] == learners
    (row,) = result["rows"]
    assert row["nlstar_theory"] == 1 and row["nlstar_measured"] == 1  # τ_L per transition < τ_M at k = 1
    assert float(row["throughput_transitions_per_s"]["1"]) >= 60 and (tmp_path / "f8.png").exists()


@pytest.mark.parametrize("number", [4, 13])
def test_encounters_over_time_are_averaged_over_seeds_per_interaction(number, tmp_path, monkeypatch):
    """Figures 4 and 13 from their cells' encounters (the cells stand in: no ROM here)."""
    from nonstop.studies import paper

    cells = tmp_path / f"fig{number}-sweep" / "cells"
    wins = {"staggered": [True, True, False, True], "infer_then_learn": [False, True, False, False]}
    for interaction in wins:
        for seed in (0, 1):
            (cells / f"PokemonBattle-k29-70t-{interaction}-s{seed}").mkdir(parents=True)

    def series(cell_dir: Path, game: str) -> list[dict]:
        won = wins[next(i for i in wins if f"-{i}-" in cell_dir.name)]
        return [{"end_tick": 1000 * (i + 1), "success": w, "non_noop_actions": 50 * (i + 1)} for i, w in enumerate(won)]

    monkeypatch.setattr(paper, "_cell_series", series)
    rows, png = paper._over_time(FIGURES[number], "tiny", {}, tmp_path)
    by = {r["interaction"]: r for r in rows}
    assert by["staggered"]["successes_at_end"] == 3 and by["infer_then_learn"]["successes_at_end"] == 1
    assert by["staggered"]["seeds"] == 2 and by["staggered"]["ci95"] == 0  # identical seeds: no spread
    assert by["staggered"]["x"] == ("non_noop_actions" if number == 13 else "end_tick") and png.exists()


def test_device_and_dtype_reach_each_figures_command_as_it_takes_them(monkeypatch):
    """A sweep's cells get both flags, bench nlstar the device only (its learners update in fp32),
    bench nstar neither (its theory world runs no model); cpu, the default, adds nothing."""
    import torch

    from nonstop.commands.paper import _placement

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert _placement("returns", "cuda", "bf16") == ["--device", "cuda", "--dtype", "bf16"]
    assert _placement("nlstar", "cuda", "bf16") == ["--device", "cuda"]
    assert _placement("nstar", "cuda", "bf16") == []
    assert _placement("returns", "cpu", None) == []


def test_a_cuda_figure_without_cuda_is_one_line_before_anything_runs(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot be seen here")
    assert main(["paper", "6", "--device", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CUDA" in err[0], err
    assert not (tmp_path / "logs").exists()


def test_figure_6_draws_the_published_human_score_on_each_atari_panel(tmp_path, monkeypatch):
    """The paper's Figure 6 marks human performance (Mnih et al. 2015) on Boxing, Krull and
    NameThisGame; the delay world, which has no such score, gets none."""
    from nonstop.studies import paper

    monkeypatch.setattr(paper, "beta_returns", lambda game, **kw: {"noop": 0.0, "random": 1.0})
    results = [
        {
            "game": g,
            "arch": "impala",
            "params": 1_093_426,
            "k": 1,
            "delay": "5t",
            "interaction": i,
            "mean_return": 2.0,
            "ci95": 0.5,
            "seeds": 1,
        }
        for g in ("Boxing", "delay-world")
        for i in ("staggered", "sequential")
    ]
    rows, png = paper._returns(paper.figure(6), "tiny", {"results": results}, tmp_path)
    human = [r for r in rows if r["interaction"].startswith("human")]
    assert [(r["game"], r["mean_return"]) for r in human] == [("Boxing", paper.HUMAN_SCORES["Boxing"])]
    assert png is not None and png.exists() and png.stat().st_size > 0
