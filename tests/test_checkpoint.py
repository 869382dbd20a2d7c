"""Checkpoints: atomic writes, integrity errors that name the file, resume from what loads."""

from __future__ import annotations

import doctest
import os

import pytest
import torch

import nonstop.learning.checkpoint as checkpoint_module
from nonstop.learning.checkpoint import (
    HEADER_SIZE,
    CheckpointError,
    CheckpointWarning,
    IncompatibleConfigError,
    check_compatible,
    checkpoint_path,
    keep_last,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)


class Opaque:
    """An arbitrary object: weights_only loading must refuse to unpickle it."""


def make_state(updates: int) -> dict:
    torch.manual_seed(updates)  # the same state for the same count, so a reload can be compared
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, float(updates))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return {
        "updates": updates,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "epsilon": 0.5,
        "config": {"env": "Pong", "lr": 1e-3},
    }


def assert_states_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key])
        elif isinstance(a[key], dict) and key == "model":
            for name in a[key]:
                assert torch.equal(a[key][name], b[key][name]), name
    assert a["optimizer"]["state"][0]["exp_avg"].equal(b["optimizer"]["state"][0]["exp_avg"])
    assert a["updates"] == b["updates"] and a["epsilon"] == b["epsilon"] and a["config"] == b["config"]


def test_module_doctests():
    failures, tried = doctest.testmod(checkpoint_module, verbose=False, report=False)
    assert tried > 0 and failures == 0


def test_round_trip(tmp_path):
    state = make_state(7)
    path = save_checkpoint(checkpoint_path(tmp_path, 7), state)
    assert path == tmp_path / "checkpoints" / "ckpt-000000007.pt"
    assert_states_equal(state, load_checkpoint(path))
    assert list_checkpoints(tmp_path) == [(7, path)]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def test_truncated_file_names_the_file_and_latest_falls_back(tmp_path):
    good = save_checkpoint(checkpoint_path(tmp_path, 100), make_state(100))
    bad = save_checkpoint(checkpoint_path(tmp_path, 200), make_state(200))
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated") as info:
        load_checkpoint(bad)
    assert str(bad) in str(info.value) and info.value.path == bad
    with pytest.warns(CheckpointWarning, match="ckpt-000000200.pt.*truncated"):
        found = latest_checkpoint(tmp_path)
    assert found.path == good and found.updates == 100 and found.state["updates"] == 100
    assert [(p, problem.split(":")[0]) for p, problem in found.skipped] == [(bad, "truncated")]


def test_truncated_inside_the_header(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", make_state(1))
    path.write_bytes(path.read_bytes()[: HEADER_SIZE - 10])
    with pytest.raises(CheckpointError, match=r"c\.pt: truncated: 42 bytes, shorter than the 52-byte header"):
        load_checkpoint(path)
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated: 0 bytes"):
        load_checkpoint(path)


def test_corrupted_byte_names_the_file_and_latest_falls_back(tmp_path):
    good = save_checkpoint(checkpoint_path(tmp_path, 100), make_state(100))
    bad = save_checkpoint(checkpoint_path(tmp_path, 200), make_state(200))
    data = bytearray(bad.read_bytes())
    data[HEADER_SIZE + len(data) // 3] ^= 0x01  # one flipped bit in the payload
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"ckpt-000000200\.pt: corrupt: the SHA-256"):
        load_checkpoint(bad)
    messages: list[str] = []
    found = latest_checkpoint(tmp_path, warn=messages.append)
    assert found.path == good
    assert_states_equal(make_state(100), found.state)
    assert len(messages) == 1 and str(bad) in messages[0] and "corrupt" in messages[0]


def test_wrong_format_is_named(tmp_path):
    bare = tmp_path / "bare.pt"
    torch.save({"w": torch.ones(2)}, bare)  # a plain torch.save file, no header
    with pytest.raises(CheckpointError, match=r"bare\.pt: wrong format: not a nonstop checkpoint"):
        load_checkpoint(bare)
    future = save_checkpoint(tmp_path / "future.pt", {"a": 1})
    data = bytearray(future.read_bytes())
    data[8:12] = (99).to_bytes(4, "little")
    future.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="wrong format: version 99, this nonstop reads version 1"):
        load_checkpoint(future)
    with pytest.raises(CheckpointError, match=r"missing\.pt: no such file"):
        load_checkpoint(tmp_path / "missing.pt")


def test_weights_only_refuses_arbitrary_objects_unless_asked(tmp_path):
    path = save_checkpoint(tmp_path / "obj.pt", {"thing": Opaque(), "n": 1})
    with pytest.raises(CheckpointError, match="wrong format: verified bytes but torch.load failed"):
        load_checkpoint(path)
    assert isinstance(load_checkpoint(path, weights_only=False)["thing"], Opaque)


def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    final = checkpoint_path(tmp_path, 300)
    previous = save_checkpoint(final, make_state(1))  # an older file under the same name must survive
    before = previous.read_bytes()

    def fail(fd):
        raise KeyboardInterrupt  # Ctrl-C after the bytes are written, before the rename

    monkeypatch.setattr(checkpoint_module.os, "fsync", fail)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(final, make_state(300))
    monkeypatch.undo()
    assert final.read_bytes() == before
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name]  # temp file cleaned up
    other = checkpoint_path(tmp_path, 400)
    monkeypatch.setattr(checkpoint_module.os, "fsync", fail)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(other, make_state(400))
    monkeypatch.undo()
    assert not other.exists()
    assert latest_checkpoint(tmp_path).updates == 300


def test_killed_writer_temp_file_is_ignored_and_pruned(tmp_path):
    for updates in (10, 20, 30, 40):
        save_checkpoint(checkpoint_path(tmp_path, updates), make_state(updates))
    orphan = tmp_path / "checkpoints" / ".ckpt-000000050.pt.abc123.tmp"  # what SIGKILL mid-write leaves
    orphan.write_bytes(b"NSCKPT\r\n partial")
    assert latest_checkpoint(tmp_path).updates == 40
    removed = keep_last(tmp_path, 2)
    assert sorted(p.name for p in removed) == [
        ".ckpt-000000050.pt.abc123.tmp",
        "ckpt-000000010.pt",
        "ckpt-000000020.pt",
    ]
    assert [u for u, _ in list_checkpoints(tmp_path)] == [30, 40]
    assert keep_last(tmp_path, 2) == []
    with pytest.raises(ValueError, match="n >= 1"):
        keep_last(tmp_path, 0)


def test_no_checkpoint_and_none_loadable(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    bad = checkpoint_path(tmp_path, 5)
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"junk")
    with pytest.raises(CheckpointError, match=r"none of the 1 checkpoints loads:\n  ckpt-000000005.pt: wrong format"):
        latest_checkpoint(tmp_path, warn=lambda m: None)


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="state must be a dict"):
        save_checkpoint(tmp_path / "x.pt", [1, 2])
    with pytest.raises(TypeError, match="state keys must be strings"):
        save_checkpoint(tmp_path / "x.pt", {1: 2})
    with pytest.raises(ValueError, match="updates must be a non-negative int"):
        checkpoint_path(tmp_path, -1)
    assert not (tmp_path / "x.pt").exists()


def test_incompatible_config_lists_every_differing_key():
    saved = {"env": "Pong", "lr": 1e-4, "n_inference": 4, "ticks": 1000, "model": {"k": 7}, "gone": True}
    new = {"env": "Boxing", "lr": 1e-5, "n_inference": 4, "ticks": 5000, "model": {"k": 29}, "extra": [1, 2]}
    with pytest.raises(IncompatibleConfigError) as info:
        check_compatible(saved, new, where="runs/a")
    err = info.value
    assert err.differences == {
        "env": ("Pong", "Boxing"),
        "extra": (checkpoint_module._ABSENT, [1, 2]),
        "gone": (True, checkpoint_module._ABSENT),
        "lr": (1e-4, 1e-5),
        "model.k": (7, 29),
    }
    text = str(err)
    assert text.startswith("cannot resume runs/a: the config differs from the saved one in 5 keys")
    for line in (
        'env: saved "Pong", now "Boxing"',
        "lr: saved 0.0001, now 1e-05",
        "model.k: saved 7, now 29",
        "gone: saved true, now <absent>",
        "extra: saved <absent>, now [1, 2]",
    ):
        assert line in text
    assert "ticks" not in err.differences  # a budget may change on resume


def test_compatible_configs_pass():
    check_compatible({"env": "Pong", "sizes": [1, 2]}, {"env": "Pong", "sizes": (1, 2)})  # JSON round trip
    check_compatible({"env": "Pong", "log_a": 1}, {"env": "Pong", "log_a": 2}, may_differ=("log_*",))
    with pytest.raises(IncompatibleConfigError, match="log_a"):
        check_compatible({"log_a": 1}, {"log_a": 2}, may_differ=())
    with pytest.raises(TypeError, match="new_config must be a dict"):
        check_compatible({}, None)


def test_fsync_failure_is_not_swallowed(tmp_path, monkeypatch):
    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(tmp_path / "c.pt", {"a": 1})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_extra_bytes_are_corruption(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", {"a": 1})
    with open(path, "ab") as f:
        f.write(b"\0")
    with pytest.raises(CheckpointError, match=r"c\.pt: corrupt: \d+ payload bytes, the header declares \d+"):
        load_checkpoint(path)


def test_a_state_torch_cannot_save_leaves_the_old_file(tmp_path):
    path = save_checkpoint(checkpoint_path(tmp_path, 1), make_state(1))
    before = path.read_bytes()
    with pytest.raises(Exception, match="(?i)pickle|lambda"):
        save_checkpoint(path, {"model": make_state(2)["model"], "callback": lambda: 0})
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]
