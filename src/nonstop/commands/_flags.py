"""Flags made from a config dataclass's fields: one source for each default and its help.

`add_fields` adds ``--field-name`` for each field named, its type read from the field's annotation,
its default the field's, and the help the field's own with the default shown; a field's metadata
may add ``choices`` and ``metavar``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import MISSING, Field, fields
from typing import Any

__all__ = ["add_fields", "arg_type", "shown", "add_device_arguments", "add_env_module_argument", "env_of"]


def arg_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError becomes argparse's one-line usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


def shown(value: Any) -> str:
    """A default as the help shows it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _field_default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


_TYPES: dict[str, Callable[[str], Any]] = {"str": str, "float": float, "int": int}


def add_fields(
    group: Any,
    cls: type,
    names: Iterable[str],
    *,
    types: dict[str, Callable[[str], Any]] | None = None,
    unset: Iterable[str] = (),
    shown_as: dict[str, str] | None = None,
) -> None:
    """Add a flag for each field of ``cls`` in ``names``. ``types``: a parser for a field whose
    annotation is not a plain str/int/float; ``unset``: fields whose parsed default is None (given or
    not can then be told apart) while the help still shows the config's default; ``shown_as``: a
    default shown in other words."""
    by_name = {f.name: f for f in fields(cls)}
    types, unset, shown_as = types or {}, set(unset), shown_as or {}
    for name in names:
        f = by_name[name]
        default = _field_default(f)
        meta = dict(f.metadata)
        text = f"{meta.get('help', '')} (default: {shown_as.get(name, shown(default))})".replace("%", "%%")
        flag = "--" + name.replace("_", "-")
        kw: dict[str, Any] = {"help": text, "default": None if name in unset else default}
        if "metavar" in meta:
            kw["metavar"] = meta["metavar"]
        if isinstance(default, bool) and name not in types:
            group.add_argument(flag, action="store_true", **kw)
            continue
        if "choices" in meta:
            kw["choices"] = meta["choices"]
        annotation = f.type if isinstance(f.type, str) else f.type.__name__
        kind = types.get(name) or _TYPES.get(annotation.replace(" | None", ""))
        if kind is None:
            raise TypeError(f"{cls.__name__}.{name} ({annotation}) needs a parser in types=")
        group.add_argument(flag, type=kind, **kw)


def add_device_arguments(group: Any, *, device: str = "cpu", what: str = "the model", dtype: bool = True) -> None:
    """``--device`` and ``--dtype`` for a command that runs a model: `nonstop.inference.device.add_device_arguments`
    (in the library, so the benchmarks add the same flags)."""
    from nonstop.inference.device import add_device_arguments as add

    add(group, device=device, what=what, dtype=dtype)


def add_env_module_argument(group: Any) -> None:
    """``--env-module MODULE``: the module that registers the ``--env`` id, imported first (as ``--env MODULE:ID``)."""
    group.add_argument(
        "--env-module",
        default=None,
        metavar="MODULE",
        help="import MODULE before looking the env id up: a world your own module registers (the same "
        "as --env MODULE:ID; it must be on PYTHONPATH or in the directory nonstop runs from; "
        "every process that builds the world imports it)",
    )


def env_of(env: str, args: argparse.Namespace) -> str:
    """``env`` with ``--env-module``'s module, as one id (``MODULE:ID``); two different modules are refused."""
    from nonstop.envs.registry import qualify_env_id

    return qualify_env_id(env, args.env_module)  # every parser that calls this adds --env-module
