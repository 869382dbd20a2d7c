"""One place that turns an environment id into a fresh env and its realtime facts.

An id resolves, in this order:

1. a name registered with :func:`register` (``"Boxing"``, ``"theory/inaction"``, ``"CartPole"``);
2. ``"ALE/<Game>-v5"`` or ``"Atari/<Game>"``: any ALE game, with the paper's realtime defaults
   (60 Hz, one frame per tick, no sticky actions, minimal action set);
3. any id in ``gymnasium.registry``: the tick rate comes from ``tick_hz=`` or, failing that, from the
   env class's ``metadata["render_fps"]``.

Factories are module-level callables, so a freshly spawned process rebuilds the same env from the id
string and the keyword arguments alone. `EnvInfo` and `register` (the table of registered ids) live
in `nonstop.envs.spec`, which every family of worlds imports; they stay importable from here.
"""

from __future__ import annotations

import difflib
import json
import functools
import inspect
import re
import types
import typing
from typing import Any, Callable, Literal, Union

import gymnasium

from .spec import ALE_ID, REGISTRY, EnvInfo, check_positive_real, is_int, is_real, register

__all__ = ["EnvInfo", "register", "make_env", "env_info", "list_envs", "parse_env_args"]

# Legacy ale-py ids (BoxingNoFrameskip-v4, Pong-v0) only exist in gymnasium.registry after
# ale_py registers them; this pattern tells us when that import is worth paying for.
_LEGACY_ALE_ID = re.compile(r"^[A-Z][A-Za-z0-9]*(?:NoFrameskip|Deterministic)?-v[04]$")
_HOW_TO_LIST = "run `nonstop envs` (or call nonstop.envs.list_envs()) to see the registered ids"


def make_env(env_id: str, **kwargs: Any) -> gymnasium.Env:
    """Build a fresh env for ``env_id`` (see the module docstring for how ids resolve).

    >>> env = make_env("theory/delay-cycle", n=4, p_minimax=0.5)
    >>> env.reset(seed=0)[0].shape
    (4,)
    """
    _check_env_id(env_id)
    entry = REGISTRY.get(env_id)
    if entry is not None:
        _check_kwargs(env_id, entry.factory, kwargs)
        if entry.check is not None:
            entry.check(**kwargs)
        return entry.factory(**kwargs)
    match = ALE_ID.match(env_id)
    if match is not None:
        from . import atari  # deferred: importing nonstop.envs must not import ale_py

        game = match["v5"] or match["bare"]
        _check_kwargs(env_id, atari.make_atari, kwargs, skip=("game",))
        return atari.make_atari(game, **kwargs)
    spec = _gymnasium_spec(env_id)
    gym_kwargs = dict(kwargs)
    for realtime_only in ("tick_hz", "noop_action", "default_beta"):
        gym_kwargs.pop(realtime_only, None)
    _gymnasium_info(env_id, spec, kwargs)  # fails early on a missing or bad tick_hz
    return gymnasium.make(env_id, **gym_kwargs)


def env_info(env_id: str, **kwargs: Any) -> EnvInfo:
    """The realtime facts for ``env_id`` built with ``kwargs``, without building the env.

    >>> env_info("Boxing").tick_hz
    60.0
    """
    _check_env_id(env_id)
    entry = REGISTRY.get(env_id)
    if entry is not None:
        _check_kwargs(env_id, entry.factory, kwargs)
        if entry.check is not None:
            entry.check(**kwargs)
        return entry.info
    match = ALE_ID.match(env_id)
    if match is not None:
        from . import atari

        game = match["v5"] or match["bare"]
        _check_kwargs(env_id, atari.make_atari, kwargs, skip=("game",))
        atari.check_game(game)
        atari.check_atari_kwargs(**kwargs)
        return atari.atari_info(env_id, game)
    return _gymnasium_info(env_id, _gymnasium_spec(env_id), kwargs)


def list_envs() -> list[EnvInfo]:
    """Every registered id's facts, sorted by family then id.

    >>> "theory/inaction" in [info.env_id for info in list_envs()]
    True
    """
    return sorted((entry.info for entry in REGISTRY.values()), key=lambda i: (i.family, i.env_id))


def parse_env_args(items: list[str] | None) -> dict[str, Any]:
    """``["max_episode_steps=900", "preprocess=true"]`` → keyword arguments for the env
    (values read as JSON when they parse, else kept as strings).

    >>> parse_env_args(["max_episode_steps=900", "mode=hard"])
    {'max_episode_steps': 900, 'mode': 'hard'}
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-arg takes KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


# --- resolution helpers ---------------------------------------------------------------------------


def _check_env_id(env_id: object) -> None:
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str, got {type(env_id).__name__} {env_id!r}")
    if not env_id:
        raise ValueError(f"env_id must be a non-empty str; {_HOW_TO_LIST}")


def _gymnasium_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    if env_id not in gymnasium.registry and _LEGACY_ALE_ID.match(env_id):
        from . import atari

        atari.register_ale_with_gymnasium()
    if env_id in gymnasium.registry:
        return gymnasium.registry[env_id]
    raise ValueError(_unknown_id_message(env_id))


def _unknown_id_message(env_id: str) -> str:
    # Compare case-insensitively ("boxing" should find "Boxing") but suggest the real spelling.
    names = {name.lower(): name for name in REGISTRY}
    close = difflib.get_close_matches(env_id.lower(), list(names), n=5, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(names[c]) for c in close)}?" if close else ""
    return (
        f"unknown environment id {env_id!r}.{hint} {_HOW_TO_LIST.capitalize()}; any ALE game is "
        f"available as 'ALE/<Game>-v5', and any id in gymnasium.registry (with tick_hz= if it "
        f"declares no metadata['render_fps'])."
    )


def _gymnasium_info(env_id: str, spec: Any, kwargs: dict[str, Any]) -> EnvInfo:
    tick_hz = kwargs.get("tick_hz")
    if tick_hz is not None:
        check_positive_real("tick_hz", tick_hz)
    elif spec.entry_point == "ale_py.env:AtariEnv":
        # ALE's render_fps (30) is not its tick rate: the console runs at 60 Hz and each step
        # covers `frameskip` frames.
        frameskip = kwargs.get("frameskip", spec.kwargs.get("frameskip", 1))
        if not isinstance(frameskip, int) or isinstance(frameskip, bool):
            raise ValueError(
                f"{env_id!r} skips a random number of frames per step ({frameskip!r}), so it has no "
                f"fixed tick rate; use 'ALE/<Game>-v5' for the paper's one-frame ticks"
            )
        tick_hz = 60.0 / frameskip
    else:
        tick_hz = _render_fps(spec)
        if tick_hz is None:
            raise ValueError(
                f"{env_id!r} does not declare metadata['render_fps'], so nonstop cannot tell how fast "
                f"its world ticks: pass tick_hz=<ticks per second>, e.g. make_env({env_id!r}, tick_hz=30)"
            )
    default_beta = kwargs.get("default_beta", "noop")
    return EnvInfo(
        env_id=env_id,
        family="gymnasium",
        tick_hz=float(tick_hz),
        noop_action=kwargs.get("noop_action", 0),
        default_beta=default_beta,
        description=f"Gymnasium env {env_id!r}",
    )


def _render_fps(spec: Any) -> float | None:
    creator = spec.entry_point
    if isinstance(creator, str):
        try:
            creator = gymnasium.envs.registration.load_env_creator(creator)
        except (ImportError, AttributeError):
            return None
    fps: Any = getattr(creator, "metadata", {}).get("render_fps")  # whatever the env declares
    return float(fps) if is_real(fps) and fps > 0 else None


# --- keyword validation at the door ---------------------------------------------------------------


def _check_kwargs(
    env_id: str, factory: Callable[..., Any], kwargs: dict[str, Any], skip: tuple[str, ...] = ()
) -> None:
    """Reject unknown names and values of the wrong simple type, naming the culprit."""
    target: Any = factory.func if isinstance(factory, functools.partial) else factory  # a class or a function
    signature = inspect.signature(factory)
    params = {
        name: p
        for name, p in signature.parameters.items()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and name not in skip
    }
    if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        unknown = sorted(set(kwargs) - set(params))
        if unknown:
            accepted = ", ".join(params) or "no keyword arguments"
            raise TypeError(
                f"{env_id!r} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                f"it accepts: {accepted}"
            )
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # unresolvable annotations: leave type checks to the factory itself
        hints = {}
    for name, value in kwargs.items():
        if name in hints:
            _check_against_hint(env_id, name, value, hints[name])


def _check_against_hint(env_id: str, name: str, value: Any, hint: Any) -> None:
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    literals: list[Any] = []
    kinds: list[Any] = []
    for option in options:
        if typing.get_origin(option) is Literal:
            literals.extend(typing.get_args(option))
        elif option in _SIMPLE_CHECKS:
            kinds.append(option)
        else:
            return  # not a simple annotation; the factory validates it
    # Compare literals by type and value: `1 == True` must not let a bool through.
    if any(type(value) is type(v) and value == v for v in literals):
        return
    if any(_SIMPLE_CHECKS[kind](value) for kind in kinds):
        return
    if literals and kinds in ([], [type(None)]):
        allowed = tuple(literals) + ((None,) if kinds else ())
        raise ValueError(f"{env_id!r}: {name} must be one of {allowed}, got {value!r}")
    wanted = " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
    wanted += "".join(f" or {v!r}" for v in literals)
    raise TypeError(f"{env_id!r}: {name} must be {wanted}, got {type(value).__name__} {value!r}")


_SIMPLE_CHECKS: dict[Any, Callable[[Any], bool]] = {
    int: is_int,
    float: is_real,
    bool: lambda v: isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    type(None): lambda v: v is None,
}
