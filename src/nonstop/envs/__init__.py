"""Realtime worlds: one registry from an id to a fresh env and its tick rate.

>>> from nonstop.envs import make_env, env_info
>>> env_info("CartPole").tick_hz, env_info("theory/inaction").default_beta
(50.0, 'noop')

Importing this package registers every built-in id; ale_py and pyboy are imported only when an Atari
or Game Boy env is built, so the import stays light.
"""

from __future__ import annotations

from . import atari, atari_multi, classic, continuous, duel, gameboy, magent, theory  # noqa: F401  (importing registers their ids)
from .registry import EnvInfo, env_info, list_envs, make_env, parse_env_args, register

__all__ = ["EnvInfo", "env_info", "list_envs", "make_env", "parse_env_args", "register"]
