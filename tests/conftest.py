"""Shared test helpers for the realtime core.

Everything here is module-level so that it pickles into a spawned host process
(the wall clock runs the host in its own process and rebuilds the env from the
factory it is given).
"""

from __future__ import annotations

import os
import time

# Before any test module imports Ray (several do, at collection): Ray reads this once at import,
# and without it a local test cluster advertises the machine's external interface, which a
# sandbox may not let it connect back to (seen as a 5-minute GCS timeout in CI).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from nonstop.realtime.channels import SEGMENT_PREFIX

SHM_DIR = Path("/dev/shm")

#: the items `-m` left out of this session (CI runs the suite in two passes, `-m "not wall"` and `-m wall`:
#: tests/test_readme_figures.py counts the whole suite from either pass's own collection)
DESELECTED = pytest.StashKey[list[pytest.Item]]()


def pytest_configure(config: pytest.Config) -> None:
    """xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which pytest alone never sets:
    nonstop's Console reads COLUMNS as a width the user chose and wraps its wide tables at 80 columns there, and
    nowhere else. The worker's own defaults are dropped (a user's COLUMNS other than 80 is kept)."""
    if hasattr(config, "workerinput") and os.environ.get("COLUMNS") == "80" and os.environ.get("LINES") == "24":
        del os.environ["COLUMNS"], os.environ["LINES"]


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        items[0].config.stash.setdefault(DESELECTED, []).extend(items)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist's workers (CI's parallel pass, `-n 2`) the slow tests go first, in their order: started last, a
    minutes-long test would leave the other worker idle at the end, while at the start the many short tests
    fill the other worker around it. (Every worker sorts alike: xdist requires the same collection.)"""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


class ScriptedEnv(gymnasium.Env):
    """A deterministic world whose observation tells which tick produced it.

    obs = [total steps so far (== host tick), step within the episode, last
    applied action, episode index]. Reward of a step is ``reward_scale *
    (action + 1)``, so rewards identify the action applied. An episode ends
    (terminated) after ``episode_len`` steps, or truncates after it when
    ``truncate=True``. ``fail_at_step`` makes the n-th ``step`` (1-based,
    counted over the env's life) raise ``RuntimeError``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        *,
        n_actions: int = 3,
        episode_len: int | None = None,
        truncate: bool = False,
        fail_at_step: int | None = None,
        reward_scale: float = 1.0,
    ) -> None:
        self.action_space = gymnasium.spaces.Discrete(n_actions)
        self.observation_space = gymnasium.spaces.Box(0.0, 1e9, shape=(4,), dtype=np.float64)
        self.episode_len = episode_len
        self.truncate = truncate
        self.fail_at_step = fail_at_step
        self.reward_scale = reward_scale
        self.total_steps = 0
        self.episode_steps = 0
        self.episode = -1
        self.last_action = 0

    def _obs(self) -> np.ndarray:
        return np.array(
            [self.total_steps, self.episode_steps, self.last_action, max(self.episode, 0)], dtype=np.float64
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.episode += 1
        self.episode_steps = 0
        return self._obs(), {}

    def step(self, action):
        self.total_steps += 1
        if self.fail_at_step is not None and self.total_steps == self.fail_at_step:
            raise RuntimeError(f"scripted failure at step {self.total_steps}")
        if not self.action_space.contains(action):
            raise AssertionError(f"host applied an invalid action {action!r}")
        self.episode_steps += 1
        self.last_action = int(action)
        reward = self.reward_scale * (int(action) + 1)
        done = self.episode_len is not None and self.episode_steps >= self.episode_len
        terminated = done and not self.truncate
        truncated = done and self.truncate
        return self._obs(), reward, terminated, truncated, {}


def scripted_env(**kwargs) -> ScriptedEnv:
    return ScriptedEnv(**kwargs)


def cartpole() -> gymnasium.Env:
    return gymnasium.make("CartPole-v1")


class _SlowReset(gymnasium.Wrapper):
    """Resets take 5 ms of wall time: the host's two publishes at an episode end lie that far apart."""

    def reset(self, **kwargs):

        time.sleep(0.005)
        return self.env.reset(**kwargs)


def slow_reset_cartpole() -> gymnasium.Env:
    return _SlowReset(gymnasium.make("CartPole-v1"))


def failing_env() -> ScriptedEnv:
    """Raises on its 7th step: six good ticks, then a failure at tick 7."""
    return ScriptedEnv(fail_at_step=7)


def always_two(obs) -> int:
    """A callable β (module-level so it pickles)."""
    return 2


def out_of_space(obs) -> int:
    """A broken callable β that returns an action outside Discrete(3)."""
    return 99


# ----------------------------------------------------------------------------- shm hygiene


def our_segments() -> set[str]:
    """nonstop segments in /dev/shm created by this test process (segment names
    embed the creator's pid; other sessions may run concurrently on the machine)."""
    if not SHM_DIR.exists():
        return set()
    tag = f"_{os.getpid()}_"
    return {p.name for p in SHM_DIR.iterdir() if p.name.startswith(SEGMENT_PREFIX) and tag in p.name}


@pytest.fixture
def no_shm_leak():
    """Fails the test if it leaves a ``nonstop_*`` segment of ours in /dev/shm."""
    before = our_segments()
    yield
    leaked = our_segments() - before
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"


# ----------------------------------------------------------------------------- driving a virtual session


def run_ticks(world, n: int) -> None:
    """Advance a virtual `Session` by exactly ``n`` ticks (to just past tick
    ``host.tick + n``'s processing time, computed exactly as the host does)."""
    host = world.host
    target = host.tick + n
    world.run_until(host.origin + target * world.tau_m + world.clock.tick_grace)
    assert host.tick == target, (host.tick, target)


def tick_mod3(obs) -> int:
    """A callable β that depends on the observation it is given."""
    return int(obs[0]) % 3


def publish_uniform_frames(slot, seconds: float, ready, done_count) -> None:
    """Writer for the torn-read test (runs in a spawned process): publish frames
    whose every element equals the sequence number, back to back, with a short
    pause every 8 frames so that a reader on a loaded machine also gets whole
    windows between writes (the liveness half of the test)."""

    frame = np.empty(slot.shape, slot.dtype)
    ready.set()
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        n += 1
        frame.fill(n)
        slot.publish(frame, tick=n, time=float(n), reward=1.0, episode=n % 7)
        if n % 8 == 0:
            time.sleep(0.0005)
    done_count.value = n
    slot.close()


def segments_of(pid: int) -> list[str]:
    """nonstop's shared-memory segments in /dev/shm that process ``pid`` created (their names carry it)."""
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith("nonstop_") and f"_{pid}_" in p.name)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (Linux ``/proc``): a zombie has exited, only its parent's wait is missing."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy (returned), or fail naming ``what``
    after ``timeout`` seconds (generous: a loaded CI machine is slow, a passing test never waits it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def check_env_strictly(env: gymnasium.Env, allowed: dict[str, str] | None = None) -> None:
    """Gymnasium's ``check_env`` with every warning it gives a failure, unless ``allowed`` names it:
    a piece of the warning's text -> why it is expected of this env. Each allowance must still be
    needed (a warning that is gone takes its allowance with it)."""
    import warnings

    from gymnasium.utils.env_checker import check_env

    allowed = allowed or {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    messages = [f"{w.category.__name__}: {w.message}" for w in seen]
    unexpected = [m for m in messages if not any(piece in m for piece in allowed)]
    assert not unexpected, f"check_env warned: {unexpected}"
    stale = [piece for piece in allowed if not any(piece in m for m in messages)]
    assert not stale, f"allowed but not warned (drop the allowance): {stale}"
