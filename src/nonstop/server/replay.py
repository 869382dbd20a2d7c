"""Replays: a session re-simulated tick by tick and checked against its own hashes (DESIGN §4).

A replay holds the session's seed and config, and per tick the action the host applied, its source
(agent or β), its delay and a CRC-32 of the observation the env returned. The env ids nonstop serves
are deterministic given a seed and the action sequence (ALE with no sticky actions, the Theorem 1
MDPs), so `verify` rebuilds the env from the header, resets it with the seed, applies every recorded
action in order (resetting where the session reset) and compares every observation hash: one
mismatch means the recording, the env or the host is not what it claims to be.

CRC-32 rather than a cryptographic hash: it costs ~25 µs on a 100 KB Atari frame against ~105 µs
for BLAKE2b, it is paid on every tick of every session, and it only has to detect divergence, not
resist forgery.

The file is a compressed ``.npz`` (no pickle) with a JSON header.

>>> import gymnasium as gym
>>> env = ReplayRecorder(gym.make("CartPole-v1"))
>>> _ = env.reset(seed=3)
>>> for a in (0, 1, 1):
...     _ = env.step(a)
>>> (len(env.step_hashes), list(env.actions), list(env.reset_steps))
(3, [0.0, 1.0, 1.0], [0])
"""

from __future__ import annotations

import os
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import gymnasium as gym
import numpy as np

from nonstop.realtime.ticklog import SOURCE_AGENT, TickLog, load_npz, save_npz_atomic

__all__ = ["obs_hash", "ReplayRecorder", "Replay", "VerifyResult", "verify", "plot_replay", "write_video"]

FORMAT: Final = "nonstop.replay/1"
#: tick-log columns kept in a replay
LOG_COLUMNS: Final = ("tick", "source", "delay", "worker", "reward", "episode", "terminated", "truncated", "lateness")


def obs_hash(obs: Any) -> int:
    """CRC-32 of an observation's raw bytes (dtype and shape are fixed per session)."""
    return zlib.crc32(np.ascontiguousarray(obs).data)


class ReplayRecorder(gym.Wrapper):
    """Wraps the session's env; records every applied action and every observation's hash.

    Owned by the session's host: only the thread ticking the host calls ``step``/``reset``. The
    hash of step ``i`` (1-based, one step per tick) is ``step_hashes[i-1]``; ``reset_steps[j]`` is
    how many steps had happened when reset ``j`` occurred, with ``reset_hashes[j]`` its hash.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.action_width = int(np.prod(env.action_space.shape)) if env.action_space.shape else 1
        self.actions = array("d")
        self.step_hashes = array("I")
        self.reset_steps = array("q")
        self.reset_hashes = array("I")

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self.reset_steps.append(len(self.step_hashes))
        self.reset_hashes.append(obs_hash(obs))
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.step_hashes.append(obs_hash(obs))
        if self.action_width == 1:
            self.actions.append(float(np.asarray(action).reshape(-1)[0]))
        else:
            self.actions.extend(np.asarray(action, dtype=np.float64).ravel().tolist())
        return obs, reward, terminated, truncated, info


@dataclass
class Replay:
    """A recorded session: ``header`` (env, env_kwargs, seed, tick_hz, β, ...) and columns."""

    header: dict[str, Any]
    columns: dict[str, np.ndarray]
    actions: np.ndarray
    step_hashes: np.ndarray
    reset_steps: np.ndarray
    reset_hashes: np.ndarray

    @classmethod
    def from_session(cls, recorder: ReplayRecorder, log: TickLog, header: dict[str, Any]) -> "Replay":
        n = min(len(log), len(recorder.step_hashes))  # equal unless the env raised mid-tick
        width = recorder.action_width
        actions = np.frombuffer(recorder.actions, np.float64).reshape(-1, width)[:n].copy()
        return cls(
            header={"format": FORMAT, "ticks": n, "action_width": width, **header},
            columns={name: log[name][:n] for name in LOG_COLUMNS},
            actions=actions,
            step_hashes=np.frombuffer(recorder.step_hashes, np.uint32)[:n].copy(),
            reset_steps=np.frombuffer(recorder.reset_steps, np.int64).copy(),
            reset_hashes=np.frombuffer(recorder.reset_hashes, np.uint32).copy(),
        )

    @property
    def ticks(self) -> int:
        return int(self.header["ticks"])

    def summary(self) -> dict[str, Any]:
        source, delay = self.columns["source"], self.columns["delay"]
        agent = delay[source == SOURCE_AGENT]
        return {
            "ticks": self.ticks,
            "agent_ticks": int((source == SOURCE_AGENT).sum()),
            "inaction_ticks": int((source != SOURCE_AGENT).sum()),
            "episodes": len(self.reset_steps),
            "return": float(self.columns["reward"].sum()),
            "mean_delay_ticks": float(agent.mean()) if agent.size else None,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (a crash never leaves half a replay)."""
        arrays = {"actions": self.actions, "step_hashes": self.step_hashes, "reset_steps": self.reset_steps,
                  "reset_hashes": self.reset_hashes, **{f"col_{k}": v for k, v in self.columns.items()}}  # fmt: skip
        return save_npz_atomic(Path(path), self.header, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Replay":
        header, data = load_npz(path, FORMAT, "replay")
        try:
            return cls(
                header=header,
                columns={k: data[f"col_{k}"] for k in LOG_COLUMNS},
                actions=data["actions"],
                step_hashes=data["step_hashes"],
                reset_steps=data["reset_steps"],
                reset_hashes=data["reset_hashes"],
            )
        except KeyError as exc:
            raise ValueError(f"cannot read replay {path}: it lacks {exc}") from exc


# ----------------------------------------------------------------------------- re-simulation


def _action(replay: Replay, env: gym.Env, i: int) -> Any:
    row = replay.actions[i]
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return int(row[0])
    return row.astype(space.dtype).reshape(space.shape)


def resimulate(replay: Replay):
    """Yield ``(step, obs, kind)`` for the replay's reset 0, then every step and reset, in order.
    ``kind`` is ``"reset"`` or ``"step"``; ``step`` counts env steps (== ticks)."""
    from nonstop.envs import make_env

    env = make_env(replay.header["env"], **replay.header.get("env_kwargs", {}))
    try:
        resets = list(replay.reset_steps)
        r = 0
        obs, _ = env.reset(seed=replay.header.get("seed"))
        if replay.header.get("warm_reset"):  # a warm env: reset with its seed ahead of the session
            obs, _ = env.reset()
        yield 0, obs, "reset"
        r = 1
        for i in range(replay.ticks):
            obs, *_ = env.step(_action(replay, env, i))
            yield i + 1, obs, "step"
            if r < len(resets) and resets[r] == i + 1:
                obs, _ = env.reset()
                yield i + 1, obs, "reset"
                r += 1
    finally:
        env.close()


@dataclass
class VerifyResult:
    """What `verify` found. ``ok`` is true when every hash matched."""

    ticks: int
    checked: int
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.checked > 0

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "ticks": self.ticks, "checked": self.checked, "mismatches": self.mismatches[:20],
                "n_mismatches": len(self.mismatches)}  # fmt: skip


def verify(replay: Replay, *, max_mismatches: int = 100) -> VerifyResult:
    """Re-simulate ``replay`` and compare every observation hash (every step and every reset)."""
    result = VerifyResult(ticks=replay.ticks, checked=0)
    r = 0
    for step, obs, kind in resimulate(replay):
        if kind == "reset":
            expected = int(replay.reset_hashes[r])
            r += 1
        else:
            expected = int(replay.step_hashes[step - 1])
        got = obs_hash(obs)
        result.checked += 1
        if got != expected:
            result.mismatches.append({"tick": step, "kind": kind, "expected": expected, "got": got})
            if len(result.mismatches) >= max_mismatches:
                break
    return result


# ----------------------------------------------------------------------------- views


def plot_replay(replay: Replay, out: str | os.PathLike) -> Path:
    """Timeline: which ticks the agent acted (vs β), the delay of each agent action, the return."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = replay.columns
    tick, source, delay = cols["tick"], cols["source"], cols["delay"]
    agent = source == SOURCE_AGENT
    fig, axes = plt.subplots(3, 1, figsize=(10, 6), sharex=True, constrained_layout=True)
    axes[0].eventplot([tick[agent], tick[~agent]], lineoffsets=[1, 0], linelengths=0.8,
                      colors=["tab:blue", "tab:red"])  # fmt: skip
    axes[0].set_yticks([0, 1], ["β (inaction)", "agent"])
    axes[0].set_title(
        f"{replay.header.get('env')} · session {replay.header.get('session_id', '?')} · "
        f"{int(agent.sum())}/{len(tick)} agent ticks"
    )
    axes[1].plot(tick[agent], delay[agent], ".", ms=3)
    axes[1].set_ylabel("delay (ticks)")
    axes[2].plot(tick, np.cumsum(cols["reward"]))
    axes[2].set_ylabel("return")
    axes[2].set_xlabel("tick")
    for end in tick[(cols["terminated"] | cols["truncated"]).astype(bool)]:
        for ax in axes:
            ax.axvline(end, color="grey", lw=0.5, ls="--")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _frame(obs: np.ndarray) -> np.ndarray:
    arr = np.asarray(obs)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[-1] not in (3, 4)) or min(arr.shape[:2]) < 8:
        raise ValueError(
            f"replay video needs image observations (H×W or H×W×3), this env's are {arr.shape}: "
            "use `nonstop replay plot` for it instead"
        )
    if arr.dtype != np.uint8:
        lo, hi = float(arr.min()), float(arr.max())
        arr = ((arr - lo) / (hi - lo or 1.0) * 255).astype(np.uint8)
    return arr


def write_video(replay: Replay, out: str | os.PathLike, *, every: int = 2, max_frames: int = 3000) -> Path:
    """Re-simulate and write every ``every``-th frame to ``out``: a ``.gif`` (Pillow), or an
    ``.mp4`` through imageio with ffmpeg when that optional package is installed."""
    if every < 1:
        raise ValueError(f"every must be a positive number of ticks, got {every!r}")
    out = Path(out)
    frames = []
    for step, obs, kind in resimulate(replay):
        if kind == "step" and step % every == 0:
            frames.append(_frame(obs))
            if len(frames) >= max_frames:
                break
    if not frames:
        raise ValueError("the replay has no ticks to draw")
    fps = float(replay.header.get("tick_hz", 60.0)) / every
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".gif":  # Pillow comes with matplotlib: GIFs need nothing optional
        from PIL import Image

        images = [Image.fromarray(frame) for frame in frames]
        images[0].save(out, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
        return out
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ValueError(f"writing {out.suffix} needs imageio (pip install imageio[ffmpeg]); .gif works without it") from None
    imageio.mimsave(out, frames, fps=fps)
    return out
