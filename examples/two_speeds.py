"""Two agents of very different speeds play the same realtime world at the same time.

A fast scripted bot (~40 ms per decision) and a slow agent (2 s per decision, like an LLM; a
latency policy, so it costs no CPU) each get their own session of the same env on one nonstop
server. Neither world waits: while an agent thinks, β acts. At the end each agent's inaction
(share of ticks β played), delay (ticks between the observation an action was computed from and
the tick it was applied) and return are printed, from the sessions' replays.

    PYTHONPATH=src python examples/two_speeds.py                  # in-process server, Boxing, 20 s
    PYTHONPATH=src python examples/two_speeds.py --url ws://127.0.0.1:8000   # a running `nonstop serve`
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import gymnasium

from nonstop.policies.base import Policy, RandomPolicy
from nonstop.policies.latency import Constant, LatencyPolicy
from nonstop.server.client import AsyncClient, http_get, space_from_json


class ScriptedBoxer(Policy):
    """Punch while weaving: RIGHTFIRE, UPFIRE, DOWNFIRE, in turn (Boxing's action ids)."""

    PATTERN = (11, 10, 13)

    def __init__(self, action_space: gymnasium.Space) -> None:
        self.action_space = action_space
        self._n = 0

    def seed(self, seed: int | None) -> None:
        self._n = 0

    def act(self, obs):
        from nonstop.policies.base import Decision

        self._n += 1
        return Decision(self.PATTERN[self._n % len(self.PATTERN)] % self.action_space.n, latency=0.04)


async def play(url: str, name: str, policy: Policy, env: str, seconds: float, seed: int) -> str:
    """One agent's loop: observe, decide (taking the policy's declared time), act. Returns its session id."""
    async with AsyncClient(url) as client:
        seen = await client.reset(env=env, seed=seed, record=True)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            decision = policy.act(seen.obs)
            await asyncio.sleep(decision.latency)  # thinking; the world goes on meanwhile
            await client.act(decision.action, obs_tick=seen.tick)
            seen = await client.observe()
        return seen.info["session_id"]


async def both(url: str, env: str, seconds: float) -> tuple[list[str], dict[str, Policy]]:
    meta = http_get(url, "/metadata")
    space = space_from_json(meta["envs"][env]["action"])
    agents = {
        "fast scripted bot (40 ms)": ScriptedBoxer(space),
        "slow agent (2 s)": LatencyPolicy(RandomPolicy(space, seed=1), Constant(2.0), seed=1),
    }
    return list(await asyncio.gather(*(play(url, n, p, env, seconds, seed=7) for n, p in agents.items()))), agents


def report(url: str, names: list[str], sids: list[str]) -> None:
    from nonstop.server.replay import Replay

    sessions = {s["session_id"]: s for s in http_get(url, "/sessions")}
    print(f"{'agent':28} {'ticks':>6} {'inaction':>9} {'mean delay':>11} {'return':>7}")
    for name, sid in zip(names, sids):
        deadline = time.monotonic() + 30
        while sessions[sid]["lifecycle"] != "closed" and time.monotonic() < deadline:
            time.sleep(0.1)
            sessions = {s["session_id"]: s for s in http_get(url, "/sessions")}
        summary = Replay.load(sessions[sid]["replay"]).summary()
        inaction = summary["inaction_ticks"] / max(1, summary["ticks"])
        delay = summary["mean_delay_ticks"]
        print(
            f"{name:28} {summary['ticks']:6d} {inaction:9.1%} {delay if delay is None else f'{delay:.1f} ticks':>11} "
            f"{summary['return']:7.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running `nonstop serve --replay-dir DIR` (default: start one in-process)")
    parser.add_argument("--env", default="Boxing")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    if args.url:
        sids, agents = asyncio.run(both(args.url, args.env, args.seconds))
        report(args.url, list(agents), sids)
        return
    from nonstop.server.app import ServerThread

    with tempfile.TemporaryDirectory() as replays, ServerThread(envs=[args.env], replay_dir=Path(replays)) as server:
        sids, agents = asyncio.run(both(server.url, args.env, args.seconds))
        report(server.url, list(agents), sids)


if __name__ == "__main__":
    main()
