"""Settings known to learn, per world and algorithm: the files `nonstop train` reads before its flags.

The package ships one file per algorithm, ``nonstop/learning/hyperparams/<algo>.yml``, in the layout RL Zoo's
users know (a world's id, then its settings), with two more keys that every shipped entry must
have: ``reached`` (the figure the settings reached) and ``command`` (the command that reached it).
``nonstop train --hyperparams FILE`` reads the user's own file instead (``reached`` and
``command`` optional there). A run's settings are resolved in this order, each over the last: the
algorithm's defaults, its world family's (`ConfigBase.for_family`), the world's entry, ``--preset``,
the flags typed.

>>> entry = world_entry("dqn", "CartPole")
>>> entry.settings["batch_size"], "nonstop train --env CartPole" in entry.command
(64, True)
>>> world_entry("dqn", "NoSuchWorld-v0") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["WorldEntry", "world_entry", "read_file", "shipped_file", "sized_line"]

#: the keys of an entry that are not settings
_ABOUT = ("reached", "command")


@dataclass(frozen=True)
class WorldEntry:
    """One world's settings from a hyperparameter file, and what they are known to reach."""

    env: str
    settings: dict[str, Any]
    source: str  # the file, as said to the user
    reached: str | None = None
    command: str | None = None

    def line(self) -> str:
        """How the run's first lines say where its settings came from."""
        said = ", ".join(f"{k} {v}" for k, v in self.settings.items()) or "the algorithm's own defaults"
        known = f"; reached {self.reached} with `{self.command}`" if self.reached else ""
        return f"settings for {self.env} from {self.source}: {said}{known}"


def shipped_file(algo: str) -> Any:
    """The file the package ships for ``algo`` (a traversable; it may not exist)."""
    return resources.files("nonstop.learning").joinpath("hyperparams", f"{algo}.yml")


def read_file(text: str, source: str, *, shipped: bool) -> dict[str, dict[str, Any]]:
    """A hyperparameter file's entries by world id, each checked for its shape (the settings' values
    are the algorithm's config's to check)."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source} is not YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected world ids each with its settings, got a {type(data).__name__}")
    for env, entry in data.items():
        if not isinstance(entry, dict) or not all(isinstance(k, str) for k in entry):
            raise ValueError(f"{source}: {env}'s entry must map setting names to values, got {entry!r}")
        missing = [k for k in _ABOUT if shipped and not isinstance(entry.get(k), str)]
        if missing:
            raise ValueError(f"{source}: {env}'s entry must say {' and '.join(missing)}")
    return {str(env): entry for env, entry in data.items()}


def world_entry(
    algo: str, env: str, path: str | Path | None = None, config_class: Any = None, *, env_module: str | None = None
) -> WorldEntry | None:
    """``env``'s entry for ``algo``: from ``path`` (the user's ``--hyperparams``) or the shipped file;
    None where the file has none. The entry is the one keyed as the run names its world: with ``env_module``
    (``--env-module``), ``MODULE:ID`` (`nonstop.envs.registry.qualify_env_id`, whose refusals it makes).
    With ``config_class``, a key that is not one of its settings is one line naming the file and the key.

    >>> world_entry("dqn", "CartPole", env_module="nonstop.envs.duel") is None  # no entry keyed that way
    True
    """
    from nonstop.envs.registry import qualify_env_id

    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"--hyperparams {path}: cannot read it ({exc.strerror or exc})") from None
        entries, source = read_file(text, str(path), shipped=False), str(path)
    else:
        file = shipped_file(algo)
        if not file.is_file():
            return None
        source = f"nonstop/learning/hyperparams/{algo}.yml"
        entries = read_file(file.read_text(encoding="utf-8"), source, shipped=True)
    env = qualify_env_id(env, env_module)  # the key the run's world is named by
    entry = entries.get(env)
    if entry is None:
        return None
    settings = {k: v for k, v in entry.items() if k not in _ABOUT}
    if config_class is not None:
        known = {f.name for f in fields(config_class)}
        foreign = sorted(set(settings) - known)
        if foreign:
            raise ValueError(f"{source}: {env}: {', '.join(foreign)} is not a setting of {config_class.__name__}")
    if isinstance(settings.get("hidden"), list):
        settings["hidden"] = tuple(settings["hidden"])
    return WorldEntry(env, settings, source, entry.get("reached"), entry.get("command"))


def sized_line(settings: Any, ticks: int) -> str | None:
    """What a run of ``ticks`` ticks sizes to its length in ``settings`` (`ConfigBase.for_run`: DQN's ε
    schedule, SAC's learning starts), as the run's first lines say it; None where nothing was left to it.

    >>> from nonstop.learning.dqn import DQNConfig
    >>> sized_line(DQNConfig(), 18_000)
    "sized to this run's 18,000 ticks (no flag, world entry or preset sets them): --epsilon-ticks 1,800"
    >>> sized_line(DQNConfig(epsilon_ticks=5000), 18_000) is None
    True
    """
    sized = settings.for_run(ticks)
    given, now = settings.to_dict(), sized.to_dict()
    changed = [f"--{name.replace('_', '-')} {value:,}" for name, value in now.items() if given[name] != value]
    if not changed:
        return None
    return f"sized to this run's {ticks:,} ticks (no flag, world entry or preset sets them): {', '.join(changed)}"
