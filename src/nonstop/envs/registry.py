"""One place that turns an environment id into a fresh env and its realtime facts.

An id resolves, in this order:

1. a name registered with :func:`register` (``"Boxing"``, ``"theory/inaction"``, ``"CartPole"``);
2. ``"ALE/<Game>-v5"`` or ``"Atari/<Game>"``: any ALE game, with the paper's realtime defaults
   (60 Hz, one frame per tick, no sticky actions, minimal action set);
3. any id in ``gymnasium.registry``: the tick rate comes from ``tick_hz=`` or, failing that, from the
   env class's ``metadata["render_fps"]`` or, where the class declares none (MuJoCo sets it per
   instance from its ``dt``), from a built instance's.

``"module:Id"`` (Gymnasium's own form) imports ``module`` first, then resolves ``Id`` as above: a
world registered by the user's own module (`import_env_module` says where it must be). The whole
string is the id every process rebuilds the world from, so a child process imports the module too.

Factories are module-level callables, so a freshly spawned process rebuilds the same env from the id
string and the keyword arguments alone. `EnvInfo` and `register` (the table of registered ids) live
in `nonstop.envs.spec`, which every family of worlds imports; they stay importable from here.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import functools
import inspect
import os
import re
import sys
import types
import typing
from typing import Any, Callable, Final, Literal, Union

import gymnasium

from .spec import ALE_ID, REGISTRY, EnvInfo, check_positive_real, is_int, is_real, register

__all__ = [
    "EnvInfo",
    "register",
    "make_env",
    "env_info",
    "list_envs",
    "parse_env_args",
    "split_env_id",
    "qualify_env_id",
    "import_env_module",
    "import_file_module",
    "TRUST_FLAG",
]

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
    env_id = _resolve_module(env_id)
    entry = REGISTRY.get(env_id)
    if entry is not None:
        kwargs, _ = _realtime_facts(kwargs)
        _check_kwargs(env_id, entry.factory, kwargs)
        if entry.check is not None:
            entry.check(**kwargs)
        return entry.factory(**kwargs)
    match = ALE_ID.match(env_id)
    if match is not None:
        from . import atari  # deferred: importing nonstop.envs must not import ale_py

        game = match["v5"] or match["bare"]
        kwargs, _ = _realtime_facts(kwargs)
        _check_kwargs(env_id, atari.make_atari, kwargs, skip=("game",))
        return atari.make_atari(game, **kwargs)
    spec = _gymnasium_spec(env_id)
    _gymnasium_info(env_id, spec, kwargs)  # fails early on a missing or bad tick_hz
    return gymnasium.make(env_id, **_gymnasium_kwargs(kwargs))


def env_info(env_id: str, **kwargs: Any) -> EnvInfo:
    """The realtime facts for ``env_id`` built with ``kwargs``, without building the env.

    >>> env_info("Boxing").tick_hz
    60.0
    """
    _check_env_id(env_id)
    env_id = _resolve_module(env_id)
    entry = REGISTRY.get(env_id)
    if entry is not None:
        kwargs, facts = _realtime_facts(kwargs)
        _check_kwargs(env_id, entry.factory, kwargs)
        if entry.check is not None:
            entry.check(**kwargs)
        return dataclasses.replace(entry.info, **facts) if facts else entry.info
    match = ALE_ID.match(env_id)
    if match is not None:
        from . import atari

        game = match["v5"] or match["bare"]
        kwargs, facts = _realtime_facts(kwargs)
        _check_kwargs(env_id, atari.make_atari, kwargs, skip=("game",))
        atari.check_game(game)
        atari.check_atari_kwargs(**kwargs)
        return dataclasses.replace(atari.atari_info(env_id, game), **facts)
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


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """``"module:Id"`` → ``("module", "Id")``; an id without a module → ``(None, id)``.

    >>> split_env_id("mypkg.worlds:Target1D-v0"), split_env_id("CartPole")
    (('mypkg.worlds', 'Target1D-v0'), (None, 'CartPole'))
    """
    module, sep, bare = env_id.partition(":")
    if not sep:
        return None, env_id
    if not _MODULE_NAME.fullmatch(module) or not bare or ":" in bare:
        raise ValueError(
            f"environment {env_id!r}: the module:Id form takes a Python module name, one ':' and an id "
            "(mypkg.worlds:Target1D-v0)"
        )
    return module, bare


def qualify_env_id(env_id: str, env_module: str | None) -> str:
    """The one id that names both the world and the module registering it (``--env-module MOD``
    with ``--env Id`` is ``MOD:Id``); a module named twice, differently, is refused.

    >>> qualify_env_id("Target1D-v0", "mypkg.worlds"), qualify_env_id("mypkg.worlds:Target1D-v0", "mypkg.worlds")
    ('mypkg.worlds:Target1D-v0', 'mypkg.worlds:Target1D-v0')
    """
    _check_env_id(env_id)
    module, bare = split_env_id(env_id)
    if env_module is None:
        return env_id
    if not isinstance(env_module, str) or not _MODULE_NAME.fullmatch(env_module):
        raise ValueError(f"--env-module takes a Python module name (mypkg.worlds), got {env_module!r}")
    if module is not None and module != env_module:
        raise ValueError(
            f"--env {env_id} and --env-module {env_module} name two modules: give one "
            f"(--env {module}:{bare}, or --env {bare} --env-module {env_module})"
        )
    return f"{env_module}:{bare}"


def import_env_module(module: str, *, search_cwd: bool = True) -> None:
    """Import the user's ``module`` so that the ids it registers exist in this process (every
    process that builds the world calls this through `make_env`). Where it is not found on
    ``sys.path``, the current directory is tried too (a package beside the command, which the
    console script's ``sys.path`` lacks) and, when it is found there, added to ``PYTHONPATH`` so
    any process started from here finds it as well (spawned children inherit ``sys.path``).
    ``search_cwd=False``: ``sys.path`` as it stands, nothing added (a module a file names,
    `import_file_module`)."""
    try:
        importlib.import_module(module)
        return
    except ModuleNotFoundError as exc:
        if not _is_missing(module, exc):
            raise  # the module was found, and something it imports is missing: the user's to see whole
    here = os.getcwd()
    if search_cwd and here not in sys.path:
        sys.path.append(here)
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            sys.path.remove(here)
            if not _is_missing(module, exc):
                raise
        else:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), here) if p)
            return
    where = f"PYTHONPATH or in the directory nonstop runs from ({here})" if search_cwd else "PYTHONPATH"
    raise ValueError(f"cannot import module {module!r} (the world's module in '{module}:…'): it must be on {where}")


#: the flag that lets a command import the module a file's world id names (`import_file_module`)
TRUST_FLAG: Final = "--trust-module"


def import_file_module(env_id: str, source: str, *, trust: bool, instead: str = "") -> None:
    """Import the module that ``env_id``, read from a file (``source``: a replay, a run's ``config.json``),
    names (``module:Id``), only where the user said to trust it (``trust``: `TRUST_FLAG`).

    A file is not the user's command: a downloaded replay beside an ``evil.py`` must run nothing. Without
    ``trust`` the module is refused in one line naming it and the flag (``instead``: another way the
    command offers); with it, the module is imported from ``sys.path`` as it stands: the current
    directory is never added for it. An id that names no module imports nothing and needs no trust.

    >>> import_file_module("CartPole", "replay x.npz", trust=False)
    >>> import_file_module("evil:Env-v0", "replay x.npz", trust=False)
    Traceback (most recent call last):
    ...
    ValueError: replay x.npz names the module 'evil' (its world is 'evil:Env-v0'), and nonstop imports no code a file names: pass --trust-module to import it (from PYTHONPATH; the current directory is never searched)
    """
    module, _ = split_env_id(env_id)
    if module is None:
        return
    if not trust:
        raise ValueError(
            f"{source} names the module {module!r} (its world is {env_id!r}), and nonstop imports no code a file "
            f"names: pass {TRUST_FLAG} to import it (from PYTHONPATH; the current directory is never searched){instead}"
        )
    _import_registering(module, search_cwd=False)


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
#: the ids each user module registered when it was imported here (what a refusal lists)
_MODULE_IDS: dict[str, list[str]] = {}


def _is_missing(module: str, exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` says ``module`` itself (or a package above it) is missing."""
    parts = module.split(".")
    return exc.name in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _resolve_module(env_id: str) -> str:
    """``"module:Id"``: import the module (once; it registers its ids), then check it registered
    ``Id``; the id to resolve is returned (the bare ``Id``, or ``env_id`` without a module)."""
    module, bare = split_env_id(env_id)
    if module is None:
        return env_id
    _import_registering(module, search_cwd=True)
    if bare in REGISTRY or bare in gymnasium.registry or ALE_ID.match(bare):
        return bare
    made = _MODULE_IDS[module] or _ids_from(module)
    listed = (
        f"it registers {', '.join(made)}"
        if made
        else "it registers none: call gymnasium.register(...) or nonstop.envs.register(...) when it is imported"
    )
    raise ValueError(f"module {module!r} registered no environment {bare!r} ({listed})")


def _import_registering(module: str, *, search_cwd: bool) -> None:
    """Import ``module`` once (`import_env_module`), noting the ids it registered (what a refusal lists)."""
    if module in _MODULE_IDS:
        return
    before = set(REGISTRY) | set(gymnasium.registry)
    import_env_module(module, search_cwd=search_cwd)
    _MODULE_IDS[module] = sorted((set(REGISTRY) | set(gymnasium.registry)) - before)


def _ids_from(module: str) -> list[str]:
    """The ids whose entry point lives in ``module`` (a module imported before nonstop looked)."""
    found = [name for name, entry in REGISTRY.items() if getattr(entry.factory, "__module__", "") == module]
    for name, spec in gymnasium.registry.items():
        point = spec.entry_point
        where = point.partition(":")[0] if isinstance(point, str) else getattr(point, "__module__", "")
        if where == module:
            found.append(name)
    return sorted(found)


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
        f"available as 'ALE/<Game>-v5', any id in gymnasium.registry (with tick_hz= if it "
        f"declares no metadata['render_fps']), and a world your own module registers as 'module:Id'."
    )


def _gymnasium_info(env_id: str, spec: Any, kwargs: dict[str, Any]) -> EnvInfo:
    tick_hz = kwargs.get("tick_hz")
    if tick_hz is not None:
        _check_tick_hz(tick_hz)
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
        if tick_hz is None:  # MuJoCo sets it per instance, from its dt
            tick_hz = _instance_fps(env_id, _gymnasium_kwargs(kwargs))
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


def _realtime_facts(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` split into the env's own and the realtime facts they override (``tick_hz``,
    ``noop_action``, ``default_beta``: the host reads them, the env never sees them), checked."""
    facts: dict[str, Any] = {k: kwargs[k] for k in _REALTIME_KEYS if k in kwargs}
    if "tick_hz" in facts:
        _check_tick_hz(facts["tick_hz"])
        facts["tick_hz"] = float(facts["tick_hz"])
    return {k: v for k, v in kwargs.items() if k not in _REALTIME_KEYS}, facts


_REALTIME_KEYS: Final = ("tick_hz", "noop_action", "default_beta")


def _check_tick_hz(tick_hz: Any) -> None:
    """A rate a world can tick at, or a one-line `ValueError` (``--env-arg tick_hz=fast`` is bad input)."""
    try:
        check_positive_real("tick_hz", tick_hz)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def _gymnasium_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without the realtime facts nonstop reads itself (Gymnasium's env never sees them)."""
    return _realtime_facts(kwargs)[0]


def _instance_fps(env_id: str, gym_kwargs: dict[str, Any]) -> float | None:
    """``metadata["render_fps"]`` of a built instance, for an env whose class declares none (a
    MuJoCo world sets it from its ``dt``, which its arguments may change); one build per
    id and arguments in a process."""
    key = (env_id, json.dumps(gym_kwargs, sort_keys=True, default=repr))
    if key not in _INSTANCE_FPS:
        try:
            env = gymnasium.make(env_id, **gym_kwargs)
        except Exception:  # a world that cannot be built here is said when it is built, not as a rate
            return None
        try:
            fps: Any = env.unwrapped.metadata.get("render_fps")
        finally:
            env.close()
        _INSTANCE_FPS[key] = float(fps) if is_real(fps) and fps > 0 else None
    return _INSTANCE_FPS[key]


_INSTANCE_FPS: dict[tuple[str, str], float | None] = {}


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


def _check_kwargs(env_id: str, factory: Callable[..., Any], kwargs: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
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
                f"{env_id!r} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; it accepts: {accepted}"
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
