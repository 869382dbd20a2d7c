"""The ``nonstop`` program: finds the verb (`nonstop.commands`), runs it, and turns its errors into one line."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import Any, NoReturn

__all__ = ["main"]


def _sigterm_to_exit(signum: int, _: Any) -> None:
    # SIGTERM unwinds like Ctrl-C does, so every `finally` reaps and unlinks.
    from nonstop.realtime.lifeline import stop_requested

    stop_requested(signum)  # the run loops raise it again if a finalizer swallows this one
    raise SystemExit(128 + signum)


def _sigint_to_interrupt(signum: int, _: Any) -> None:
    from nonstop.realtime.lifeline import stop_requested

    stop_requested(signum)
    raise KeyboardInterrupt


class _HelpWithDefaults(argparse.HelpFormatter):
    """Help that shows every option's default, unless its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS, False) or not action.option_strings:
            return text
        return f"{text} (default: {action.default})"


#: the longest usage line a bad argument is answered with; a longer one becomes ``usage: nonstop VERB …``
USAGE_WIDTH = 100


class _OneLineErrors(argparse.ArgumentParser):
    """A parser whose usage error is two lines: the usage (cut to ``nonstop VERB …`` when it runs to
    more than one line: ``nonstop train``'s fills 30) and ``nonstop: error: …``, as every other error
    of the program reads. ``--help`` still shows everything."""

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split())
        if len(usage) > USAGE_WIDTH:
            usage = f"usage: {self.prog} … ({self.prog} --help lists every option)"
        self.exit(2, f"{usage}\nnonstop: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from nonstop import __version__
    from nonstop.commands import VERBS

    parser = _OneLineErrors(
        prog="nonstop",
        formatter_class=_HelpWithDefaults,
        description="Realtime RL: worlds that never wait, staggered asynchronous inference, realtime metrics.",
    )
    parser.add_argument("--version", action="version", version=f"nonstop {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineErrors)
    for verb, module_name in VERBS.items():
        module = importlib.import_module(f"nonstop.commands.{module_name}")
        p = sub.add_parser(verb, help=module.HELP, description=module.HELP, formatter_class=_HelpWithDefaults)
        module.add_arguments(p)
        p.set_defaults(verb=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    from nonstop.realtime import lifeline

    _refuse_in_bootstrapping_child()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _sigterm_to_exit)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell ignores it (nohup, &)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _sigint_to_interrupt)
    try:
        return _run(argv)
    finally:  # called in-process (tests, notebooks): leave the caller's signal handling as it was
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        lifeline.pending_stop = 0


def _refuse_in_bootstrapping_child() -> None:
    """A script that calls `main` without ``if __name__ == "__main__":`` runs it again in every process
    nonstop starts (they are spawned: each imports the script afresh); say so, in one line, and end
    that child, instead of a second run in the first run's directory."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):  # multiprocessing's own test of this
        print(
            "nonstop: error: a child process re-imported the script that calls nonstop's command line: put the "
            'call under `if __name__ == "__main__":` (nonstop starts its processes with spawn)',
            file=sys.stderr,
        )
        raise SystemExit(2)


def _run(argv: list[str] | None) -> int:
    from nonstop.commands._extras import EXTRA_OF, one_line, require_extras

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "bench_unavailable", False):  # what parse_args does, but a bench
        verbs = next(
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        )  # that cannot run takes any options
        (verbs.choices.get(getattr(args, "command", None) or "") or parser).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if getattr(args, "verb", None) is None:
        parser.print_help()
        return 2
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what was typed (a resumed run overrides only that)
    try:
        require_extras(args)  # a missing optional package is named before anything runs or is written
        return int(args.verb.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted: stopped cleanly", file=sys.stderr)
        return 130
    except (
        ValueError,
        FileNotFoundError,
        FileExistsError,
        NotADirectoryError,
    ) as exc:  # bad input; a TypeError is a bug
        print(f"nonstop: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            if "pip install" not in str(exc):  # not one of our "install the extra" messages: a real bug, shown whole
                raise
            print(f"nonstop: error: {one_line(exc)}", file=sys.stderr)
            return 2
        what, install = extra
        print(f"nonstop: error: this command needs {what}, which is not installed: {install}", file=sys.stderr)
        return 2
    except ImportError as exc:
        if "pip install" not in str(exc):  # not one of our "install the extra" messages: a real bug, shown whole
            raise
        print(f"nonstop: error: {one_line(exc)}", file=sys.stderr)  # an optional dependency is missing
        return 2
    except (OSError, RuntimeError) as exc:  # a dead host, a full or read-only disk, corrupt checkpoints
        if os.environ.get("NONSTOP_TRACEBACK"):
            raise
        print(f"nonstop: error: {one_line(exc)} (NONSTOP_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1


def entry() -> None:
    """The ``nonstop`` program (console script and ``python -m nonstop.cli``): `main`, then leave at once.

    Why not a plain ``sys.exit``: by the time `main` returns, everything nonstop opened is closed
    (checkpoint, ``summary.json`` and tick log written, children reaped, shared memory unlinked),
    and what is left of an ordinary exit is the interpreter freeing every module — with torch
    loaded, 0.8 s on a quiet 2-core machine and 2.5-3.3 s on a loaded one, so Ctrl-C or SIGTERM
    took seconds to end ``nonstop train``. So: wait for any non-daemon thread (as an ordinary exit
    would), run the ``atexit`` handlers (multiprocessing's reaping, logging's flush, Ray's
    shutdown), flush stdio, and ``os._exit`` with the status, skipping only that freeing. A
    ``SystemExit`` with a status (SIGTERM's 143) leaves the same way once it has unwound; any other
    exception that escapes `main` takes the ordinary path (its traceback printed as usual).
    Calling `main` in-process (tests, notebooks) never exits this way.
    """
    import atexit
    import threading

    try:
        code = main()
    except SystemExit as exc:  # SIGTERM (143) once every `finally` on the way out has run
        if not isinstance(exc.code, int):
            raise
        code = exc.code
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said on it
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
