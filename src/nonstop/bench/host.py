"""``nonstop bench host``: does the host keep up with the env it hosts?

Target (docs/design.md §1, from the issue): the host ticking **unthrottled** on the virtual clock keeps
at least 90 % of the steps per second of a plain Gymnasium loop (``env.step(0)``, reset when an
episode ends) on the same env, measured in the same run.

Both sides do the same work: build the env, ``reset(seed=0)`` (not timed; a seeded ALE reset
reloads the ROM and costs ~0.1 s), then ``steps`` steps with the automatic resets timed. The host
side is a real ``Session(factory, clock="virtual", unthrottled=True, max_ticks=steps)``: on a
virtual clock an unthrottled host never yields, so the whole run happens inside ``start()``.
Timing starts when the first (seeded) reset returns, read from a tiny wrapper that stamps it and
binds ``step`` straight to the inner env (no extra Python frame on the per-step path), so both
loops pay exactly the same env cost. Repeats are interleaved (raw, host, raw, host, ...) after one
untimed warm-up pair; the figures are medians. Each run is timed on the wall clock (the target)
and on the thread's CPU time, which leaves out the time other processes of a shared machine took
the core away (``ratio_cpu``: the cost of the two loops, less noisy than the wall ratio).

For a Game Boy env (``--env GameBoy/TestROM``) the same run also times plain PyBoy, interleaved:
``tick(1)`` and the same observation, from the env's own start state, no Gymnasium and no host
(`nonstop.envs.gbtools.plain_pyboy_loop`). ``ratio_vs_pyboy`` = host / plain PyBoy (target ≥ 0.9);
``pyboy_tick_only_steps_per_s`` is the bare emulator's ceiling, for scale.

For a two-player Atari seat world (``--env multi/Boxing``) the same run also times plain
``multi-agent-ale-py`` stepping, interleaved: the library's own ``act``/``getScreenRGB``/
``game_over`` per frame on the same ROM and mode, no PettingZoo dicts and no host
(`nonstop.envs.atari_multi.plain_ale_loop`). ``ratio_vs_ale`` = host / plain ALE is the issue's
target (≥ 0.9); ``ratio`` (host / the env's own PettingZoo loop) says what the host adds on top of
nonstop's env adapter, which calls the ALE's C library directly and so steps faster than the plain
loop.

``--env null`` (`NullEnv`) hosts a world whose step costs next to nothing and returns one fixed
Boxing-shaped frame (210 × 160 × 3 uint8, so publishing it costs what Boxing's does), truncating every
1,000 steps: with the ALE's ~90 µs step and its noise gone, ``host_overhead_us_per_tick`` (and, per
interleaved pair, ``overhead_pairs_us`` and ``overhead_cpu_pairs_us``: their p50 is the figure to quote on
a loaded machine) is the host's own cost per tick. Its ``ratio`` means nothing there (a few percent).

The module also holds the env factory the realtime benchmarks share (`make_bench_env`).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import pstats
import time
from typing import Any

import gymnasium
import numpy as np

from nonstop.bench.common import machine_info, percentiles, run_sizes, verdict
from nonstop.realtime.clock import VirtualClock, stopwatch
from nonstop.realtime.host import Session

#: CPU time of the calling thread: on a shared, noisy machine it leaves out the time other
#: processes took the core away, so it ranks the two loops even when wall time is disturbed.
cpu_stopwatch = time.thread_time

__all__ = [
    "DESCRIPTION",
    "RESULT_KEYS",
    "TARGET_RATIO",
    "add_arguments",
    "run",
    "render",
    "make_bench_env",
    "env_source",
    "bench_env_factory",
]

# no bare percent sign: argparse %-formats help strings
DESCRIPTION = "host steps/s unthrottled (virtual clock) vs a plain gymnasium loop on the same env (target ratio ≥ 0.9)"

#: The host keeps at least this fraction of the raw loop's steps per second.
TARGET_RATIO = 0.90

#: Figures every result carries (all finite numbers or booleans).
RESULT_KEYS = (
    "raw_steps_per_s",
    "host_steps_per_s",
    "ratio",
    "meets_target",
    "raw_cpu_steps_per_s",
    "host_cpu_steps_per_s",
    "ratio_cpu",
    "host_overhead_cpu_us_per_tick",
    "host_overhead_us_per_tick",
    "env_step_p50_us",
    "host_loop_us_per_tick",
)

_QUICK = {"steps": 2000, "repeats": 3}
_FULL = {"steps": 10000, "repeats": 9}


# ----------------------------------------------------------------------------- envs


def _registry_make_env() -> Any:
    """``nonstop.envs.make_env`` once the registry exports it, else None."""
    try:
        from nonstop.envs import make_env
    except ImportError:
        return None
    return make_env


def make_bench_env(env_id: str = "Boxing") -> gymnasium.Env:
    """A fresh env for ``env_id``, through ``nonstop.envs.make_env`` when it is available.

    Without the registry, Atari names (``"Boxing"`` or ``"ALE/Boxing-v5"``) are built with the
    paper's realtime settings (one frame per step, no sticky actions) and anything else is passed
    to ``gymnasium.make``. Module-level, so a spawned host process can rebuild it.
    """
    make_env = _registry_make_env()
    if make_env is not None:
        return make_env(env_id)
    if "/" not in env_id and "-v" not in env_id:
        env_id = f"ALE/{env_id}-v5"
    if env_id.startswith("ALE/"):
        import ale_py

        gymnasium.register_envs(ale_py)
        return gymnasium.make(env_id, frameskip=1, repeat_action_probability=0.0)
    return gymnasium.make(env_id)


def bench_env_factory(env_id: str = "Boxing") -> functools.partial:
    """A picklable zero-argument factory for `Session` (wall clock: rebuilt in the host process)."""
    return functools.partial(make_bench_env, env_id)


def env_source(env_id: str = "Boxing") -> str:
    """How `make_bench_env` builds ``env_id`` right now (reported with every result)."""
    if env_id == NULL_ENV:
        return "nonstop.bench.host.NullEnv (no env cost: the host's own)"
    return "nonstop.envs.make_env" if _registry_make_env() is not None else "gymnasium.make (registry not available)"


class _ResetStamp(gymnasium.Wrapper):
    """Records when the first ``reset`` returned: the start of a timed run.

    ``step`` is bound to the inner env's ``step`` on the instance, so the per-step path is exactly
    the inner env's; only ``reset`` goes through this wrapper.
    """

    def __init__(self, env: gymnasium.Env, profile: cProfile.Profile | None = None) -> None:
        super().__init__(env)
        self.step = env.step  # type: ignore[method-assign]  # on the instance: the per-step path is the inner env's own
        self.first_reset_at: float | None = None
        self.first_reset_cpu: float | None = None
        self._profile = profile

    def reset(self, **kwargs: Any) -> Any:
        out = self.env.reset(**kwargs)
        if self.first_reset_at is None:
            self.first_reset_at = stopwatch()
            self.first_reset_cpu = cpu_stopwatch()
            if self._profile is not None:  # profile the timed region only, not the env's construction
                self._profile.enable()
        return out


class _SeatResetStamp:
    """`_ResetStamp` for a seat world (``multi/...``, PettingZoo's parallel API): the same stamp on
    the first reset, ``step`` bound straight to the world's own."""

    def __init__(self, env: Any, profile: cProfile.Profile | None = None) -> None:
        self.env = env
        self.step = env.step
        self.possible_agents = env.possible_agents
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self.first_reset_at: float | None = None
        self.first_reset_cpu: float | None = None
        self._profile = profile

    reset = _ResetStamp.reset

    def close(self) -> None:
        self.env.close()


#: ``--env null``: a world whose step costs next to nothing, so the host's own per-tick cost shows
NULL_ENV = "null"


class NullEnv(gymnasium.Env):
    """A world that does nothing: ``step`` returns one fixed Boxing-shaped frame (210 × 160 × 3 uint8),
    reward 0, and truncates every ``episode_steps`` steps, so raw and host loops both pay resets.

    With the ALE's ~100 µs step and its noise gone, ``1/host − 1/raw`` is the host's own cost per tick.

    >>> env = NullEnv(episode_steps=2)
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype.name, env.step(0)[3], env.step(0)[3]
    ((210, 160, 3), 'uint8', False, True)
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, episode_steps: int = 1000) -> None:
        if episode_steps < 1:
            raise ValueError(f"episode_steps must be at least 1, got {episode_steps!r}")
        self.observation_space = gymnasium.spaces.Box(0, 255, (210, 160, 3), np.uint8)
        self.action_space = gymnasium.spaces.Discrete(18)
        self._obs = np.zeros((210, 160, 3), np.uint8)
        self._episode_steps, self._t = episode_steps, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._obs, 0.0, False, self._t >= self._episode_steps, {}


def _stamped_env(env_id: str, profile: cProfile.Profile | None = None) -> Any:
    if env_id == NULL_ENV:
        return _ResetStamp(NullEnv(), profile)
    if env_id.startswith("multi/"):  # a seat world: the host steps every seat at once
        from nonstop.envs import make_env

        return _SeatResetStamp(make_env(env_id), profile)
    return _ResetStamp(make_bench_env(env_id), profile)


# ----------------------------------------------------------------------------- the two loops


def raw_loop(env_id: str, steps: int, action: int = 0) -> dict[str, float]:
    """Steps per second (wall and CPU) of a plain Gymnasium loop: ``step(action)``, reset when an
    episode ends."""
    env = _stamped_env(env_id)
    try:
        env.reset(seed=0)
        step, reset = env.step, env.reset
        if isinstance(env, _SeatResetStamp):  # every seat acts each step; the episode ends for all at once
            joint = {seat: action for seat in env.possible_agents}
            for _ in range(steps):
                _, _, terminated, truncated, _ = step(joint)
                if any(terminated.values()) or any(truncated.values()):
                    reset()
        else:
            for _ in range(steps):
                _, _, terminated, truncated, _ = step(action)
                if terminated or truncated:
                    reset()
        end, end_cpu = stopwatch(), cpu_stopwatch()
        wall, cpu = end - env.first_reset_at, end_cpu - env.first_reset_cpu
    finally:
        env.close()
    return {"steps_per_s": steps / wall, "cpu_steps_per_s": steps / cpu}


def host_loop(env_id: str, steps: int, *, profile: cProfile.Profile | None = None) -> dict[str, float]:
    """Steps per second of the host, unthrottled on the virtual clock, plus where the time went."""
    session = Session(
        functools.partial(_stamped_env, env_id, profile),
        clock="virtual",
        tick_hz=60.0,
        seed=0,
        max_ticks=steps,
        unthrottled=True,
    )
    with session:  # start(): unthrottled on a VirtualClock, the host runs to max_ticks right here
        if profile is not None:
            profile.disable()
        if isinstance(session.clock, VirtualClock):
            session.clock.run()  # nothing left to do unless the host someday yields when unthrottled
        end, end_cpu = stopwatch(), cpu_stopwatch()
        host = session.host
        assert host is not None, "a virtual-clock session's host runs in this process"
        env: Any = host.env  # the _ResetStamp or _SeatResetStamp that _stamped_env built
        elapsed, cpu = end - env.first_reset_at, end_cpu - env.first_reset_cpu
        log = session.tick_log
    if len(log) != steps:
        raise RuntimeError(f"host ran {len(log)} ticks, expected {steps}")
    env_s = float(log["step_s"].astype(np.float64).sum() + log["reset_s"].astype(np.float64).sum())
    return {
        "steps_per_s": steps / elapsed,
        "cpu_steps_per_s": steps / cpu,
        "env_step_p50_us": float(np.percentile(log["step_s"], 50) * 1e6),
        # per tick, whatever the host does besides env.step/reset (queue, β, log, publish)
        "host_loop_us_per_tick": (elapsed - env_s) / steps * 1e6,
    }


def _profile_host(env_id: str, steps: int, top: int = 15) -> list[dict[str, Any]]:
    """cProfile one host run; the functions that cost the most own time, in µs per tick."""
    profile = cProfile.Profile()
    try:
        host_loop(env_id, steps, profile=profile)  # enabled when the first reset returns
    finally:
        profile.disable()
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (filename, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]  # Stats.stats, the raw table, is not in typeshed
        rows.append(
            {
                "function": f"{filename.rsplit('/', 2)[-1]}:{line}({name})",
                "calls_per_tick": calls / steps,
                "own_us_per_tick": tottime / steps * 1e6,
                "cum_us_per_tick": cumtime / steps * 1e6,
            }
        )
    rows.sort(key=lambda r: r["own_us_per_tick"], reverse=True)
    return rows[:top]


# ----------------------------------------------------------------------------- the benchmark


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env",
        default="Boxing",
        help="env id (default Boxing); 'null': a world whose step costs nothing, to measure the host's own µs per tick",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"steps per timed run (default {_FULL['steps']}, quick {_QUICK['steps']})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"interleaved raw/host pairs (default {_FULL['repeats']}, quick {_QUICK['repeats']})",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile one host run and report the top functions (µs per tick; slows that run)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = run_sizes(args, _QUICK, _FULL)
    env_id = getattr(args, "env", "Boxing") or "Boxing"
    steps, repeats = int(sizes["steps"]), int(sizes["repeats"])
    runs = _timed_runs(env_id, steps, repeats)
    raw_runs, host_runs = runs["raw"], runs["host"]
    raw_sps, host_sps = _median(raw_runs, "steps_per_s"), _median(host_runs, "steps_per_s")
    raw_cpu, host_cpu = _median(raw_runs, "cpu_steps_per_s"), _median(host_runs, "cpu_steps_per_s")
    ratio = host_sps / raw_sps
    pair_ratios = [h["steps_per_s"] / r["steps_per_s"] for h, r in zip(host_runs, raw_runs)]
    result: dict[str, Any] = {
        "bench": "host",
        "env": env_id,
        "env_source": env_source(env_id),
        "steps": steps,
        "repeats": repeats,
        "raw_steps_per_s": raw_sps,
        "host_steps_per_s": host_sps,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": bool(ratio >= TARGET_RATIO),
        # the same on CPU time: what the two loops cost, without other processes' interference
        "raw_cpu_steps_per_s": raw_cpu,
        "host_cpu_steps_per_s": host_cpu,
        "ratio_cpu": host_cpu / raw_cpu,
        "ratio_pairs": percentiles(pair_ratios),
        # per pair (raw and host back to back, so a slow phase hits both): what the host adds per tick, µs
        "overhead_pairs_us": percentiles(
            [(1.0 / h["steps_per_s"] - 1.0 / r["steps_per_s"]) * 1e6 for h, r in zip(host_runs, raw_runs)]
        ),
        "overhead_cpu_pairs_us": percentiles(
            [(1.0 / h["cpu_steps_per_s"] - 1.0 / r["cpu_steps_per_s"]) * 1e6 for h, r in zip(host_runs, raw_runs)]
        ),
        # what the host adds per tick, as seen from outside (1/host - 1/raw), wall and CPU
        "host_overhead_us_per_tick": (1.0 / host_sps - 1.0 / raw_sps) * 1e6,
        "host_overhead_cpu_us_per_tick": (1.0 / host_cpu - 1.0 / raw_cpu) * 1e6,
        "env_step_p50_us": _median(host_runs, "env_step_p50_us"),
        "host_loop_us_per_tick": _median(host_runs, "host_loop_us_per_tick"),
        "raw_runs": percentiles([r["steps_per_s"] for r in raw_runs]),
        "host_runs": percentiles([r["steps_per_s"] for r in host_runs]),
        "machine": machine_info(),
    }
    if runs["pyboy"]:
        result.update(_versus_pyboy(runs["pyboy"], host_sps, host_cpu))
    if runs["ale"]:
        result.update(_versus_ale(runs["ale"], host_runs, host_sps, host_cpu))
    if getattr(args, "profile", False):
        result["profile_top"] = _profile_host(env_id, steps)
    return result


def _median(runs: list[dict[str, float]], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def _timed_runs(env_id: str, steps: int, repeats: int) -> dict[str, list[dict[str, float]]]:
    """``repeats`` timed runs of each loop (raw, host, and the plain PyBoy or two-player ALE loop where
    the env has one), interleaved so that slow phases of a shared machine hit every loop."""
    warm = min(steps, 200)
    raw_loop(env_id, warm)  # imports, ROM load, first-call costs: not timed
    host_loop(env_id, warm)
    runs: dict[str, list[dict[str, float]]] = {"raw": [], "host": [], "pyboy": [], "ale": []}
    gameboy = env_id.startswith("GameBoy/")
    atari_seats = _two_player_atari(env_id)
    if atari_seats:
        _plain_ale(env_id, warm)
    for _ in range(repeats):
        runs["raw"].append(raw_loop(env_id, steps))
        runs["host"].append(host_loop(env_id, steps))
        if gameboy:
            runs["pyboy"].append(_plain_pyboy(env_id, steps))
        if atari_seats:
            runs["ale"].append(_plain_ale(env_id, steps))
    return runs


def _versus_pyboy(pyboy_runs: list[dict[str, float]], host_sps: float, host_cpu: float) -> dict[str, Any]:
    """The host against PyBoy's own loop (a Game Boy env)."""
    pyboy_sps = _median(pyboy_runs, "steps_per_s")
    return {
        "pyboy_steps_per_s": pyboy_sps,
        "pyboy_cpu_steps_per_s": _median(pyboy_runs, "cpu_steps_per_s"),
        "pyboy_tick_only_steps_per_s": _median(pyboy_runs, "tick_only_steps_per_s"),
        "ratio_vs_pyboy": host_sps / pyboy_sps,
        "ratio_cpu_vs_pyboy": host_cpu / _median(pyboy_runs, "cpu_steps_per_s"),
        "meets_target_vs_pyboy": bool(host_sps / pyboy_sps >= TARGET_RATIO),
        "pyboy_runs": percentiles([r["steps_per_s"] for r in pyboy_runs]),
    }


def _versus_ale(
    ale_runs: list[dict[str, float]], host_runs: list[dict[str, float]], host_sps: float, host_cpu: float
) -> dict[str, Any]:
    """The host against the plain two-player ALE loop."""
    ale_sps, ale_cpu = _median(ale_runs, "steps_per_s"), _median(ale_runs, "cpu_steps_per_s")
    return {
        "ale_steps_per_s": ale_sps,
        "ale_cpu_steps_per_s": ale_cpu,
        "ratio_vs_ale": host_sps / ale_sps,
        "ratio_cpu_vs_ale": host_cpu / ale_cpu,
        "meets_target_vs_ale": bool(host_sps / ale_sps >= TARGET_RATIO),
        "ratio_pairs_vs_ale": percentiles([h["steps_per_s"] / a["steps_per_s"] for h, a in zip(host_runs, ale_runs)]),
        "ale_runs": percentiles([r["steps_per_s"] for r in ale_runs]),
    }


def _plain_pyboy(env_id: str, steps: int) -> dict[str, float]:
    from nonstop.envs.gbtools import plain_pyboy_loop

    return plain_pyboy_loop(env_id.removeprefix("GameBoy/"), steps, timers=(stopwatch, cpu_stopwatch))


def _two_player_atari(env_id: str) -> bool:
    from nonstop.envs.atari_multi import TWO_PLAYER_GAMES

    return env_id.startswith("multi/") and env_id.removeprefix("multi/") in TWO_PLAYER_GAMES


def _plain_ale(env_id: str, steps: int) -> dict[str, float]:
    from nonstop.envs.atari_multi import plain_ale_loop

    return plain_ale_loop(env_id.removeprefix("multi/"), steps, timers=(stopwatch, cpu_stopwatch))


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    table = Table(title=f"host vs raw gymnasium loop — {result['env']} ({result['env_source']})")
    table.add_column("loop")
    table.add_column("steps/s (median)", justify="right")
    table.add_column("min", justify="right")
    table.add_column("max", justify="right")
    raw, host = result["raw_runs"], result["host_runs"]
    table.add_row("raw env.step(0)", f"{result['raw_steps_per_s']:,.0f}", f"{raw['min']:,.0f}", f"{raw['max']:,.0f}")
    table.add_row(
        "host unthrottled", f"{result['host_steps_per_s']:,.0f}", f"{host['min']:,.0f}", f"{host['max']:,.0f}"
    )
    if "pyboy_steps_per_s" in result:
        pyboy = result["pyboy_runs"]
        table.add_row(
            "plain PyBoy, same obs",
            f"{result['pyboy_steps_per_s']:,.0f}",
            f"{pyboy['min']:,.0f}",
            f"{pyboy['max']:,.0f}",
        )
        table.add_row("plain PyBoy, tick only", f"{result['pyboy_tick_only_steps_per_s']:,.0f}", "", "")
    if "ale_steps_per_s" in result:
        ale = result["ale_runs"]
        table.add_row(
            "plain multi-agent-ale-py", f"{result['ale_steps_per_s']:,.0f}", f"{ale['min']:,.0f}", f"{ale['max']:,.0f}"
        )
    table.add_row("raw, CPU time", f"{result['raw_cpu_steps_per_s']:,.0f}", "", "")
    table.add_row("host, CPU time", f"{result['host_cpu_steps_per_s']:,.0f}", "", "")
    pairs = result["ratio_pairs"]
    judged = verdict(result["meets_target"], bool(result.get("quick")))
    table.caption = (
        f"ratio {result['ratio']:.3f} ({judged} ≥ {result['target_ratio']:.2f}); "
        f"on CPU time {result['ratio_cpu']:.3f}; "
        f"per pair {pairs['min']:.3f}–{pairs['max']:.3f}; "
        f"host adds {result['host_overhead_us_per_tick']:.1f} µs/tick; "
        f"env step p50 {result['env_step_p50_us']:.1f} µs; "
        f"{result['steps']} steps × {result['repeats']} interleaved repeats"
    )
    if "ratio_vs_pyboy" in result:
        table.caption += (
            f"; host vs plain PyBoy {result['ratio_vs_pyboy']:.3f} (CPU {result['ratio_cpu_vs_pyboy']:.3f})"
        )
    if "ratio_vs_ale" in result:
        judged_ale = verdict(result["meets_target_vs_ale"], bool(result.get("quick")))
        table.caption += (
            f"; host vs plain multi-agent-ale-py {result['ratio_vs_ale']:.3f} ({judged_ale} ≥ "
            f"{result['target_ratio']:.2f}; CPU {result['ratio_cpu_vs_ale']:.3f})"
        )
    console = Console()
    console.print(table)
    if "profile_top" in result:
        prof = Table(title="host run, cProfile (own time per tick)")
        for col in ("function", "calls/tick", "own µs/tick", "cum µs/tick"):
            prof.add_column(col, justify="left" if col == "function" else "right")
        for row in result["profile_top"]:
            prof.add_row(
                row["function"],
                f"{row['calls_per_tick']:.2f}",
                f"{row['own_us_per_tick']:.2f}",
                f"{row['cum_us_per_tick']:.2f}",
            )
        console.print(prof)
