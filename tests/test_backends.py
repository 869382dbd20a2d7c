"""Bad backends are one-line errors before anything starts (no Ray cluster needed)."""

from __future__ import annotations

import socket

import pytest

from nonstop.cli import main


@pytest.mark.parametrize("argv, message", [
    (["--backend", "gpu"], "unknown backend 'gpu': use one of thread, process, ray"),
    (["--backend", "ray"], "do not mix with the virtual clock: use --clock wall"),
    (["--backend", "thread", "--ray-address", "127.0.0.1:6379"], "needs --backend ray"),
    (["--backend", "ray", "--clock", "wall", "--ray-address", "nonsense"], "is not HOST:PORT"),
    (["--learner-backend", "gpu"], "unknown learner backend 'gpu': use one of process, ray"),
    (["--learner-backend", "ray"], "--learner-backend ray runs real remote calls, which do not mix with the virtual clock"),
    (["--learner-backend", "ray", "--clock", "wall", "--interaction", "infer_then_learn"],
     "--interaction infer_then_learn learns inside its own loop on this host"),
    (["--learner-backend", "ray", "--clock", "wall", "--ray-address", "nonsense"], "is not HOST:PORT"),
    (["--learner-backend", "process", "--clock", "wall", "--ray-address", "127.0.0.1:6379"], "needs --backend ray or --learner-backend ray"),
])  # fmt: skip
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
    argv = ["train", "--out", str(out), "--clock", "wall", "--learner-backend", "ray", "--ray-address", f"127.0.0.1:{port}"]
    assert main(argv) == 2
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "0"], "--nodes must be an integer >= 1, got 0"),
    (["--forward-ticks", "-1"], "--forward-ticks must be a positive number, got -1.0"),
    (["--calls", "0"], "--calls must be positive, got 0"),
])  # fmt: skip
def test_bench_ray_refuses_bad_sizes_before_starting_anything(capsys, argv, message):
    assert main(["bench", "ray", "--quick", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_compare_and_bench_nstar_check_the_backend(capsys):
    assert main(["compare", "--env", "theory/inaction", "--backend", "ray"]) == 2
    assert "virtual clock" in capsys.readouterr().err
    assert main(["bench", "nstar", "--backend", "process", "--clock", "wall"]) == 2
    assert "backend 'thread' or 'ray'" in capsys.readouterr().err
