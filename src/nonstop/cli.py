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

    from nonstop import demo

    p = sub.add_parser("demo", help="the default job: the paper's headline on realtime Boxing (about 5 minutes)")
    demo.add_arguments(p)
    p.set_defaults(func=cmd_demo)

    from nonstop import compare

    p = sub.add_parser("compare", help="sequential vs unstaggered vs max_time vs exp_time on one env and latency")
    compare.add_arguments(p)
    p.set_defaults(func=compare.run_compare)

    from nonstop import report, trainer

    p = sub.add_parser("train", help="train DQN in a realtime world: staggered inference, asynchronous learners")
    trainer.add_arguments(p)
    p.set_defaults(func=trainer.run_train)


    p = sub.add_parser("report", help="plots and a summary of a training run directory (nonstop train --out RUN)")
    report.add_arguments(p)
    p.set_defaults(func=report.run_report)

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
