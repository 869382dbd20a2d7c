"""``nonstop bench host --env null``: the host's own cost per tick, against a world that costs nothing.

Figures are checked for shape and finiteness only: speed targets live in the benchmark's output, never
in timed unit tests."""

from __future__ import annotations

import argparse
import functools
import json
import math

import numpy as np
import pytest

from nonstop.bench import host
from nonstop.realtime.host import Session


def _run(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    host.add_arguments(parser)
    args = parser.parse_args(argv)
    args.quick, args.json = True, True
    return host.run(args)


def test_null_mode_reports_a_finite_host_overhead(no_shm_leak) -> None:
    result = _run(["--env", "null", "--steps", "3000", "--repeats", "3"])
    assert result["env"] == "null" and "NullEnv" in result["env_source"]
    for key in host.RESULT_KEYS:
        value = result[key]
        assert isinstance(value, bool) or math.isfinite(value), f"{key} = {value}"
    for key in ("overhead_pairs_us", "overhead_cpu_pairs_us"):
        pairs = result[key]
        assert pairs["n"] == 3 and all(math.isfinite(pairs[p]) for p in ("p50", "min", "max")), key
    json.loads(json.dumps(result, allow_nan=False))  # one JSON object, no NaN/inf anywhere


def test_null_env_looks_like_boxing_and_truncates_on_schedule() -> None:
    env = host.NullEnv(episode_steps=3)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info == {}
    assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8  # Boxing's frame, so the publish costs the same
    ends = []
    for _ in range(7):
        ends.append(env.step(0)[3])
        if ends[-1]:
            env.reset()
    assert ends == [False, False, True, False, False, True, False]
    with pytest.raises(ValueError, match="episode_steps must be at least 1, got 0"):
        host.NullEnv(episode_steps=0)


def test_null_env_under_the_host_logs_every_tick_and_its_resets(no_shm_leak) -> None:
    """The host over the null world keeps the realtime contract: one log row a tick, the episode
    truncated where the world says, and every observation published."""
    factory = functools.partial(host.NullEnv, episode_steps=4)
    with Session(factory, clock="virtual", tick_hz=60.0, seed=0, max_ticks=10, unthrottled=True) as session:
        log = session.tick_log
        latest = session.slot.read()
    assert len(log) == 10
    assert log["truncated"].tolist() == [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]
    assert log["episode"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert latest.tick == 10 and latest.obs.shape == (210, 160, 3)
