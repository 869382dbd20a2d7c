"""A resumed run's config: the saved one, with only what the user typed now put over it.

``nonstop train --resume RUN`` keeps RUN's saved config (`TrainConfig`, read in today's keys:
`nonstop.experiment.config.current_form`) and its algorithm; a setting typed now overrides the saved one
and is said at the start (``seconds: 4 → 10``). Whether an override is allowed at all is the run log's
check (`nonstop.learning.checkpoint.check_compatible`), made when the run directory opens.

>>> from nonstop.experiment.config import TrainConfig
>>> saved = TrainConfig(env="CartPole", seconds=4.0).to_dict()
>>> fresh = TrainConfig(env="CartPole", seconds=10.0, seed=3)
>>> cfg, lines = resume_config(saved, fresh, Typed(run={"seconds"}), where="runs/cartpole")
>>> cfg.seconds, cfg.seed, lines
(10.0, 0, ['seconds: 4.0 → 10.0'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nonstop.experiment.config import TrainConfig, current_form

__all__ = ["Typed", "resume_config", "saved_algorithm"]


@dataclass(frozen=True)
class Typed:
    """What the user typed now, by the config's names: ``run``, `TrainConfig` fields (``env_kwargs`` for
    ``--env-arg``/``--pixels``, ``scheduler_args`` for ``--scheduler-arg``); ``settings``, the algorithm's
    settings (all of them under ``--preset``)."""

    run: set[str] = field(default_factory=set)
    settings: set[str] = field(default_factory=set)


def saved_algorithm(saved: dict[str, Any], typed_algo: str | None, where: str) -> str:
    """The algorithm a resumed run goes on with: its own (an older run's, read in today's keys); another typed
    now is one line saying so."""
    algo = str(current_form(saved).get("algo", TrainConfig.algo))
    if typed_algo is not None and typed_algo != algo:
        raise ValueError(f"{where} is a --algo {algo} run: it resumes as one (start a new run for --algo {typed_algo})")
    return algo


def resume_config(
    saved: dict[str, Any], fresh: TrainConfig, typed: Typed, *, where: str
) -> tuple[TrainConfig, list[str]]:
    """The config ``saved`` (a run's config.json) with what ``typed`` names taken from ``fresh`` (the config
    the flags describe), and a line per setting that changed. ``where``: the run, for messages."""
    saved = current_form(saved)
    now = fresh.to_dict()
    if "agent_id" in typed.run and now.get("agent_id", "none") != saved.get("agent_id", "none"):
        raise ValueError(
            f"--agent-id {now.get('agent_id', 'none')}: the run was trained with --agent-id "
            f"{saved.get('agent_id', 'none')}, which its network's input depends on"
        )
    keys = {k for k in typed.run if k in now and k != "agent_id"}
    merged = {**saved, **{k: now[k] for k in keys}}
    saved_settings = saved.get("algo_settings") or {}
    fresh_settings = now["algo_settings"] or {}
    merged["algo_settings"] = {**saved_settings, **{k: fresh_settings[k] for k in typed.settings}}
    resumed = TrainConfig.from_dict(merged)
    after = resumed.to_dict()
    lines = [f"{k}: {saved.get(k)!r} → {after.get(k)!r}" for k in sorted(keys) if saved.get(k) != after.get(k)]
    lines += [
        f"{resumed.algo}.{k}: {saved_settings.get(k)!r} → {after['algo_settings'][k]!r}"
        for k in sorted(typed.settings)
        if saved_settings.get(k) != after["algo_settings"][k]
    ]
    return resumed, lines
