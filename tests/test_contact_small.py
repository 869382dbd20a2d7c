"""Issue 30's smaller things: a client's one-line message when its server goes away, and the live
page's polling kept out of uvicorn's access log."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.server.app import ServerThread
from nonstop.server.client import Client, ServerGone, http_get

WORLD = "theory/inaction"


def test_a_client_whose_server_stops_gets_one_line_naming_it(no_shm_leak) -> None:
    srv = ServerThread(envs=[WORLD]).__enter__()
    client = Client(srv.url, retry_deadline=0)
    try:
        client.reset(seed=0)
        srv.__exit__(None, None, None)  # what Ctrl-C does to `nonstop serve`: uvicorn closes with 1012
        with pytest.raises(ServerGone) as gone:
            for _ in range(50):
                client.step(1)
        line = str(gone.value)
        assert "\n" not in line and line.startswith(f"the server at {srv.url}/ws went away"), line
        assert gone.value.code in (1012, 1006, 1001, 1000, None), line
        assert "ConnectionClosed" not in line and isinstance(gone.value, ConnectionError)
    finally:
        client.close()
        srv.__exit__(None, None, None)


def test_the_live_pages_polling_stays_out_of_the_access_log(no_shm_leak) -> None:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if all(f.filter(record) for f in logging.getLogger("uvicorn.access").filters):
                seen.append(record.getMessage())

    handler = Keep()
    with ServerThread(envs=[WORLD], log_level="info") as srv:
        logging.getLogger("uvicorn.access").addHandler(handler)
        try:
            for _ in range(3):
                http_get(srv.url, "/live/sessions")
                http_get(srv.url, "/health")
            http_get(srv.url, "/metadata")
        finally:
            logging.getLogger("uvicorn.access").removeHandler(handler)
    assert any("/metadata" in line for line in seen), seen  # the log still logs
    assert not any("/live/sessions" in line or "/health" in line for line in seen), seen


def test_the_readmes_install_line_brings_every_extra_the_default_run_asks_for() -> None:
    """`nonstop train` notes a missing tensorboard (the `train` extra): the README's first command must
    install it, so the default run prints no note; and the test extra brings scipy, so the sweep's
    two t-quantile tests run instead of skipping."""
    import re
    import tomllib

    from doc_commands import ROOT, shell_commands

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    line = next(
        c.text for c in shell_commands(ROOT / "README.md") if c.text.startswith("pip install") and "test" not in c.text
    )
    named = re.search(r"\.\[([a-z,-]+)\]", line).group(1).split(",")
    brought = {re.split(r"[<>=\[]", req)[0] for name in named for req in extras[name]}
    assert {"torch", "matplotlib", "tensorboard"} <= brought, (line, brought)
    assert any(req.startswith("scipy") for req in extras["test"])


def test_a_replay_over_the_budget_is_left_out_of_checkpoints_and_said_once(
    tmp_path, capsys, monkeypatch, no_shm_leak
) -> None:
    """`--checkpoint-replay auto` keeps the replay only under REPLAY_CHECKPOINT_LIMIT: over it (here the
    limit is shrunk to 1 KiB, below CartPole's 6 MiB) no replay file is written, and the run says so
    once, at its first checkpoint, not at every one."""
    from nonstop.cli import main
    from nonstop.experiment import record

    monkeypatch.setattr(record, "REPLAY_CHECKPOINT_LIMIT", 1024)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--env",
                "CartPole",
                "--learning-starts",
                "50",
                "--batch-size",
                "8",
                "--progress-every",
                "2",
                "--checkpoint-every",
                "2",
                "--seconds",
                "6",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("checkpoints leave the replay out") == 1, err
    assert list((out / "checkpoints").glob("ckpt-*")) and not list((out / "checkpoints").glob("replay-*"))
