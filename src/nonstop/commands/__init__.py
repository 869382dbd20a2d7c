"""The ``nonstop`` verbs, one module each: parse, validate, call the library, print.

Nothing in the library imports this package; `nonstop.cli` finds the verb here (`VERBS`).
"""

from typing import Final

__all__ = ["VERBS"]

#: verb -> its module under nonstop.commands (each has ``HELP``, ``add_arguments(parser)`` and ``run(args)``)
VERBS: Final = {
    "envs": "envs",
    "demo": "demo",
    "gameboy": "gameboy",
    "compare": "compare",
    "train": "train",
    "sweep": "sweep",
    "plan": "plan",
    "tolerance": "tolerance",
    "report": "report",
    "export": "export",
    "serve": "serve",
    "mcp": "mcp",
    "replay": "replay",
    "bench": "bench",
    "paper": "paper",
}
