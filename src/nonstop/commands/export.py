"""``nonstop export RUN``: a run's policy as TorchScript + safetensors + policy.json (`nonstop.experiment.export` writes them)."""

from __future__ import annotations

import argparse

from nonstop.experiment.export import (
    PROGRAM,
    WEIGHTS,
    META,
    export_policy,
)

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run directory written by `nonstop train --out RUN`")
    parser.add_argument(
        "--out", metavar="DIR", help=f"where to write {PROGRAM}, {WEIGHTS} and {META} (default RUN/export)"
    )
    parser.add_argument(
        "--trust-module",
        action="store_true",
        help="import the module the run's world names (module:Id), from PYTHONPATH; without it such a run is "
        "refused (a file runs no code)",
    )


def run_export(args: argparse.Namespace) -> int:
    result = export_policy(args.run, args.out, trust_module=args.trust_module)
    for what, path in result["written"].items():
        print(f"{what}: {path}")
    return 0


HELP = "a run's policy as a TorchScript program (preprocessing inside), safetensors weights and a JSON recipe: plain torch runs it"


run = run_export
