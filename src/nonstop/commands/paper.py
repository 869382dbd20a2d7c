"""``nonstop paper FIG``: one of the paper's figures behind one command (`nonstop.studies.paper`
maps each figure to a sweep or a bench, runs it and derives the figure; this module parses and prints)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["HELP", "add_arguments", "run"]

HELP = "make one of the paper's figures (4-8, 11-14) at a budget: PNG, CSV and JSON in --out"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "fig",
        nargs="?",
        type=int,
        default=None,
        metavar="FIG",
        help="the paper's figure: 4, 5, 6, 7, 8, 11, 12, 13 or 14 (`--list` says what each is)",
    )
    p.add_argument(
        "--list", action="store_true", help="list each figure, what it shows, its command and cost per budget"
    )
    p.add_argument(
        "--budget",
        choices=("tiny", "small", "paper"),
        default="tiny",
        help="tiny: a smoke test of the pipeline (default); small: the real games briefly; paper: the paper's settings",
    )
    p.add_argument("--out", default="runs/paper", help="where the figure's PNG, CSV and JSON go (default runs/paper)")
    p.add_argument(
        "--game-arg",
        action="append",
        default=[],
        metavar="GAME:KEY=VALUE",
        help="a Game Boy game's ROM or save state, e.g. PokemonBattle:state=battle.state or Tetris:rom=PATH",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="HOST:PORT",
        help="Figure 8: the Ray cluster its learners run on (default: a local 127.0.0.1 cluster)",
    )
    from nonstop.inference.device import add_device_arguments

    add_device_arguments(p, what="the figure's models")
    p.epilog = (
        "--device and --dtype reach every sweep cell of Figures 4-6 and 11-13; Figure 8's learners take "
        "--device only (they update in fp32); Figure 7's theory world runs no model."
    )
    p.add_argument("--json", action="store_true", help="one JSON object on the last line of stdout")


def run(args: argparse.Namespace) -> int:
    from nonstop.commands.sweep import _game_args
    from nonstop.studies.paper import MissingInput, NotOffered, figure, figure_listing, run_figure

    if args.list:
        return _print_listing(figure_listing(), as_json=args.json)
    if args.fig is None:
        raise ValueError("give a figure (nonstop paper 6) or --list")
    fig = figure(args.fig)
    extra = ["--ray-address", args.ray_address] if args.ray_address and fig.kind == "nlstar" else []
    extra += _placement(fig.kind, args.device, args.dtype)
    try:
        document = run_figure(args.fig, args.budget, Path(args.out), game_args=_game_args(args.game_arg), extra=extra)
    except (MissingInput, NotOffered) as why:
        print(f"nonstop paper {args.fig}: {why}", file=sys.stderr)
        if args.json:
            print(
                json.dumps(
                    {
                        "figure": args.fig,
                        "budget": args.budget,
                        "offered": not isinstance(why, NotOffered),
                        "missing": str(why) if isinstance(why, MissingInput) else None,
                        "not_offered": str(why) if isinstance(why, NotOffered) else None,
                    }
                )
            )
        return 2
    _print_rows(document)
    if args.json:
        print(json.dumps(document, default=str))
    return 0 if document["returncode"] == 0 else 1


def _placement(kind: str, device: str, dtype: str | None) -> list[str]:
    """The --device/--dtype flags the figure's command takes: a sweep both, bench nlstar the device
    (its learners update in fp32), bench nstar neither (its theory world runs no model)."""
    from nonstop.inference.device import resolve_device

    if kind == "nstar":
        return []
    if device != "cpu":
        resolve_device(device)  # a device torch cannot find: one line here, not a failed child later
    out = ["--device", device] if device != "cpu" else []
    if dtype and kind != "nlstar":
        out += ["--dtype", dtype]
    return out


def _print_listing(listing: list[dict[str, Any]], *, as_json: bool) -> int:
    from nonstop._console import Console
    from rich.table import Table

    table = Table(
        "fig",
        "shows",
        "command (tiny / small / paper)",
        "cost (tiny / small / paper)",
        title="the paper's figures: nonstop paper FIG --budget tiny|small|paper",
        show_lines=True,
    )
    for f in listing:
        commands = "\n".join(f"{b}: {c}" for b, c in f["commands"].items()) or f"not offered: {f['why_not']}"
        costs = "\n".join(f"{b}: {c}" for b, c in f["costs"].items()) or "—"
        table.add_row(str(f["figure"]), f["shows"], commands, costs)
    Console(stderr=as_json).print(table)
    if as_json:
        print(json.dumps({"figures": listing}))
    return 0


def _print_rows(document: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    rows = document["rows"]
    columns = [c for c in (rows[0] if rows else {}) if any(r.get(c) is not None for r in rows)]
    table = Table(
        *columns,
        title=f"Figure {document['figure']} (--budget {document['budget']}): {document['shows']}",
        caption=f"the paper: {document['paper']}",
    )
    for r in rows:
        table.add_row(*[_cell(r.get(c)) for c in columns])
    console = Console(stderr=True)
    console.print(table)
    console.print(
        f"{document['png']} · {document['csv']} · took {document['wall_s']:.0f} s · {document['command']}", markup=False
    )


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
