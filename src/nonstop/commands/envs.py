"""``nonstop envs``: the registered realtime environments, and which Game Boy ROMs were found."""

from __future__ import annotations

import argparse
import json

__all__ = ["HELP", "add_arguments", "run"]

HELP = "list the registered realtime environments"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from nonstop._console import Console
    from rich.table import Table

    from nonstop.envs import list_envs

    from nonstop.envs.gameboy import ROMS_ENV_VAR, pyboy_problem, rom_status

    envs = list_envs()
    roms = {e.env_id: rom_status(e.env_id.removeprefix("GameBoy/")) for e in envs if e.family == "gameboy"}
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": e.env_id,
                        "family": e.family,
                        "tick_hz": e.tick_hz,
                        "default": e.default_beta,
                        "description": e.description,
                        **(
                            {"rom": roms[e.env_id][0], "rom_problem": roms[e.env_id][1] or None}
                            if e.env_id in roms
                            else {}
                        ),
                    }
                    for e in envs
                ]
            )
        )
        return 0
    table = Table(title="Registered realtime environments")
    for col in ("id", "family", "tick Hz", "β default", "description"):
        table.add_column(col)
    for e in envs:
        table.add_row(e.env_id, e.family, f"{e.tick_hz:g}", e.default_beta, e.description)
    Console().print(table)
    print("Any ALE game also works as ALE/<Game>-v5 (paper defaults: 60 Hz, no frame skip, no sticky actions).")
    print(
        "Any Gymnasium id works too (tick_hz=RATE where it declares none), and a world your own module registers as "
        "--env MODULE:ID."
    )
    print(f"Game Boy ROMs (found with rom=PATH or in ${ROMS_ENV_VAR}; nonstop ships none):")
    no_pyboy = pyboy_problem() if roms else ""
    for env_id, (source, problem) in roms.items():
        if source and no_pyboy:
            print(f"  {env_id}: ROM found ({source}) but not playable: {no_pyboy}")
        else:
            print(f"  {env_id}: {'found: ' + source if source else 'missing: ' + problem}")
    return 0
