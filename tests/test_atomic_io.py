"""One atomic writer (`nonstop._io`) behind checkpoints, run files, tick-log chunks and meta."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import nonstop._io as atomic_io
from nonstop._io import atomic_file, write_atomic
from nonstop.realtime import ticklog


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "chunk.npz"
    ticklog.save_npz_atomic(path, {"format": "x"}, {"a": np.arange(3)})
    before = path.read_bytes()
    with pytest.raises(ValueError):  # an object array cannot be written without pickle: fails mid-write
        ticklog.save_npz_atomic(path, {"format": "x"}, {"a": np.array([object()], dtype=object)}, compresslevel=1)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunk.npz"]


def test_durable_fsyncs_the_file_and_its_directory_and_can_be_skipped(tmp_path, monkeypatch):
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(atomic_io.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    write_atomic(tmp_path / "a", b"1")
    assert len(synced) == 2  # the file, then the directory (the rename survives a power cut)
    synced.clear()
    write_atomic(tmp_path / "b", b"2", durable=False)
    assert synced == [] and (tmp_path / "b").read_bytes() == b"2"


def test_text_is_refused_with_a_hint(tmp_path):
    with pytest.raises(TypeError, match="encode text first"):
        write_atomic(tmp_path / "a", '{"x": 1}')  # type: ignore[arg-type]
    assert not (tmp_path / "a").exists()


def test_checkpoints_run_files_and_tick_logs_all_write_through_it(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from nonstop.learning import checkpoint
    from nonstop.learning.runlog import RunLog

    opened: list[str] = []
    real = atomic_io.tempfile.mkstemp
    monkeypatch.setattr(atomic_io.tempfile, "mkstemp", lambda **kw: (opened.append(kw["prefix"]), real(**kw))[1])
    checkpoint.save_checkpoint(checkpoint.checkpoint_path(tmp_path / "other", 1), {"w": torch.ones(1)})
    with RunLog(tmp_path / "run", {"env": "x"}, tensorboard=False) as log:
        log.write_summary({"ticks": 1})
    log_dir = tmp_path / "run" / "ticklog"
    tl = ticklog.TickLog(0.5, directory=log_dir, chunk_rows=2)
    for t in range(1, 4):
        tl.append(tick=t, deadline=t / 2, time=t / 2, source=ticklog.SOURCE_DEFAULT, episode=0)
    tl.close()
    names = {p.split(".")[1] for p in opened}  # ".NAME.<random>.tmp"
    assert {"ckpt-000000001", "config", "summary", "meta", "chunk-000000", "chunk-000001"} <= names, opened
    assert json.loads((log_dir / "meta.json").read_text())["complete"] is True
    assert checkpoint.atomic_file is atomic_file and checkpoint.write_atomic is write_atomic


def test_atomic_files_take_the_users_umask_not_mkstemps_0600(tmp_path):
    """config.json, summary.json and an export are written through atomic_file: they must be as
    readable as any file the user writes (0666 less the umask), not 0600."""
    import os
    import stat

    from nonstop._io import write_atomic

    old = os.umask(0o022)
    try:
        p = write_atomic(tmp_path / "summary.json", b"{}")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.umask(0o077)
        q = write_atomic(tmp_path / "config.json", b"{}")
        assert stat.S_IMODE(q.stat().st_mode) == 0o600
    finally:
        os.umask(old)
