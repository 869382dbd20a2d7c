"""Bad backends are one-line errors before anything starts (no Ray cluster needed)."""

from __future__ import annotations

import socket

import pytest

from nonstop.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--backend", "gpu"], "unknown backend 'gpu': use one of thread, process, ray"),
        (["--backend", "ray"], "do not mix with the virtual clock: use --clock wall"),
        (["--backend", "thread", "--ray-address", "127.0.0.1:6379"], "needs --backend ray"),
        (["--backend", "ray", "--clock", "wall", "--ray-address", "nonsense"], "is not HOST:PORT"),
        (["--learner-backend", "gpu"], "unknown learner backend 'gpu': use one of process, ray"),
        (
            ["--learner-backend", "ray"],
            "--learner-backend ray runs real remote calls, which do not mix with the virtual clock",
        ),
        (
            ["--learner-backend", "ray", "--clock", "wall", "--interaction", "infer_then_learn"],
            "--interaction infer_then_learn learns inside its own loop on this host",
        ),
        (["--learner-backend", "ray", "--clock", "wall", "--ray-address", "nonsense"], "is not HOST:PORT"),
        (
            ["--learner-backend", "process", "--clock", "wall", "--ray-address", "127.0.0.1:6379"],
            "needs --backend ray or --learner-backend ray",
        ),
    ],
)
def test_train_refuses_before_creating_the_run_dir(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main(["train", "--out", str(out), "--seconds", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_an_address_that_does_not_answer_is_named(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--clock", "wall", "--backend", "ray", "--ray-address", f"127.0.0.1:{port}"]
    assert main(argv) == 2
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in capsys.readouterr().err
    assert not out.exists()


def test_ray_learners_name_an_address_that_does_not_answer(tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    argv = [
        "train",
        "--out",
        str(out),
        "--clock",
        "wall",
        "--learner-backend",
        "ray",
        "--ray-address",
        f"127.0.0.1:{port}",
    ]
    assert main(argv) == 2
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nodes", "0"], "--nodes must be an integer >= 1, got 0"),
        (["--forward-ticks", "-1"], "--forward-ticks must be a positive number, got -1.0"),
        (["--calls", "0"], "--calls must be positive, got 0"),
    ],
)
def test_bench_ray_refuses_bad_sizes_before_starting_anything(capsys, argv, message):
    assert main(["bench", "ray", "--quick", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_compare_and_bench_nstar_check_the_backend(capsys):
    assert main(["compare", "--env", "theory/inaction", "--backend", "ray"]) == 2
    assert "virtual clock" in capsys.readouterr().err
    assert main(["bench", "nstar", "--backend", "process", "--clock", "wall"]) == 2
    assert "backend 'thread' or 'ray'" in capsys.readouterr().err


def _nodes(*cpus, dead=()):
    return [{"NodeID": f"n{i}", "Alive": i not in dead, "Resources": {"CPU": float(c)}} for i, c in enumerate(cpus)]


def _place(nodes, count, num_cpus, held=None):
    from nonstop.distributed.ray_backend import choose_node

    held = {} if held is None else held
    for _ in range(count):
        node = choose_node(nodes, held, num_cpus)
        n, c = held.get(node, (0, 0.0))
        held[node] = (n + 1, c + num_cpus)
    return {node: n for node, (n, _) in held.items()}


def test_ray_actors_fill_nodes_in_proportion_to_their_cpus():
    # a round-robin put 3 of 6 on the 2-CPU node, where the third would wait for a core forever
    assert _place(_nodes(4, 2), 6, 1) == {"n0": 4, "n1": 2}
    assert _place(_nodes(2, 2), 4, 1) == {"n0": 2, "n1": 2}  # equal nodes: one each in turn
    assert _place(_nodes(8, 8), 2, 1) == {"n0": 1, "n1": 1}  # a node's fill counts, not its free size


def test_ray_actors_that_reserve_no_cpu_spread_evenly_and_skip_no_node():
    assert _place(_nodes(0, 1, 4), 7, 0) == {"n0": 3, "n1": 2, "n2": 2}


def test_ray_actors_needing_a_cpu_skip_a_head_without_cpus_and_dead_or_excluded_nodes():
    from nonstop.distributed.ray_backend import choose_node

    assert _place(_nodes(0, 2, 2, dead=(2,)), 2, 1) == {"n1": 2}
    assert choose_node(_nodes(2, 2), {}, 1, exclude=frozenset({"n0"})) == "n1"
    assert choose_node(_nodes(1, 1), {"n0": (1, 1.0)}, 1) == "n1"  # what this process already holds counts


def test_an_actor_no_live_node_can_hold_is_one_line_naming_the_cpus():
    from nonstop.distributed.backends import BackendUnavailable
    from nonstop.distributed.ray_backend import choose_node

    with pytest.raises(
        BackendUnavailable, match=r"no live node of the cluster can hold an actor of 2 CPU \(live nodes' CPUs: n0: 1\)"
    ):
        choose_node(_nodes(1, 4, dead=(1,)), {}, 2)
    with pytest.raises(BackendUnavailable, match="live nodes' CPUs: none"):
        choose_node(_nodes(4, dead=(0,)), {}, 0)


def test_a_released_actor_gives_its_node_back(monkeypatch):
    import types

    from nonstop.distributed import ray_backend

    nodes = _nodes(1, 1)
    monkeypatch.setattr(ray_backend, "_ray", lambda: types.SimpleNamespace(nodes=lambda: nodes))
    placement = ray_backend._Placement()
    first, second = placement.take(1), placement.take(1)
    assert {first, second} == {"n0", "n1"}
    placement.give_back(first, 1)  # a dead actor's slot: its restart goes back where the room is
    assert placement.take(1) == first


def test_placement_counts_whole_actors_per_node_not_the_cluster_total(monkeypatch):
    import types

    from nonstop.distributed import ray_backend
    from nonstop.distributed.backends import BackendUnavailable

    nodes = _nodes(1.5, 1.5, 8, dead=(2,))  # 3 CPUs in all, but a 1-CPU actor takes a whole one on one node
    monkeypatch.setattr(ray_backend, "_ray", lambda: types.SimpleNamespace(nodes=lambda: nodes))
    ray_backend.check_placement(2, 1)
    ray_backend.check_placement(99, 0)  # actors that reserve no CPU always fit
    with pytest.raises(
        BackendUnavailable,
        match=r"^3 Ray workers of 1 CPU each need 3 CPUs but the cluster's 3, split "
        r"over 2 nodes, hold only 2 such actors: use fewer workers",
    ):
        ray_backend.check_placement(3, 1)
    with pytest.raises(
        BackendUnavailable, match=r"2 Ray workers and 1 Ray learners .* but the cluster has 2: .* or learners"
    ):
        monkeypatch.setattr(ray_backend, "_ray", lambda: types.SimpleNamespace(nodes=lambda: _nodes(1, 1)))
        ray_backend.check_placement(2, 1, n_learners=1)


def test_bench_ray_says_the_machine_is_the_limit_only_on_its_evidence():
    from nonstop.bench.ray import diagnose_result
    from nonstop.metrics.tau_parts import tau_theta_parts

    ms = 1e-3
    slowed = tau_theta_parts(
        world=[40 * ms] * 9,
        forward_world=[36 * ms] * 9,
        forward_quiet=[24 * ms] * 9,
        overhead=[3 * ms] * 9,
        wait=[1 * ms] * 9,
        tau_m=1 / 60,
    )
    missed = {
        "meets_target": {"actor_per_node_acts_every_tick": False},
        "tau_theta_parts": slowed,
        "ray_actor_per_node": {"cpu": {"cores": 2, "busy_cores": 1.9, "idle_cores": 0.1}, "actor_niceness": [0]},
    }
    crowded = diagnose_result(missed, 2, local=True).machine_limit
    assert "0.1 of 2 cores idle" in crowded and "share 2 cores" in crowded and "needs 4" in crowded
    remote = diagnose_result(
        missed, 2, local=False
    ).machine_limit  # a real cluster: the nodes' cores are not this machine's
    assert "share" not in remote and "the machine is the limit" in remote
    # the same slower forward pass with 14 of 16 cores idle (issue 23) is no machine limit: the cause is named instead
    idle = {**missed, "ray_actor_per_node": {"cpu": {"cores": 16, "busy_cores": 2.0, "idle_cores": 14.0}}}
    found = diagnose_result(idle, 2, local=True)
    assert found.machine_limit is None and [c["cause"] for c in found.causes] == ["forward_slower_in_world"]
