"""The composition (`nonstop.experiment`): a run is built from registered parts, with no branch on
which parts they are; a new driver or backend is one registration; runs written before the
composition still resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from nonstop.cli import main
from nonstop.experiment import TrainConfig, Run, train
from nonstop.experiment import registry
from nonstop.experiment.drivers import InferencePart
from nonstop.learning.dqn import DQNConfig
from nonstop.policies.base import Decision, Policy
from nonstop.realtime.ticklog import SOURCE_AGENT

OLD_RUN = Path(__file__).parent / "data" / "run-before-composition"
DQN = DQNConfig.for_family("classic", learning_starts=20, batch_size=8)


class Always(Policy):
    """Acts ``action`` on every observation, instantly."""

    def __init__(self, action: int) -> None:
        self.action = action
        self.calls = 0

    def act(self, obs: np.ndarray) -> Decision:
        self.calls += 1
        return Decision(self.action)


@pytest.fixture
def scoped_registry(monkeypatch):
    """The registry's tables as they were, after the test (what it registers is gone)."""
    for kind, table in registry._BUILTIN.items():
        monkeypatch.setitem(registry._BUILTIN, kind, dict(table))
    for kind, rules in registry._CONSTRAINTS.items():
        monkeypatch.setitem(registry._CONSTRAINTS, kind, dict(rules))
    return registry


def test_a_new_driver_is_one_registration(scoped_registry, no_shm_leak):
    """A scripted driver on the learner's seat: every agent action of the run is its action."""
    made = []

    def always_right(run, *, seat):
        def policy(i):
            made.append(Always(1))
            return made[-1]

        return [InferencePart("pool", policy, 2, seat=seat)]

    scoped_registry.register("driver", "always_right", always_right)
    result = train(TrainConfig(env="CartPole", seconds=2.0, interaction="always_right", algo_settings=DQN))
    log = result["tick_log"]
    agent = log["source"] == SOURCE_AGENT
    assert len(made) == 2 and all(p.calls > 20 for p in made)  # both workers acted
    assert result["summary"]["inaction_ticks"] < 5 and agent.sum() > 90
    assert set(np.unique(log["action"][agent]).tolist()) == {1}  # every agent action was the driver's
    assert result["updates"] == 0  # this driver brought no learners: nothing learned


def test_an_unknown_part_is_refused_in_one_line(scoped_registry):
    with pytest.raises(ValueError, match="interaction must be one of .*got 'dancing'"):
        TrainConfig(interaction="dancing")
    with pytest.raises(ValueError, match="unknown kind of part 'engine'"):
        scoped_registry.register("engine", "x", lambda run: None)
    with pytest.raises(TypeError, match="a callable or 'module:attr'"):
        scoped_registry.register("driver", "x", 42)


def test_a_new_policy_backend_is_one_registration(scoped_registry, no_shm_leak):
    """A backend registered in the thread one's place: the run's workers are built by it."""
    thread_policy = scoped_registry.lookup("policy_backend", "thread")
    built = []

    def counting(run, i):
        built.append(i)
        return thread_policy(run, i)

    cfg = TrainConfig(env="CartPole", seconds=1.0, latency="3t", algo_settings=DQN)
    scoped_registry.register("policy_backend", cfg.inference_backend, counting)  # the virtual clock's: threads
    run = Run(cfg)
    try:
        run.build().start()
        run.advance(1.0)
    finally:
        run.teardown()
    assert sorted(built) == [0, 1, 2]  # N_I = ⌈3 ticks / 1 tick⌉ workers, each built by the registered backend


def test_a_new_backend_declares_what_it_refuses_where_it_is_registered(scoped_registry):
    """A scripted backend that needs the wall clock says so in its registration; the config refuses the
    virtual clock with its line, and config.py names no backend (it asks the chosen parts)."""
    from nonstop.experiment import config

    wall_only = registry.Constraint(
        (registry.needs("clock", "wall", why="--backend scripted replays a recording in real time: use --clock wall"),)
    )
    scoped_registry.register("policy_backend", "scripted", lambda run, i: Always(1), wall_only)
    with pytest.raises(ValueError, match=r"^--backend scripted replays a recording in real time: use --clock wall$"):
        TrainConfig(backend="scripted")
    cfg = TrainConfig(backend="scripted", clock="wall")
    assert (cfg.inference_backend, cfg.cluster) == ("scripted", "none")
    import ast

    parts = {name for kind in ("policy_backend", "learners", "cluster") for name in registry.names(kind)} - {"none"}
    compared = [
        node.value
        for node in ast.walk(ast.parse(Path(config.__file__).read_text()))
        if isinstance(node, ast.Compare)
        for node in [node.left, *node.comparators]
        if isinstance(node, ast.Constant)
    ]
    assert not parts & set(compared), "config.py compares a value with a backend's name: that is the part's rule"


def test_the_parts_own_rules_refuse_in_one_line():
    cases = [
        (dict(backend="ray"), "--backend ray runs real remote calls, which do not mix with the virtual clock"),
        (dict(clock="wall", backend="ray", device="cuda"), "--device cuda with Ray: Ray's workers and learners run"),
        (
            dict(clock="wall", learner_backend="ray", interaction="learn_then_infer"),
            "--interaction learn_then_infer learns inside its own loop on this host",
        ),
        (dict(learner_backend="device", n_learners=3), "one learner a device (.*), got --n-learners 3"),
        (
            dict(ray_address="h:1"),
            r"--ray-address 'h:1' needs --backend ray or --learner-backend ray \(got --backend thread\)",
        ),
    ]
    for kw, says in cases:
        with pytest.raises(ValueError, match=says) as err:
            TrainConfig(**kw)
        assert "\n" not in str(err.value)
    assert TrainConfig(clock="wall", learner_backend="ray").cluster == "ray"
    assert (
        TrainConfig(backend="process").inference_backend,
        TrainConfig(backend="process", clock="wall").inference_backend,
    ) == ("thread", "process")
    assert TrainConfig(backend="batched_process").inference_backend == "batched"
    assert TrainConfig(learner_backend="device").learner_placement == "device"


def test_the_run_has_no_branch_on_self_play_a_backend_or_a_device():
    """The modules that compose a run name no seating, backend or device: those are the registry's."""
    import ast

    import nonstop.experiment.learning as learning
    import nonstop.experiment.loop as loop
    import nonstop.experiment.record as record
    import nonstop.experiment.run as run
    import nonstop.experiment.seating as seating

    for module in (run, loop, record, learning, seating):
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.If, ast.IfExp, ast.While)):
                text = ast.unparse(node.test)
                for word in (
                    "self_play",
                    "backend",
                    "ray",
                    "device",
                    "cuda",
                    "seating",
                    "learner_placement",
                    "interaction",
                ):
                    assert word not in text, f"{module.__name__}: `if {text}` branches on {word}"


def test_a_config_is_plain_data_that_opens_nothing(monkeypatch):
    """Building (or loading) a Ray run's config imports no Ray and opens no socket: `nonstop export`
    of a Ray-trained run works while its cluster is down."""
    import socket
    import subprocess
    import sys

    def no_socket(*a, **kw):
        raise AssertionError("a config opened a socket")

    monkeypatch.setattr(socket, "create_connection", no_socket)
    cfg = TrainConfig(env="CartPole", clock="wall", backend="ray", learner_backend="ray", ray_address="10.0.0.1:6379")
    assert TrainConfig(**json.loads(json.dumps(cfg.to_dict()))).cluster == "ray"
    code = (
        "import sys, nonstop.experiment; from nonstop.experiment import TrainConfig; "
        "TrainConfig(clock='wall', backend='ray'); "
        "bad = [m for m in ('ray', 'argparse', 'torch', 'nonstop.commands') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_cli_defaults_are_the_configs(tmp_path):
    """One source of defaults: `nonstop train` with no flags describes TrainConfig() (and RecordConfig())."""
    import argparse

    from nonstop.commands.train import add_arguments, config_from_args, settings_from_args
    from nonstop.experiment.record import RecordConfig

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args([])
    from_cli, default = config_from_args(args).to_dict(), TrainConfig().to_dict()
    from_cli.pop("algo_settings"), default.pop("algo_settings")  # the env family's, resolved by the command
    assert from_cli == default
    assert settings_from_args(args)[1:] == (RecordConfig(), [])


def test_a_run_written_before_the_composition_resumes(tmp_path, capsys, no_shm_leak):
    """tests/data/run-before-composition was written by `nonstop train` at 19fe838 (before this
    package existed): 4 world seconds of CartPole, 148 updates, 200 ticks."""
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    code = main(
        [
            "train",
            "--env",
            "CartPole",
            "--seconds",
            "8",
            "--checkpoint-every",
            "4",
            "--checkpoint-replay",
            "no",
            "--learning-starts",
            "50",
            "--hidden",
            "32",
            "32",
            "--out",
            str(run),
            "--resume",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "resumed from ckpt-000000148.pt: 148 updates, 200 env ticks" in err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] and summary["updates"] > 148 and summary["env_ticks_total"] == 400, summary


def _rewards_shown(scheduler) -> tuple[int, int]:
    """(β ticks, agent ticks) a `FillScheduler` has been shown through ``observe_reward``."""
    from nonstop.inference.fill import BATCH

    agent = sum(int(b[0]) for b in scheduler._partial.values()) + BATCH * sum(
        len(q) for q in scheduler._batches.values()
    )
    return int(scheduler._beta[0]), agent


def test_a_scheduler_that_learns_from_rewards_is_shown_every_tick_of_a_run():
    """`fill` fits the cost of delay to the rewards it is shown: a run shows it each tick once — the
    reward, and the applied action's delay or β — so `--scheduler fill` in train does not stay on its prior."""
    from nonstop.inference.fill import PRIOR_STAY

    cfg = TrainConfig(
        env="theory/delay-cycle",
        env_kwargs={"p_minimax": 0.9},
        seconds=30.0,
        latency="lognormal:5t,0.5",
        n_inference=8,
        scheduler="fill",
        algo_settings=DQN,
    )
    run = Run(cfg)
    try:
        run.build().start()
        run.advance(30.0)
        pool = next(p for p in run.parts if isinstance(p, InferencePart)).pool
        log = run.world.tick_log
        beta, agent = _rewards_shown(pool.scheduler)
        sources = np.asarray(log["source"])
        assert beta + agent == len(log) > 1000  # every tick, none twice
        assert agent == int((sources == 1).sum()) and beta == int((sources == 0).sum())
        run.advance(1.0)
        assert sum(_rewards_shown(pool.scheduler)) == len(run.world.tick_log)  # the next slice: only the new rows
        report = pool.report()
        # fitted from what it saw (delays spread by the lognormal τ_θ); without the rewards it keeps its prior
        assert report["p_minimax"] != PRIOR_STAY and 0.0 <= report["p_minimax"] <= 1.0
        assert report["plan"] in ("now", "tick", "grid") and (report["cap"] is None or report["cap"] >= 1)
    finally:
        run.teardown()


def test_a_backend_that_takes_device_weights_says_so_where_it_is_registered(scoped_registry, no_shm_leak):
    """Whether the device learner writes each version to host memory is the chosen parts' declared
    capability (`Constraint.takes_device_weights`), not a list of backend names: a scripted backend that
    declares it gets no host copy while the run goes on, the same backend undeclared one
    a version."""
    from nonstop.learning.dqn import DQNConfig

    def run_with(name: str) -> tuple[int, int]:
        dqn = DQNConfig.for_family("classic", learning_starts=50, batch_size=8)
        run = Run(TrainConfig(env="CartPole", seconds=3.0, algo_settings=dqn, backend=name, learner_backend="device"))
        try:
            run.build().start()
            run.advance(3.0)
            dstate = run.part("device_state").dstate
            return dstate.version, dstate.host_writes
        finally:
            run.teardown()

    scripted = lambda run, i: Always(1)  # noqa: E731
    scoped_registry.register("policy_backend", "fed", scripted, registry.Constraint(takes_device_weights=True))
    scoped_registry.register("policy_backend", "unfed", scripted)
    fed_versions, fed_writes = run_with("fed")
    unfed_versions, unfed_writes = run_with("unfed")
    assert fed_versions > 10 and fed_writes <= 1, (fed_versions, fed_writes)  # at most the end of the run's
    assert unfed_versions > 10 and unfed_writes == unfed_versions, (unfed_versions, unfed_writes)


def test_no_module_of_experiment_compares_a_value_with_a_backends_name():
    """Which backend runs is asked of the registered parts (their `Constraint`), never spelled in a branch."""
    import ast

    import nonstop.experiment as experiment

    backends = {name for kind in ("policy_backend", "learners") for name in registry.names(kind)}
    found = []
    for path in sorted(Path(experiment.__file__).parent.glob("*.py")):
        if path.name == "registry.py":  # the table itself names them
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    values = side.elts if isinstance(side, ast.Tuple) else [side]
                    found += [
                        f"{path.name}:{node.lineno} {v.value!r}"
                        for v in values
                        if isinstance(v, ast.Constant) and v.value in backends
                    ]
    assert not found, found
