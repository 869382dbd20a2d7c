"""``nonstop bench NAME``: one benchmark, a table on screen or one JSON object on the last line (``--json``).

Each benchmark is a module of `nonstop.bench` (listed in `nonstop.bench.BENCHMARKS`) with
``add_arguments``, ``run(args)`` and, where its table is its own, ``render``. A benchmark whose
optional package is missing is still listed, marked with the extra to install.
"""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from nonstop.commands._extras import missing_modules, needs_line

__all__ = ["HELP", "add_arguments", "run", "run_bench"]

HELP = "run a benchmark (JSON on the last line with --json)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nonstop.bench import BENCHMARKS
    from nonstop.bench import REQUIRES as BENCH_REQUIRES

    bench_sub = p.add_subparsers(dest="bench", metavar="NAME")
    for name, module_name in BENCHMARKS.items():
        missing: list[ImportError] = list(missing_modules(BENCH_REQUIRES.get(name, ())))
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # offered all the same: running it names what to install
            missing = missing or [exc]
            module = None
        if missing:
            description = getattr(module, "DESCRIPTION", None)
            what = f"{description} — " if description else ""
            line = f"{what}[unavailable: {needs_line(missing[0])}]"
            bp = bench_sub.add_parser(name, help=line, description=line)
            bp.set_defaults(func=lambda a, why=missing[0]: _bench_unavailable(why), bench_unavailable=True)
            continue
        assert module is not None  # imported: nothing it needs is missing
        bp = bench_sub.add_parser(name, help=getattr(module, "DESCRIPTION", ""))
        bp.add_argument("--json", action="store_true", help="print one JSON object on the last line")
        bp.add_argument("--quick", action="store_true", help="a short run (~30 s on 2 cores), as CI does")
        module.add_arguments(bp)
        bp.set_defaults(func=lambda a, m=module: run_bench(a), bench_module=module)

    def bench_usage(a: argparse.Namespace) -> int:  # `nonstop bench` without a benchmark
        p.print_help()
        return 2

    p.set_defaults(func=bench_usage)


def run(args: argparse.Namespace) -> int:
    return int(args.func(args) or 0)


def _bench_unavailable(why: ImportError) -> int:
    raise why  # the CLI says it in one line, with the extra to install


def run_bench(args: argparse.Namespace) -> int:
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
