"""The optional extras each command needs, named before anything runs or is written."""

from __future__ import annotations

import argparse
import errno
import importlib.util

__all__ = ["EXTRA_OF", "missing_modules", "needs_line", "require_extras", "one_line"]


#: the optional extras a command may need, by the module that is missing
EXTRA_OF: dict[str, tuple[str, str]] = {
    "torch": (
        "PyTorch (the learning stack)",
        "pip install 'nonstop[learn]' (CPU-only machine: pip install torch==2.13.0 -e '.[learn]')",
    ),
    "safetensors": (
        "safetensors (the weights `nonstop export` writes)",
        "pip install 'nonstop[learn]' (or pip install safetensors)",
    ),
    "matplotlib": ("matplotlib (the pictures)", "pip install 'nonstop[plot]'"),
    "PIL": ("Pillow (PNG frames)", "pip install 'nonstop[server]'"),
    **{
        module: ("the server stack (fastapi, uvicorn, websockets, pydantic)", "pip install 'nonstop[server]'")
        for module in ("fastapi", "uvicorn", "websockets", "pydantic", "httpx")
    },
}


def missing_modules(modules: tuple[str, ...]) -> list[ModuleNotFoundError]:
    """A ModuleNotFoundError for each of ``modules`` that cannot be imported here (nothing is imported)."""
    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(ModuleNotFoundError(f"No module named {module!r}", name=module))
    return missing


def needs_line(exc: ImportError) -> str:
    """What a command lacks and how to install it, in one line."""
    extra = EXTRA_OF.get((exc.name or "").split(".")[0])
    if extra is not None:
        return f"needs {extra[0]}, which is not installed: {extra[1]}"
    return f"cannot be imported here: {one_line(exc)}"


def require_extras(args: argparse.Namespace) -> None:
    """Raise ModuleNotFoundError for the first optional package the command will need and lacks."""
    needs = {
        "train": ("torch",),
        "sweep": ("torch",),
        "export": ("torch", "safetensors"),
        "demo": ("torch", "matplotlib"),
        "report": ("matplotlib",),
    }
    wanted = list(needs.get(args.command, ()))
    given = vars(args)  # the flags of this command (only some of them define --plot)
    if args.command == "compare" and args.plot != "":
        wanted.append("matplotlib")
    if args.command == "bench" and args.bench:
        from nonstop.bench import REQUIRES

        wanted += REQUIRES.get(args.bench, ())
        if given.get("plot"):  # a figure asked for (nstar and nlstar draw one unless --plot '')
            wanted.append("matplotlib")
    for module in wanted:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def one_line(exc: BaseException) -> str:
    """The first line of an error, with what it is when the message alone would not say it."""
    from nonstop.realtime.host import HostError

    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, HostError):
        lines = lines[:1]  # the env's traceback is in the host's own report, not in this line
    text = "; ".join(lines) if lines else type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in text:
        text = f"{text}: {exc.filename}"
    if isinstance(exc, PermissionError):
        text = f"permission denied: {text}" if "ermission" not in text else text
    elif isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        text = f"the disk is full: {text}" if "space" not in text else text
    return text
