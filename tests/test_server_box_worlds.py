"""A Box world that declares no no-op (Pendulum) is served with its own β: the zero action, as every
seat of a many-seat world already got, instead of refusing to start."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")

from nonstop.server.client import Client
from nonstop.server.app import ServerThread
from nonstop.server.envspec import EnvSpec


def test_a_box_world_without_a_declared_noop_gets_its_spaces_zero() -> None:
    spec = EnvSpec.probe("Pendulum-v1")
    assert np.array_equal(spec.noop_action, np.zeros(1, np.float32)) and spec.default_beta == "noop"


@pytest.mark.wall
def test_pendulum_is_served_with_its_default_beta(no_shm_leak) -> None:
    with ServerThread(envs=["Pendulum-v1"]) as srv, Client(srv.url) as client:
        first = client.reset(env="Pendulum-v1", seed=0)
        seen = client.wait(5)
        assert seen.tick >= first.tick + 5 and seen.info["inaction_ticks"] >= 5  # β (torque 0) acted
