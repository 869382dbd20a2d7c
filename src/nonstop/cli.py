"""The ``nonstop`` command."""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import json
import os
import signal
import sys
from typing import Any

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


# ----------------------------------------------------------------------------- envs


def cmd_envs(args: argparse.Namespace) -> int:
    from nonstop._console import Console
    from rich.table import Table

    from nonstop.envs import list_envs

    from nonstop.envs.gameboy import ROMS_ENV_VAR, pyboy_problem, rom_status

    envs = list_envs()
    roms = {e.env_id: rom_status(e.env_id.removeprefix("GameBoy/")) for e in envs if e.family == "gameboy"}
    if args.json:
        print(json.dumps([{"id": e.env_id, "family": e.family, "tick_hz": e.tick_hz, "default": e.default_beta,
                           "description": e.description,
                           **({"rom": roms[e.env_id][0], "rom_problem": roms[e.env_id][1] or None}
                              if e.env_id in roms else {})} for e in envs]))  # fmt: skip
        return 0
    table = Table(title="Registered realtime environments")
    for col in ("id", "family", "tick Hz", "β default", "description"):
        table.add_column(col)
    for e in envs:
        table.add_row(e.env_id, e.family, f"{e.tick_hz:g}", e.default_beta, e.description)
    Console().print(table)
    print("Any ALE game also works as ALE/<Game>-v5 (paper defaults: 60 Hz, no frame skip, no sticky actions).")
    print(f"Game Boy ROMs (found with rom=PATH or in ${ROMS_ENV_VAR}; nonstop ships none):")
    no_pyboy = pyboy_problem() if roms else ""
    for env_id, (source, problem) in roms.items():
        if source and no_pyboy:
            print(f"  {env_id}: ROM found ({source}) but not playable: {no_pyboy}")
        else:
            print(f"  {env_id}: {'found: ' + source if source else 'missing: ' + problem}")
    return 0


# ----------------------------------------------------------------------------- gameboy


def cmd_gameboy(args: argparse.Namespace) -> int:
    from nonstop.envs import gameboy

    if args.gameboy_command == "check":
        found = gameboy.find_rom(args.game, args.rom)
        gameboy.check_gameboy_kwargs(args.game, rom=args.rom, state=args.state)
        header = found.header
        print(f"{args.game}: {found.source}, title {header.title!r}, {header.rom_banks} banks, header and "
              f"global checksums OK, sha1 {header.sha1}" + (f"; state {args.state} matches" if args.state else ""))  # fmt: skip
        return 0
    report = gameboy.record_state(
        args.game, args.out, rom=args.rom, from_state=args.from_state, presses=args.press, boot_frames=args.boot_frames
    )
    print(f"recorded {report['out']}: {report['game']} on {report['rom']} ({report['title']!r}), "
          f"{report['frames_played']} frames of presses played")  # fmt: skip
    return 0


# ----------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from nonstop.bench.common import QUICK_NOTE, machine_info

    module = args.bench_module
    result = module.run(args)
    result = {"bench": args.bench, "machine": machine_info(), "quick": bool(args.quick), **result}
    if args.quick:
        result["quick_note"] = QUICK_NOTE  # beside its meets_target, in the JSON as on screen
    if args.json:
        print(json.dumps(result, default=_json_default))
    else:
        render = getattr(module, "render", None)
        if render is not None:
            render(result)
        else:
            _render_flat(result)
        if args.quick:
            print(QUICK_NOTE)
    return 0


def _json_default(value: Any) -> Any:
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:
        pass
    return str(value)


def _render_flat(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    table = Table(title=f"nonstop bench {result.get('bench')}")
    table.add_column("figure")
    table.add_column("value")
    for key, value in result.items():
        if key == "machine":
            continue
        table.add_row(key, json.dumps(value, default=_json_default) if isinstance(value, (dict, list)) else str(value))
    Console().print(table)


# ----------------------------------------------------------------------------- demo


def cmd_demo(args: argparse.Namespace) -> int:
    from nonstop.demo import run_demo

    return run_demo(args)


# ----------------------------------------------------------------------------- server


def cmd_serve(args: argparse.Namespace) -> int:
    from nonstop.server.app import resolve_token, serve

    return serve(
        args.env or ["Boxing"], host=args.host, port=args.port, token=resolve_token(args.token, args.token_file),
        max_sessions=args.max_sessions, idle_timeout=args.idle_timeout, replay_dir=args.replay_dir,
        tick_threads=args.tick_threads, tick_procs=args.tick_procs, tick_sched=args.tick_sched,
        warm_envs=args.warm_envs, switch_interval=args.switch_interval, log_level=args.log_level,
        connect_timeout=args.connect_timeout, max_connections=args.max_connections,
        replay_keep=args.replay_keep, replay_max_mb=args.replay_max_mb,
    )  # fmt: skip


def cmd_mcp(args: argparse.Namespace) -> int:
    from nonstop.server.mcp import run_stdio

    return run_stdio(args.env or ["Boxing"], replay_dir=args.replay_dir)


def cmd_replay(args: argparse.Namespace) -> int:
    from nonstop.server import replay

    rec = replay.Replay.load(args.file)
    if args.replay_command == "verify":
        result = replay.verify(rec)
        print(json.dumps({**result.as_dict(), **rec.summary()}))
        return 0 if result.ok else 1
    if args.replay_command == "plot":
        out = replay.plot_replay(rec, args.out or str(args.file).removesuffix(".npz") + ".png")
    else:
        out = replay.write_video(rec, args.out or str(args.file).removesuffix(".npz") + ".gif", every=args.every)
    print(out)
    return 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from nonstop.bench import BENCHMARKS
    from nonstop.bench import REQUIRES as BENCH_REQUIRES

    parser = argparse.ArgumentParser(
        prog="nonstop",
        description="Realtime RL: worlds that never wait, staggered asynchronous inference, realtime metrics.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("envs", help="list the registered realtime environments")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_envs)

    from nonstop import demo

    p = sub.add_parser("demo", help="the default job: the paper's headline on realtime Boxing (a few minutes)")
    demo.add_arguments(p)
    p.set_defaults(func=cmd_demo)

    from nonstop.envs.gameboy import GAMES

    p = sub.add_parser("gameboy", help="Game Boy ROMs and save states (nonstop ships no ROM)")
    gb = p.add_subparsers(dest="gameboy_command", metavar="ACTION", required=True)
    q = gb.add_parser("check", help="find and validate a game's ROM (and a save state) without running it")
    q.add_argument("--game", required=True, choices=list(GAMES))
    q.add_argument("--rom", help="ROM file or directory (default: $NONSTOP_ROMS)")
    q.add_argument("--state", help="a nonstop save state to check against the ROM")
    q.set_defaults(func=cmd_gameboy)
    q = gb.add_parser("record-state", help="record a start state (e.g. a Pokémon encounter) tied to your ROM")
    q.add_argument("--game", required=True, choices=list(GAMES))
    q.add_argument("--rom", help="ROM file or directory (default: $NONSTOP_ROMS)")
    q.add_argument("--from", dest="from_state", help="start from this PyBoy state (in PyBoy's window, Z saves one)")
    q.add_argument("--press", default="", help="buttons to play first, e.g. 'a*2,wait*60,down' (frames held)")
    q.add_argument("--boot-frames", type=int, default=None, help="frames to run from power-on when not --from")
    q.add_argument("--out", required=True, help="where to write the nonstop save state")
    q.set_defaults(func=cmd_gameboy)

    from nonstop import compare

    p = sub.add_parser("compare", help="sequential vs unstaggered vs max_time vs exp_time on one env and latency")
    compare.add_arguments(p)
    p.set_defaults(func=compare.run_compare)

    from nonstop import report, trainer

    p = sub.add_parser("train", help="train DQN in a realtime world: staggered inference, asynchronous learners")
    trainer.add_arguments(p)
    p.set_defaults(func=trainer.run_train)


    from nonstop import plan

    from nonstop import sweep

    p = sub.add_parser("sweep", help="the paper's learning experiments (return vs model size, staggered vs sequential) as one command")
    sweep.add_arguments(p)
    p.set_defaults(func=sweep.run_sweep)

    p = sub.add_parser("plan", help="capacity planner: N_I*, N_L*, cores, memory and traffic a model needs at a tick rate")
    plan.add_arguments(p)
    p.set_defaults(func=plan.run_plan)

    from nonstop.metrics import tolerance

    p = sub.add_parser("tolerance", help="how large a delay a world tolerates: its stochasticity over the inference horizon (Eq. 4)")
    tolerance.add_arguments(p)
    p.set_defaults(func=tolerance.run_tolerance)

    p = sub.add_parser("report", help="plots and a summary of a training run directory (nonstop train --out RUN)")
    report.add_arguments(p)
    p.set_defaults(func=report.run_report)

    from nonstop import export

    p = sub.add_parser("export", help="a run's policy as a plain state_dict (and safetensors) that torch.load reads")
    export.add_arguments(p)
    p.set_defaults(func=export.run_export)

    p = sub.add_parser("serve", help="serve realtime worlds over WebSocket (OpenEnv protocol + realtime verbs)")
    p.add_argument("--env", action="append", help="env id to serve (repeat for several; first is the default; Boxing)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on every request and socket (visible to "
                                    "every user in ps: prefer --token-file or $NONSTOP_TOKEN)")
    p.add_argument("--token-file", help="read the token from this file's first line (else $NONSTOP_TOKEN, if set)")
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--max-connections", type=int, default=256,
                   help="open WebSocket connections allowed at once; one more is refused (close code 1013)")
    p.add_argument("--connect-timeout", type=float, default=30.0,
                   help="close a WebSocket connection that has started no session within this many seconds")
    p.add_argument("--idle-timeout", type=float, default=60.0, help="end a session after this many silent seconds")
    p.add_argument("--replay-dir", help="record a replay of every session into this directory")
    p.add_argument("--replay-keep", type=int, default=1000,
                   help="keep at most this many replays in --replay-dir, pruning the oldest first (0: no limit)")
    p.add_argument("--replay-max-mb", type=float, default=0.0,
                   help="keep at most this many MB of replays in --replay-dir, oldest pruned first (0: no limit)")
    p.add_argument("--tick-threads", type=int, default=2, help="threads of the tick pool")
    p.add_argument("--tick-procs", type=int, default=2,
                   help="tick sessions on this many worker processes, past the one core of one GIL (default 2; "
                        "0: on threads of the server process); the server process still owns every session")
    p.add_argument("--tick-sched", choices=("auto", "fifo", "nice", "normal"), default="auto",
                   help="scheduling of the tick workers' tick threads (auto: SCHED_FIFO, else nice -10, where "
                        "permitted, like every wall-clock host)")
    p.add_argument("--warm-envs", type=int, default=2,
                   help="envs per env id built and seeded ahead, for fast starts of unseeded sessions")  # fmt: skip
    p.add_argument("--switch-interval", type=float, default=0.0005,
                   help="Python's GIL switch interval (s): how long the request loop can hold a due tick back")
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("mcp", help="MCP server on stdio: realtime sessions as tools for LLM agents")
    p.add_argument("--env", action="append", help="env id to offer (repeat; first is the default; Boxing)")
    p.add_argument("--replay-dir", help="record a replay of every session into this directory")
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("replay", help="verify, plot or render a session replay")
    rsub = p.add_subparsers(dest="replay_command", metavar="ACTION", required=True)
    for name, help_text in (("verify", "re-simulate and check every observation hash (exit 1 on mismatch)"),
                            ("plot", "timeline PNG: agent vs β ticks, delay, return"),
                            ("video", "GIF (or MP4 with imageio[ffmpeg]) of the re-simulated frames")):  # fmt: skip
        rp = rsub.add_parser(name, help=help_text)
        rp.add_argument("file", help="replay .npz written by the server")
        if name != "verify":
            rp.add_argument("--out", help="output file (default: next to FILE)")
        if name == "video":
            rp.add_argument("--every", type=int, default=2, help="keep one frame in EVERY ticks")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("bench", help="run a benchmark (JSON on the last line with --json)")
    bench_sub = p.add_subparsers(dest="bench", metavar="NAME")
    for name, module_name in BENCHMARKS.items():
        missing: list[ImportError] = list(_missing_modules(BENCH_REQUIRES.get(name, ())))
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # offered all the same: running it names what to install
            missing = missing or [exc]
            module = None
        if missing:
            description = getattr(module, "DESCRIPTION", None)
            what = f"{description} — " if description else ""
            line = f"{what}[unavailable: {_needs_line(missing[0])}]"
            bp = bench_sub.add_parser(name, help=line, description=line)
            bp.set_defaults(func=lambda a, why=missing[0]: _bench_unavailable(why), bench_unavailable=True)
            continue
        assert module is not None  # imported: nothing it needs is missing
        bp = bench_sub.add_parser(name, help=getattr(module, "DESCRIPTION", ""))
        bp.add_argument("--json", action="store_true", help="print one JSON object on the last line")
        bp.add_argument("--quick", action="store_true", help="a short run (~30 s on 2 cores), as CI does")
        module.add_arguments(bp)
        bp.set_defaults(func=lambda a, m=module: cmd_bench(a, parser), bench_module=module)

    def bench_usage(a: argparse.Namespace) -> int:  # `nonstop bench` without a benchmark
        p.print_help()
        return 2

    p.set_defaults(func=bench_usage)
    return parser


def main(argv: list[str] | None = None) -> int:
    from nonstop.realtime import lifeline

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _sigterm_to_exit)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the shell ignores it (nohup, &)
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _sigint_to_interrupt)
    try:
        return _run(argv)
    finally:  # called in-process (tests, notebooks): leave the caller's signal handling as it was
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        lifeline.pending_stop = 0


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "bench_unavailable", False):  # what parse_args does, but a bench
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # that cannot run takes any options
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _require_extras(args)  # a missing optional package is named before anything runs or is written
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted: stopped cleanly", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, NotADirectoryError) as exc:
        print(f"nonstop: error: {_one_line(exc)}", file=sys.stderr)  # bad input: usage errors
        return 2
    except ModuleNotFoundError as exc:
        extra = _EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None:
            if "pip install" not in str(exc):  # not one of our "install the extra" messages: a real bug, shown whole
                raise
            print(f"nonstop: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        what, install = extra
        print(f"nonstop: error: this command needs {what}, which is not installed: {install}", file=sys.stderr)
        return 2
    except ImportError as exc:
        if "pip install" not in str(exc):  # not one of our "install the extra" messages: a real bug, shown whole
            raise
        print(f"nonstop: error: {_one_line(exc)}", file=sys.stderr)  # an optional dependency is missing
        return 2
    except (OSError, RuntimeError) as exc:  # a dead host, a full or read-only disk, corrupt checkpoints
        if os.environ.get("NONSTOP_TRACEBACK"):
            raise
        print(f"nonstop: error: {_one_line(exc)} (NONSTOP_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1


#: the optional extras a command may need, by the module that is missing
_EXTRA_OF: dict[str, tuple[str, str]] = {
    "torch": ("PyTorch (the learning stack)",
              "pip install 'nonstop[learn]' (CPU-only machine: pip install torch==2.13.0 -e '.[learn]')"),
    "matplotlib": ("matplotlib (the pictures)", "pip install 'nonstop[plot]'"),
    "PIL": ("Pillow (PNG frames)", "pip install 'nonstop[server]'"),
    **{module: ("the server stack (fastapi, uvicorn, websockets, pydantic)", "pip install 'nonstop[server]'")
       for module in ("fastapi", "uvicorn", "websockets", "pydantic", "httpx")},
}  # fmt: skip


def _missing_modules(modules: tuple[str, ...]) -> list[ModuleNotFoundError]:
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


def _needs_line(exc: ImportError) -> str:
    """What a command lacks and how to install it, in one line."""
    extra = _EXTRA_OF.get((exc.name or "").split(".")[0])
    if extra is not None:
        return f"needs {extra[0]}, which is not installed: {extra[1]}"
    return f"cannot be imported here: {_one_line(exc)}"


def _bench_unavailable(why: ImportError) -> int:
    raise why  # `_run` says it in one line, with the extra to install


def _require_extras(args: argparse.Namespace) -> None:
    """Raise ModuleNotFoundError for the first optional package the command will need and lacks."""
    needs = {"train": ("torch",), "sweep": ("torch",), "export": ("torch",), "demo": ("torch", "matplotlib"), "report": ("matplotlib",)}
    wanted = list(needs.get(args.command, ()))
    if args.command == "compare" and getattr(args, "plot", None) != "":
        wanted.append("matplotlib")
    if args.command == "bench" and getattr(args, "bench", None):
        from nonstop.bench import REQUIRES

        wanted += REQUIRES.get(args.bench, ())
        if getattr(args, "plot", None):  # a figure asked for (nstar and nlstar draw one unless --plot '')
            wanted.append("matplotlib")
    for module in wanted:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def _one_line(exc: BaseException) -> str:
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
