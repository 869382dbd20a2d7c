"""The ``nonstop`` command."""

from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
from typing import Any

__all__ = ["main"]


def _sigterm_to_exit(*_: Any) -> None:
    # SIGTERM unwinds like Ctrl-C does, so every `finally` reaps and unlinks.
    raise SystemExit(143)


# ----------------------------------------------------------------------------- envs


def cmd_envs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from nonstop.envs import list_envs

    envs = list_envs()
    if args.json:
        print(json.dumps([{"id": e.env_id, "family": e.family, "tick_hz": e.tick_hz, "default": e.default_beta,
                           "description": e.description} for e in envs]))  # fmt: skip
        return 0
    table = Table(title="Registered realtime environments")
    for col in ("id", "family", "tick Hz", "β default", "description"):
        table.add_column(col)
    for e in envs:
        table.add_row(e.env_id, e.family, f"{e.tick_hz:g}", e.default_beta, e.description)
    Console().print(table)
    print("Any ALE game also works as ALE/<Game>-v5 (paper defaults: 60 Hz, no frame skip, no sticky actions).")
    return 0


# ----------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from nonstop.bench.common import machine_info

    module = args.bench_module
    result = module.run(args)
    result = {"bench": args.bench, "machine": machine_info(), "quick": bool(args.quick), **result}
    if args.json:
        print(json.dumps(result, default=_json_default))
    else:
        render = getattr(module, "render", None)
        if render is not None:
            render(result)
        else:
            _render_flat(result)
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
    from rich.console import Console
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
    from nonstop.server.app import serve

    return serve(
        args.env or ["Boxing"], host=args.host, port=args.port, token=args.token, max_sessions=args.max_sessions,
        idle_timeout=args.idle_timeout, replay_dir=args.replay_dir, tick_threads=args.tick_threads,
        warm_envs=args.warm_envs, switch_interval=args.switch_interval, log_level=args.log_level,
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

    parser = argparse.ArgumentParser(
        prog="nonstop",
        description="Realtime RL: worlds that never wait, staggered asynchronous inference, realtime metrics.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("envs", help="list the registered realtime environments")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_envs)

    p = sub.add_parser("demo", help="the default job: a fast and a slow agent on realtime Boxing, side by side")
    p.add_argument("--env", default="Boxing", help="env id (default Boxing)")
    p.add_argument("--seconds", type=float, default=10.0, help="how long each agent plays, in world seconds")
    p.add_argument("--slow-ticks", type=float, default=6.0, help="the slow agent's inference time, in ticks")
    p.add_argument("--clock", choices=("wall", "virtual"), default="wall")
    p.add_argument("--save", metavar="DIR", help="save both tick logs (.npz) into DIR")
    p.set_defaults(func=cmd_demo)

    from nonstop import compare

    p = sub.add_parser("compare", help="sequential vs unstaggered vs max_time vs exp_time on one env and latency")
    compare.add_arguments(p)
    p.set_defaults(func=compare.run_compare)

    p = sub.add_parser("serve", help="serve realtime worlds over WebSocket (OpenEnv protocol + realtime verbs)")
    p.add_argument("--env", action="append", help="env id to serve (repeat for several; first is the default; Boxing)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' on every request and socket")
    p.add_argument("--max-sessions", type=int, default=64)
    p.add_argument("--idle-timeout", type=float, default=60.0, help="end a session after this many silent seconds")
    p.add_argument("--replay-dir", help="record a replay of every session into this directory")
    p.add_argument("--tick-threads", type=int, default=2, help="threads of the tick pool")
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
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # a benchmark whose optional dependency is missing is not offered
        bp = bench_sub.add_parser(name, help=getattr(module, "DESCRIPTION", ""))
        bp.add_argument("--json", action="store_true", help="print one JSON object on the last line")
        bp.add_argument("--quick", action="store_true", help="a short run (~30 s on 2 cores), as CI does")
        module.add_arguments(bp)
        bp.set_defaults(func=lambda a, m=module: cmd_bench(a, parser), bench_module=module)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    return parser


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _sigterm_to_exit)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted: stopped cleanly", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"nonstop: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
