"""Every command the README and docs/*.md show parses with the real CLI, and each one runs: as
written, or in a shortened form this file lists with its reason, or not at all for a reason listed
here too (a ROM, a GPU, a server nonstop does not ship). A command that is in none of the lists
fails `test_every_command_is_run_or_listed`, so a new line in the docs cannot go unchecked.

Commands are collected by `doc_commands` from the pages' shell blocks and backticked spans. Four
kinds of span are checked by rule, not listed one by one:

* a *mention* of a verb in the prose (``nonstop report``, ``nonstop bench nstar``): the verb must
  exist (``nonstop serve``'s is also served, below); of a flag (``nonstop train --track``): the
  verb must have it, taking a value;
* a benchmark in the prose (``nonstop bench clock --json``): a full one takes minutes; the test
  `BENCH_TESTS` names runs its quick form;
* a *synopsis* (``nonstop report RUN [--html]``): parsed with `SAMPLE_VALUES` for its placeholders
  and every optional part taken;
* ``pip install``: every extra it names must be one of pyproject.toml's, and the README's two are
  run for real (the first in `test_quick_start_in_a_fresh_venv`, the second by .ci/run, verbatim).

A page's shell block runs in order in one scratch directory (``nonstop report runs/cartpole`` after
the ``nonstop train … --out runs/cartpole`` above it), with ``data/`` of the repository beside it, as
a reader who cloned it would have; each span runs alone.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from doc_commands import (
    PAGES,
    ROOT,
    DocCommand,
    all_commands,
    command_words,
    is_synopsis,
    shell_commands,
    synopsis_argv,
)

from nonstop import cli
from nonstop.bench import BENCHMARKS

SRC = str(ROOT / "src")
#: the longest one command may take (the slowest listed here takes about 30 s on a quiet 2-core machine)
RUN_TIMEOUT = 300

#: Run exactly as the page shows them: each takes seconds.
AS_WRITTEN = {
    "nonstop envs",
    "nonstop report runs/cartpole --html",
    "nonstop report runs/cartpole",
    "nonstop report runs/duel",
    "nonstop compare --env Boxing --latency 6t",
    "nonstop tolerance --env FrozenLake-v1",
    "nonstop plan --k 98 --hz 60 --forward-ms 700 --update-ms 5000",
    "nonstop train --help",
    "nonstop bench --help",
    "nonstop paper --list",
    "nonstop bench gpu --device cpu --k 1 --quick",
    "nonstop train --env CartPole --backend batched --latency 0.6t --n-inference 2 --scheduler quantile_hold "
    "--learner-backend device --seconds 30",
    "nonstop bench learn --updates-only --update-k 0.25 --update-count 5",
}

#: Run shortened: the page's command → (what runs instead, why). The stand-in keeps every flag of the
#: page's command (`test_a_shortened_command_keeps_every_flag`); ``&&`` runs a prerequisite first.
SHORTENED: dict[str, tuple[str, str]] = {
    "nonstop train --env multi/battle --env-arg map_size=20 --clock virtual --backend batched --n-inference 1 "
    "--batch-curve linear:0.5t,0.01t --seconds 60 --replay-capacity 100000 --out runs/battle-lanes": (
        "nonstop train --env multi/battle --env-arg map_size=20 --clock virtual --backend batched --n-inference 1 "
        "--batch-curve linear:0.5t,0.01t --seconds 5 --replay-capacity 100000 --out runs/battle-lanes",
        "60 world s are ~40 s of this machine; 5 run every part (tests/test_team_train.py checks what they do)",
    ),
    "nonstop train --env multi/battle --env-arg map_size=20 --clock virtual --backend thread --latency 2t "
    "--seconds 60 --replay-capacity 100000 --out runs/battle-pools": (
        "nonstop train --env multi/battle --env-arg map_size=20 --clock virtual --backend thread --latency 2t "
        "--seconds 5 --replay-capacity 100000 --out runs/battle-pools",
        "60 world s are ~50 s of this machine; 5 run every part",
    ),
    "nonstop train --env CartPole --seconds 2000 --out runs/cartpole": (
        "nonstop train --env CartPole --seconds 30 --out runs/cartpole",
        "2000 world seconds take ~2.5 min; 30 take 5 s",
    ),
    "nonstop train --algo sac --env Pendulum-v1 --seconds 1000 --out runs/pendulum": (
        "nonstop train --algo sac --env Pendulum-v1 --seconds 10 --learning-starts 100 --batch-size 32 --out runs/pendulum",
        "1000 world seconds of SAC (its 256-wide MLPs, an update a tick) take ~30 min on a loaded 2-core machine; 10 "
        "seconds with smaller batches take ~35 s",
    ),
    "nonstop train --algo td3 --env Pendulum-v1 --seconds 500 --latency 1t --out runs/td3": (
        "nonstop train --algo td3 --env Pendulum-v1 --seconds 10 --latency 1t --learning-starts 100 --batch-size 32 "
        "--out runs/td3",
        "500 world seconds of TD3 (10,000 ticks, an update a tick) took 10.5 min on a loaded 2-core machine; 10 "
        "seconds with smaller batches take seconds",
    ),
    "nonstop train --env Boxing --clock wall --latency 6t --n-learners 2 --out runs/boxing": (
        "nonstop train --env Boxing --clock wall --latency 6t --n-learners 2 --out runs/boxing --seconds 3",
        "the default is 600 s of real time",
    ),
    "nonstop train --resume runs/cartpole --seconds 3000": (
        "nonstop train --resume runs/cartpole --seconds 40",
        "continues the 30-s stand-in above, to 40 s in all",
    ),
    "WANDB_MODE=offline nonstop train --env CartPole --seconds 600 --out runs/cartpole-tracked --track wandb,mlflow": (
        "WANDB_MODE=offline nonstop train --env CartPole --seconds 20 --out runs/cartpole-tracked --track wandb,mlflow",
        "600 world seconds take ~45 s; both trackers start, log and finish in 20",
    ),
    "nonstop train --env CartPole --backend batched --latency 0.6t --n-inference 2 --scheduler quantile_hold "
    "--batch-curve linear:0.5t,0.05t --max-batch 64 --seconds 60": (
        "nonstop train --env CartPole --backend batched --latency 0.6t --n-inference 2 --scheduler quantile_hold "
        "--batch-curve linear:0.5t,0.05t --max-batch 64 --seconds 10",
        "60 world seconds: 10 are enough to serve a batch",
    ),
    "nonstop train --env multi/duel --self-play --latency 2t --opponent-latency 5t --seconds 600 --out runs/duel": (
        "nonstop train --env multi/duel --self-play --latency 2t --opponent-latency 5t --seconds 20 --out runs/duel",
        "600 world seconds; 20 play several matches for `nonstop report runs/duel`",
    ),
    "nonstop train --algo sac --env multi/duel-continuous --self-play --clock virtual --latency 2t --seconds 600 "
    "--out runs/duel-sac": (
        "nonstop train --algo sac --env multi/duel-continuous --self-play --clock virtual --latency 2t --seconds 8 "
        "--out runs/duel-sac",
        "600 world seconds of SAC; 8 reach its first updates and snapshots",
    ),
    "nonstop train --env multi/Boxing --self-play --opponents latest --snapshot-every 60 --pool-size 16 --out runs/box": (
        "nonstop train --env multi/Boxing --self-play --opponents latest --snapshot-every 60 --pool-size 16 --out runs/box "
        "--seconds 3",
        "the default is 600 world seconds of two-player Atari",
    ),
    "nonstop compare --clock wall": ("nonstop compare --clock wall --seconds 2", "4 schedulers × 10 s of real time"),
    "nonstop train --latency empirical:data/latency/impala_k98_h100.txt": (
        "nonstop train --latency empirical:data/latency/impala_k98_h100.txt --seconds 3 --out runs/empirical",
        "the default is 600 world seconds of Boxing",
    ),
    "nonstop train --self-play": (
        "nonstop train --self-play --env multi/duel --seconds 10 --out runs/selfplay",
        "the flag as the prose names it needs a two-seat world and a length",
    ),
    "nonstop train --env CartPole --latency 3t --delay-aware --seconds 600 --out runs/cartpole-aware": (
        "nonstop train --env CartPole --latency 3t --delay-aware --seconds 20 --out runs/cartpole-aware",
        "600 world seconds; 20 fill the replay with what the actor saw",
    ),
    "nonstop bench seats --seats 162 --json": (
        "nonstop bench seats --seats 162 --json --quick --clock virtual --seconds 1",
        "20 s of 162 seats against 162 pools on the wall clock; one virtual second",
    ),
    "nonstop bench seats --seats 1000": (
        "nonstop bench seats --seats 1000 --quick --clock virtual --seconds 1 --warmup-s 0.5",
        "20 s of 1,000 seats on the wall clock; one virtual second",
    ),
    "nonstop bench seats --seats 1000 --json": (
        "nonstop bench seats --seats 1000 --json --quick --clock virtual --seconds 1 --warmup-s 0.5",
        "20 s of 1,000 seats on the wall clock; one virtual second",
    ),
    "nonstop bench seats --seats 162,1000 --mode server --json": (
        "nonstop bench seats --seats 162,1000 --mode server --json --quick --clock virtual --seconds 1 --warmup-s 0.5",
        "20 s of 162 and of 1,000 seats on the wall clock; one virtual second each",
    ),
    "nonstop bench ticklog --seats 1000": (
        "nonstop bench ticklog --seats 1000 --rows 300 --rss-at 150 --rate 0",
        "8,100 appends of 1,000 seats a variant at 400 a second; 300 unpaced",
    ),
    "nonstop bench ticklog --seats 1000 --json": (
        "nonstop bench ticklog --seats 1000 --json --rows 300 --rss-at 150 --rate 0",
        "8,100 appends of 1,000 seats a variant at 400 a second; 300 unpaced",
    ),
    "nonstop bench seats --clock virtual": (
        "nonstop bench seats --clock virtual --quick --seconds 1",
        "10 s at 2 to 162 seats; the quick counts for one virtual second",
    ),
    "nonstop bench reference --algo sac --env Pendulum-v1 --steps 10000 --seeds 0 1 2 --jobs 2": (
        "nonstop bench reference --algo sac --env Pendulum-v1 --steps 10000 --seeds 0 1 2 --jobs 2 --quick --steps 400 "
        "--seeds 0 --jobs 1",
        "six runs of 10,000 steps take ~10 min on 2 cores; one quick run of 400 steps a side, in turn",
    ),
    "nonstop bench reference --algo sac --env HalfCheetah-v5 --steps 100000 --seeds 0 1 2 --jobs 2": (
        "nonstop bench reference --algo sac --env HalfCheetah-v5 --steps 100000 --seeds 0 1 2 --jobs 2 --quick "
        "--steps 400 --seeds 0 --algo-arg learning_starts=200 --jobs 1",
        "six runs of 100,000 HalfCheetah steps take ~70 min on 2 cores; 400 quick steps a side, one seed, in turn",
    ),
    "nonstop bench delay --budget small --json --plot runs/delay.png": (
        "nonstop bench delay --budget small --json --plot runs/delay.png --envs CartPole --algos dqn,dqn+delay "
        "--taus 1,3 --seeds 1 --ticks 300 --last 1",
        "the small budget trains 36 runs of 15,000 ticks (hours on 2 cores)",
    ),
    "nonstop bench delay --envs Pendulum-v1 --taus 1,6 --algos sac,sac+delay --seeds 3 --ticks 15000 --judged-cells "
    "--jobs 3 --json --plot runs/delay.png": (
        "nonstop bench delay --envs Pendulum-v1 --taus 1,6 --algos sac,sac+delay --seeds 3 --ticks 15000 --judged-cells "
        "--jobs 3 --json --plot runs/delay.png --seeds 1 --ticks 300 --last 1 --jobs 2",
        "the judged grid: 9 runs of 15,000 ticks (an hour on a loaded 2-core machine); one seed of 300 ticks, 2 at once",
    ),
    "nonstop bench delay --envs Pendulum-v1 --taus 1,6 --algos sac,bpql --judged-cells --seeds 3 --ticks 15000 --json": (
        "nonstop bench delay --envs Pendulum-v1 --taus 1,6 --algos sac,bpql --judged-cells --seeds 3 --ticks 15000 --json "
        "--seeds 1 --ticks 300 --last 1",
        "BPQL's judged Pendulum grid: 9 runs of 15,000 ticks (50 minutes on a loaded 2-core machine); one seed of 300",
    ),
    "nonstop bench delay --envs HalfCheetah-v5 --taus 6 --algos bpql --seeds 3 --ticks 100000 --jobs 3 --json": (
        "nonstop bench delay --envs HalfCheetah-v5 --taus 6 --algos bpql --seeds 3 --ticks 100000 --jobs 3 --json "
        "--seeds 1 --ticks 100 --last 1 --jobs 1",
        "3 runs of 100,000 HalfCheetah ticks take 40 minutes on 2 quiet cores; 100 ticks start the world and BPQL",
    ),
    "nonstop bench delay --envs Pendulum-v1 --taus 1,6 --algos sac,dmsac --judged-cells --seeds 3 --ticks 15000 "
    "--jobs 2 --json": (
        "nonstop bench delay --envs Pendulum-v1 --taus 1,6 --algos sac,dmsac --judged-cells --seeds 3 --ticks 15000 "
        "--jobs 2 --json --seeds 1 --ticks 300 --last 1 --jobs 1",
        "DMSAC's judged Pendulum grid: 9 runs of 15,000 ticks (22 minutes, 2 at once on 2 cores); one seed of 300",
    ),
    "nonstop bench delay --envs HalfCheetah-v5 --taus 6 --algos dmsac --seeds 3 --ticks 100000 --jobs 3 --json": (
        "nonstop bench delay --envs HalfCheetah-v5 --taus 6 --algos dmsac --seeds 3 --ticks 100000 --jobs 3 --json "
        "--seeds 1 --ticks 100 --last 1 --jobs 1",
        "3 runs of 100,000 HalfCheetah ticks take over an hour on 2 shared cores; 100 ticks start the world and DMSAC",
    ),
    "nonstop bench delay --envs HalfCheetah-v5 --taus 6 --algos dmsac --seeds 3 --ticks 100000 --jobs 3": (
        "nonstop bench delay --envs HalfCheetah-v5 --taus 6 --algos dmsac --seeds 3 --ticks 100000 --jobs 3 "
        "--seeds 1 --ticks 100 --last 1 --jobs 1",
        "the README's delay row: 3 runs of 100,000 HalfCheetah ticks (over an hour on 2 shared cores); 100 ticks",
    ),
    "nonstop train --algo sac --delay-aware --env HalfCheetah-v5 --latency 1t --scheduler max_time --n-inference 1 "
    "--seconds 5000 --out runs/cheetah": (
        "nonstop train --algo sac --delay-aware --env HalfCheetah-v5 --latency 1t --scheduler max_time --n-inference 1 "
        "--seconds 5000 --out runs/cheetah --seconds 5",
        "100,000 ticks of SAC take most of an hour on 2 cores; 100 ticks start the world and the learner",
    ),
    "nonstop train --algo sac --env HalfCheetah-v5 --latency 1t --scheduler max_time --n-inference 1 --seconds 5000 "
    "--out runs/cheetah-plain": (
        "nonstop train --algo sac --env HalfCheetah-v5 --latency 1t --scheduler max_time --n-inference 1 --seconds 5000 "
        "--out runs/cheetah-plain --seconds 5",
        "100,000 ticks of SAC take most of an hour on 2 cores; 100 ticks start the world and the learner",
    ),
    "nonstop train --scheduler fill": (
        "nonstop train --scheduler fill --env theory/delay-cycle --latency lognormal:5t,0.5 --seconds 10 --out runs/fill",
        "the prose names the flag; a world where delay costs, a spread τ_θ and a length make it run",
    ),
    "nonstop train --track wandb": (
        "WANDB_MODE=offline nonstop train --track wandb --env CartPole --seconds 10 --out runs/tracked",
        "offline (CI has no W&B account), and short",
    ),
    "nonstop bench nstar --latency lognormal --sigma 0.25,0.5,1": (
        "nonstop bench nstar --latency lognormal --sigma 0.5 --tau-theta 5 --return-seeds 0 --plot '' --quick",
        "the full run takes ~6 min, its quick form ~40 s; one σ and one τ̄ in ~10 s",
    ),
    "nonstop bench return --sigma 0.05": ("nonstop bench return --sigma 0.05 --quick", "the full run takes ~5 min"),
    "nonstop bench return --cells held-out": (
        "nonstop bench return --cells held-out --tau-theta 8 --p-minimax 0.9 --n-workers 8 --seconds 2 "
        "--schedulers exp_time,fill@prior",
        "the 24 held-out cells take hours on 2 cores; one of them, short, with two schedulers, in seconds",
    ),
    "nonstop bench lanes --worlds 64 --max-lanes 6": (
        "nonstop bench lanes --worlds 8 --max-lanes 2 --scheduler quantile_hold --quick",
        "64 worlds take minutes even quick (90 s); 8 worlds, 2 lanes, one scheduler take 4 s",
    ),
    "nonstop sweep --budget small": (
        "nonstop sweep --budget tiny",
        "the small budget takes hours; tiny is its ~20-s smoke test",
    ),
    "nonstop sweep --budget learned --schedulers fill,exp_time,quantile_hold@0.9 --workers bound,2x "
    "--latency-sigma 0.5 --out runs/learned": (
        "nonstop sweep --budget tiny --sizes 1 --schedulers fill,exp_time,quantile_hold@0.9 --workers bound,2x "
        "--latency-sigma 0.5 --seeds 2 --episodes 1 --out runs/learned",
        "the learned-policy table takes about an hour on 2 busy cores; the same table on the delay world, "
        "2 seeds of one episode, in about a minute",
    ),
    "nonstop bench server --sessions 64 --json": (
        "nonstop bench server --sessions 8 --json --quick",
        "64 sessions for a full minute; 8 in the quick form",
    ),
    "nonstop bench server --team --seats 500 --json": (
        "nonstop bench server --team --env multi/battle --seats 80 --seconds 2 --json --quick",
        "529 seats of the 1,058-agent battle for 20 s; the 162-agent battle's team of 81 for 2 s",
    ),
    "nonstop bench models --arch 2xdeep": (
        "nonstop bench models --arch 2xdeep --quick",
        "every width up to 1B parameters takes minutes; quick times the smallest",
    ),
    "nonstop plan --batch-curve h100=linear:0.862ms,0.238ms --batch-curve cpu=runs/cpu.curve --worlds 64": (
        "nonstop bench gpu --device cpu --k 1 --quick --dtypes fp32 --save-curve runs/cpu.curve --worlds 2 && "
        "nonstop plan --batch-curve h100=linear:0.862ms,0.238ms --batch-curve cpu=runs/cpu.curve --worlds 64",
        "the page's runs/cpu.curve comes from its bench gpu line above; a quick fp32 curve of 2 worlds stands in",
    ),
}

#: Run as written (plus --json, and a --plot where the test looks at it) by the test file named, which checks
#: what they make: a run of minutes is not run a second time here only to see it exit 0. Each file holds the
#: command's text.
CHECKED_HERE = {
    "nonstop paper 6 --budget tiny": "test_paper.py",
    "nonstop paper 7": "test_paper.py",
    "nonstop bench regret --quick": "test_regret.py",
    # the README's table and learning figures, compared with the page (`--quick` runs in tests/test_install.py)
    "nonstop demo": "test_readme_figures.py",
    # the README's team self-play row, 81 against 81 agents (docs/multi-agent.md shows the same run)
    "nonstop train --env multi/battle --env-arg max_cycles=300 --env-arg minimap_mode=true --self-play --clock virtual --latency 2t --seconds 1200 --lr 1e-3 --batch-size 64 --epsilon-ticks 6000 --learning-starts 1000 --target-update 250 --out runs/battle162": "test_readme_figures.py",
}

#: Served: started, asked once for /health, /metadata and the live page, stopped with Ctrl-C (exit 130,
#: as docs/commands.md says of every command).
SERVED = {
    "nonstop serve --env multi/duel",
    "nonstop serve --env multi/battle",
    "nonstop serve --env multi/duel --env multi/Boxing",
}

#: Not run here, with why. Each still parses.
NOT_RUN = {
    "nonstop train --env multi/battle --env-arg map_size=20 --env-arg max_cycles=300 --env-arg minimap_mode=true "
    "--self-play --clock virtual --latency 2t --seconds 1200 --lr 1e-3 --batch-size 64 --epsilon-ticks 6000 "
    "--learning-starts 1000 --target-update 250 --out runs/battle": (
        "minutes of learning; tests/test_teamplay.py runs the same team self-play (train_teams, its report, and the "
        "command itself) on a 12-cell battle map"
    ),
    "nonstop report runs/battle": "reports the run above, which is not run here (tests/test_teamplay.py reports its own)",
    'python -m pytest -q -n 2 -m "not wall"': "the suite but its wall-clock tests, on two workers: .ci/run runs the "
    "README's line verbatim",
    "python -m pytest -q -m wall": "the suite's wall-clock tests, one at a time once the rest are done: .ci/run "
    "runs the README's line verbatim",
    "MLFLOW_TRACKING_URI=http://127.0.0.1:5000 nonstop train --env CartPole --seconds 600 --out runs/cartpole-server --track mlflow": "needs an MLflow tracking server on 127.0.0.1:5000 (mlflow-skinny has none); the run to MLflow's file store "
    "is the tracking block above",
    "nonstop gameboy record-state --game PokemonBattle --rom pokemon_blue.gb --from pokemon_blue.gb.state --out battle1.state": "needs a Pokémon Blue ROM, which nonstop cannot ship (tests/test_gameboy.py records a state from its test ROM)",
    "python -c \"import nonstop; env = nonstop.make('GameBoy/PokemonBattle', env_kwargs={'rom': 'pokemon_blue.gb', "
    "'state': 'battle1.state'})\"": "needs a Pokémon Blue ROM, which nonstop cannot ship",
    "nonstop bench gpu --k 29 --dtypes bf16 --save-curve runs/h100-k29.curve --worlds 32,64,72": "a GPU's measurement (its default device is auto: on a CPU k = 29 takes ~1 s a pass): run by "
    "test_each_gpu_command_runs_where_there_is_one",
    "nonstop paper 6": "the same run as `nonstop paper 6 --budget tiny` (tiny is the default budget), which "
    "tests/test_paper.py runs",
    "nonstop paper 4": "needs the user's Pokémon Blue ROM and save states; without them it exits 2 in the one line "
    "tests/test_paper.py checks",
    "nonstop paper 5": "needs the user's Tetris ROM; without it it exits 2 in the one line tests/test_paper.py checks",
    "nonstop paper 8": "5-6 minutes at its tiny budget on 2 cores (Ray learners past the cores): tests/test_paper.py "
    "runs its bench on Ray actors",
    "nonstop paper 14": "exits 2 by design: Rainbow is not offered (tests/test_paper.py checks the message)",
    "nonstop train --env mypkg.worlds:Target1D-v0 --clock wall --seconds 20 --out runs/target": "needs the user's package mypkg beside the command: tests/test_userworld.py runs it (3 s) in a directory "
    "holding tests/data/userworld/mypkg, through a launcher that, like the console script, leaves that "
    "directory off sys.path",
    "nonstop train --env Target1D-v0 --env-module mypkg.worlds --seconds 20 --out runs/target-again": "needs mypkg beside the command: tests/test_userworld.py runs it (2 s) beside tests/data/userworld/mypkg",
    "nonstop train --resume runs/target --env-module mypkg.worlds --seconds 40": "resumes the run above: tests/test_userworld.py resumes its runs on both clocks beside mypkg",
    "nonstop train --env myworlds:Target-v0 --seconds 30 --out runs/target-30s": "needs examples/ as the current "
    "directory (myworlds.py beside the command): tests/test_learnability.py runs it there and checks the lines "
    "docs/your-model.md shows",
    "nonstop train --env myworlds:Target-v0 --seconds 600 --out runs/target": "needs examples/ as the current directory "
    "(myworlds.py beside the command) and 4-10 minutes: tests/test_readme_figures.py runs it there and checks its figure",
}

#: The commands above that need a GPU → what runs where there is one.
ON_A_GPU = {
    "nonstop bench gpu --k 29 --dtypes bf16 --save-curve runs/h100-k29.curve --worlds 32,64,72": "nonstop bench gpu --device cuda --k 29 --dtypes bf16 --quick --json",
}

#: A full benchmark takes minutes; its quick form runs in the test named (in-process, smaller still).
BENCH_TESTS = {
    "clock": "test_bench_quick.py",
    "host": "test_bench_quick.py",
    "channels": "test_bench_quick.py",
    "ticklog": "test_bench_quick.py",
    "server": "test_bench_quick.py",
    "ray": "test_bench_quick.py",
    "duel": "test_bench_duel.py",
    "models": "test_policies.py",
    "nstar": "test_bench_nstar.py",
    "return": "test_bench_return.py",
    "regret": "test_regret.py",
    "learn": "test_bench_learning.py",
    "nlstar": "test_bench_learning.py",
    "weights": "test_ray_backend.py",
    "lanes": "test_bench_lanes.py",
    "gpu": "test_device.py",
    "delay": "test_bench_delay.py",
    "seats": "test_bench_seats.py",
    "reference": "test_bench_reference.py",
    "freerun": "test_bench_freerun.py",
}

#: A placeholder's sample value, for parsing a synopsis.
SAMPLE_VALUES = {
    "RUN": "runs/cartpole",
    "FIG": "6",
    "N": "2",
    "FILE": "replays/session.jsonl",
    "NAME": "clock",
    "G": "Tetris",
    "R": "tetris.gb",
    "S": "tetris.state",
    "ID": "CartPole",
    "DIR": "replays",
    "PATH": "token.txt",
}

COMMANDS = all_commands()


@functools.cache
def build_parser():  # one parser for every check (argparse parses with it again and again)
    return cli.build_parser()


def _unique(commands: list[DocCommand]) -> dict[str, DocCommand]:
    return {c.text: c for c in reversed(commands)}  # the first place a command appears names it


def _parse(argv: list[str]) -> str | None:
    """The CLI's own parser on ``argv`` (the words after ``nonstop``), nothing run: None, or its error."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


def _verb_path(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the verb words, the rest): ``bench nstar --json`` → (['bench', 'nstar'], ['--json'])."""
    import argparse

    parser, path = build_parser(), []
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser, path = subs[0].choices[word], [*path, word]
    return path, argv[len(path) :]


def _takes_a_value(path: list[str], flag: str) -> bool:
    """Whether ``nonstop PATH`` has option ``flag`` and it takes a value."""
    import argparse

    parser = build_parser()
    for word in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    action = parser._option_string_actions.get(flag)
    return action is not None and action.nargs != 0


def kind(c: DocCommand) -> str:
    """How a command is checked: mention, flag, synopsis, pip, as_written, shortened, checked, served, not_run,
    bench, or unlisted."""
    argv = c.argv
    if argv[:2] == ["pip", "install"]:
        return "pip"
    if argv[0] == "python" and len(argv) > 1 and argv[1].startswith("examples/your_model_"):
        return "example"  # docs/your-model.md's scripts: tests/test_your_model.py runs each as the page shows it
    if is_synopsis(c.text):
        return "synopsis"
    tables = (
        (AS_WRITTEN, "as_written"),
        (SHORTENED, "shortened"),
        (CHECKED_HERE, "checked"),
        (SERVED, "served"),
        (NOT_RUN, "not_run"),
    )
    for table, name in tables:
        if c.text in table:
            return name
    if argv[0] == "nonstop" and c.where == "inline":  # a shell block's command is always run or listed
        path, rest = _verb_path(argv[1:])
        if not rest:
            return "mention"
        if path and len(rest) == 1 and rest[0].startswith("--") and _takes_a_value(path, rest[0]):
            return "flag"  # ``nonstop train --track``: the prose names a flag, its value said around it
        if path[:1] == ["bench"] and len(path) == 2 and rest == ["--json"]:
            return "bench"
    return "unlisted"


def test_the_pages_have_commands():
    """The collector sees what a reader sees: the README's two set-up lines and its first train."""
    readme = [c.text for c in shell_commands(ROOT / "README.md")]
    assert readme[:5] == [
        'pip install torch==2.13.0 -e ".[learn,plot,train]"',
        "nonstop demo",
        'pip install torch==2.13.0 -e ".[test]"',
        'python -m pytest -q -n 2 -m "not wall"',
        "python -m pytest -q -m wall",
    ]
    assert "nonstop train --env CartPole --seconds 2000 --out runs/cartpole" in readme
    assert len(_unique(COMMANDS)) >= 60


def test_every_command_is_run_or_listed():
    unlisted = [f"{c.at()}: {c.text}" for c in _unique(COMMANDS).values() if kind(c) == "unlisted"]
    assert not unlisted, (
        "commands in the docs that this test neither runs nor lists (add each to AS_WRITTEN, SHORTENED, "
        "CHECKED_HERE, SERVED or NOT_RUN with its reason):\n" + "\n".join(unlisted)
    )


def test_no_listed_command_is_stale():
    texts = {c.text for c in COMMANDS}
    stale = [t for t in (*AS_WRITTEN, *SHORTENED, *CHECKED_HERE, *SERVED, *NOT_RUN) if t not in texts]
    assert not stale, f"listed here but on no page any more (remove them): {stale}"


@pytest.mark.parametrize("command", list(_unique(COMMANDS).values()), ids=lambda c: f"{c.at()} {c.text[:60]}")
def test_every_command_parses(command: DocCommand):
    """The CLI's parser accepts the command as written (a renamed flag or a bad choice fails here)."""
    argv = command.argv
    if kind(command) == "pip":
        _check_pip(command)
        return
    if kind(command) == "example":
        assert (ROOT / argv[1]).is_file(), f"{command.at()}: {command.text}: no such script"
        return
    if argv[0] == "python":
        assert argv[1] in ("-m", "-c"), f"{command.at()}: {command.text}"
        if argv[1] == "-c":
            compile(argv[2], command.at(), "exec")
        return
    assert argv[0] == "nonstop", f"{command.at()}: {command.text}"
    if kind(command) in ("mention", "flag"):  # "flag": its option exists and takes a value (kind checked it)
        path, _ = _verb_path(argv[1:])
        assert path, f"{command.at()}: `{command.text}` names no nonstop verb"
        return
    words = synopsis_argv(command.text, SAMPLE_VALUES)[1:] if kind(command) == "synopsis" else argv[1:]
    error = _parse(words)
    assert error is None, f"{command.at()}: `{command.text}`: {error}"


def _check_pip(command: DocCommand) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for word in command.argv[2:]:
        if word.startswith(".["):
            named = word[2:-1].split(",")
            unknown = [e for e in named if e not in extras]
            assert not unknown, f"{command.at()}: `{command.text}` names extras pyproject.toml lacks: {unknown}"


@pytest.mark.parametrize(
    "command", [c for c in _unique(COMMANDS).values() if kind(c) in ("shortened",)], ids=lambda c: c.text[:60]
)
def test_a_shortened_command_keeps_every_flag(command: DocCommand):
    """The stand-in runs what the page shows with smaller numbers, not another command."""
    stand_in = command_words(SHORTENED[command.text][0].split(" && ")[-1])
    flags = {w for w in command.argv if w.startswith("--")}
    kept = {w for w in stand_in if w.startswith("--")}
    assert flags <= kept, f"{command.at()}: the stand-in drops {flags - kept}"
    assert _verb_path(command.argv[1:])[0] == _verb_path(stand_in[1:])[0]
    assert _parse(stand_in[1:]) is None


def test_each_command_checked_elsewhere_is_run_there_as_written():
    """A CHECKED_HERE command's test file runs its very text (a figure test that drifted to other flags
    would leave the page's command unrun)."""
    for text, name in CHECKED_HERE.items():
        assert f'"{text}"' in (ROOT / "tests" / name).read_text(), f"tests/{name} should run `{text}` as written"


def test_every_benchmark_a_page_shows_is_run_by_a_test():
    for c in _unique(COMMANDS).values():
        if kind(c) == "bench":
            name = c.argv[2]
            test = ROOT / "tests" / BENCH_TESTS[name]
            module = BENCHMARKS[name].rsplit(".", 1)[1]  # bench return is nonstop.bench.returns
            imports = rf"from nonstop\.bench import [\w, ]*\b{module}\b|nonstop\.bench\.{module}\b"
            assert re.search(imports, test.read_text()), f"{c.at()}: {test.name} should run `nonstop bench {name}`"


def test_the_readme_test_line_is_what_ci_runs():
    """The README's second set-up command is .ci/run's, character for character."""
    install = next(
        c for c in shell_commands(ROOT / "README.md") if c.argv[:2] == ["pip", "install"] and ".[test]" in c.argv
    )
    line = (ROOT / "README.md").read_text().splitlines()[install.line - 1].strip()
    assert line in (ROOT / ".ci" / "run").read_text().splitlines(), (
        f"README.md:{install.line}: .ci/run should run `{line}`"
    )


def test_ci_stops_when_any_step_of_the_readme_test_line_fails(tmp_path):
    """Under ``set -e`` bash does not stop at a failing command that is not the last of an ``&&`` list: a failing
    first pass would go on to the lint gates and could end green. .ci/run keeps the README's line in a group
    of its own; here that group runs with the line's first pass failing, and the script must stop there."""
    install = next(
        c for c in shell_commands(ROOT / "README.md") if c.argv[:2] == ["pip", "install"] and ".[test]" in c.argv
    )
    line = (ROOT / "README.md").read_text().splitlines()[install.line - 1].strip()
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    at = lines.index(line)
    assert lines[at - 1] == "(" and lines[at + 1] == ")", lines[at - 1 : at + 2]
    assert "set -euo pipefail" in lines
    failing = "true && false && true"  # the install passes, the first pass fails, the wall pass would pass
    for group, stops in ((["(", failing, ")"], True), ([failing], False)):  # the group, and the bare line
        script = tmp_path / "ci"
        script.write_text("\n".join(["set -euo pipefail", *group, "echo the-gates-ran"]) + "\n")
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
        assert (done.returncode != 0 and "the-gates-ran" not in done.stdout) is stops, (group, done)


def test_the_readme_runs_the_wall_clock_tests_apart_from_the_rest():
    """The README's test line (CI's) runs the suite in two passes: first every test but the wall-clock ones on
    two workers, then the wall-clock ones (marker ``wall``: real-time bounds) one at a time, so that a test
    bounding a real time shares the cores with no other test (two side by side, the README demo's real-time
    figures once missed); together the two passes run every test."""
    passes = [c.argv for c in shell_commands(ROOT / "README.md") if c.argv[:3] == ["python", "-m", "pytest"]][:2]
    assert len(passes) == 2, passes
    marks = [argv[argv.index("-m", 3) + 1] for argv in passes]  # pytest's -m, after `python -m pytest`
    assert marks == ["not wall", "wall"], passes
    assert [argv[: argv.index("-m", 3)] for argv in passes] == [
        ["python", "-m", "pytest", "-q", "-n", "2"],
        ["python", "-m", "pytest", "-q"],
    ], passes


# -- running them -----------------------------------------------------------------------------------


def _scratch(tmp_path: Path) -> Path:
    (tmp_path / "data").symlink_to(ROOT / "data")  # the pages' paths are from the repository root
    return tmp_path


def _run(text: str, cwd: Path, where: str) -> None:
    words = shlex.split(text)
    env = {**os.environ, "PYTHONPATH": SRC, "MPLBACKEND": "Agg"}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    program = (
        [sys.executable, "-m", "nonstop"]
        if words[0] == "nonstop"
        else [sys.executable]
        if words[0] == "python"
        else None
    )
    assert program is not None, f"{where}: cannot run `{text}`"
    started = time.monotonic()
    done = subprocess.run(
        [*program, *words[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, (
        f"{where}: `{text}` exited {done.returncode} after {took:.0f} s:\n{done.stderr[-3000:]}"
    )
    if "--json" in words:
        import json

        json.loads(done.stdout.strip().splitlines()[-1])


def _runnable(c: DocCommand) -> list[str]:
    """What runs for ``c``: itself, or its stand-in (a prerequisite first)."""
    if kind(c) == "as_written":
        return [c.text]
    return SHORTENED[c.text][0].split(" && ")


def _blocks() -> list[tuple[str, list[DocCommand]]]:
    units = []
    for page in PAGES:
        by_block: dict[int, list[DocCommand]] = {}
        for c in shell_commands(page):
            if kind(c) in ("as_written", "shortened"):
                by_block.setdefault(c.block, []).append(c)
        units += [(f"{c[0].page}:{line}", c) for line, c in by_block.items()]
    return units


def _spans() -> list[DocCommand]:
    in_blocks = {c.text for page in PAGES for c in shell_commands(page)}
    return [
        c
        for c in _unique(COMMANDS).values()
        if c.where == "inline" and c.text not in in_blocks and kind(c) in ("as_written", "shortened")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("block", _blocks(), ids=lambda b: b[0] if isinstance(b, tuple) else None)
def test_each_shell_block_runs_in_order(block, tmp_path, no_shm_leak):
    where, commands = block
    cwd = _scratch(tmp_path)
    for c in commands:
        for text in _runnable(c):
            _run(text, cwd, c.at())


@pytest.mark.slow
@pytest.mark.parametrize("command", _spans(), ids=lambda c: f"{c.at()} {c.text[:50]}")
def test_each_inline_command_runs(command: DocCommand, tmp_path, no_shm_leak):
    cwd = _scratch(tmp_path)
    for text in _runnable(command):
        _run(text, cwd, command.at())


@pytest.mark.slow
@pytest.mark.parametrize("text", sorted(ON_A_GPU))
def test_each_gpu_command_runs_where_there_is_one(text: str, tmp_path, no_shm_leak):
    torch = pytest.importorskip("torch")
    assert text in NOT_RUN and _parse(command_words(ON_A_GPU[text])[1:]) is None
    if not torch.cuda.is_available():
        pytest.skip(f"`{text}` needs a CUDA GPU and this machine has none")
    _run(ON_A_GPU[text], _scratch(tmp_path), text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _served() -> list[DocCommand]:
    return [c for c in _unique(COMMANDS).values() if kind(c) == "served"] + [
        c for c in _unique(COMMANDS).values() if kind(c) == "mention" and c.argv[1:] == ["serve"]
    ][:1]


@pytest.mark.slow
@pytest.mark.parametrize("command", _served(), ids=lambda c: f"{c.at()} {c.text}")
def test_each_serve_command_answers_and_stops(command: DocCommand, tmp_path, no_shm_leak):
    pytest.importorskip("fastapi")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nonstop", *command.argv[1:], "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # SIGINT as a terminal gives it, also where pytest runs with SIGINT ignored (`nohup ... &`: the child
        # would inherit SIG_IGN, nonstop leaves an ignored SIGINT ignored, and uvicorn's own stop exits 0)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline, health = time.monotonic() + 90, None
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
                    health = answer.status
                    break
            time.sleep(0.3)
        assert health == 200, f"{command.at()}: `{command.text}` did not answer /health (exit {proc.poll()})"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metadata", timeout=10) as answer:
            import json

            served = set(json.load(answer)["envs"])
        wanted = {w for i, w in enumerate(command.argv) if i and command.argv[i - 1] == "--env"}
        assert wanted <= served, f"{command.at()}: serves {sorted(served)}"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            assert answer.status == 200 and b"<html" in answer.read().lower()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130, f"{command.at()}: Ctrl-C gave exit {proc.returncode}:\n{out[-2000:]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def no_shm_leak():
    from nonstop.bench.channels import our_segments

    before = set(our_segments())
    yield
    left = set(our_segments()) - before
    assert not left, f"shared-memory segments left behind: {sorted(left)}"
