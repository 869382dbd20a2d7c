"""Benchmarks: ``nonstop bench NAME [--json] [--quick]``.

Each benchmark is a module in this package exposing

* ``DESCRIPTION: str`` — one line for ``nonstop bench --help``;
* ``add_arguments(parser)`` — its own options (``--json``/``--quick`` are added for it);
* ``run(args) -> dict`` — measures and returns the figures (JSON-serialisable);
* ``render(result) -> None`` (optional) — a human table; the default prints key/value rows.

The CLI adds ``"bench"`` and ``"machine"`` to the result and, with ``--json``,
prints it as one JSON object on the last line of stdout.

A benchmark that needs an optional package (`REQUIRES`; a figure written with ``--plot`` needs
matplotlib) is listed whether or not it is installed: when it is missing, ``nonstop bench --help``
says which extra installs it, and running the benchmark says so in one line (exit 2).
"""

BENCHMARKS = {
    "clock": "nonstop.bench.clock",
    "host": "nonstop.bench.host",
    "channels": "nonstop.bench.channels",
    "nstar": "nonstop.bench.nstar",
    "lanes": "nonstop.bench.lanes",
    "gpu": "nonstop.bench.gpu",
    "models": "nonstop.bench.models",
    "regret": "nonstop.bench.regret",
    "return": "nonstop.bench.returns",
    "learn": "nonstop.bench.learn",
    "nlstar": "nonstop.bench.nlstar",
    "server": "nonstop.bench.server",
    "ticklog": "nonstop.bench.ticklog",
    "weights": "nonstop.bench.weights",
    "duel": "nonstop.bench.duel",
    "ray": "nonstop.bench.ray",
    "delay": "nonstop.bench.delay",
    "seats": "nonstop.bench.seats",
    "reference": "nonstop.bench.reference",
    "freerun": "nonstop.bench.freerun",
}

#: The optional packages (top-level modules) a benchmark needs beyond the base install.
REQUIRES = {
    "models": ("torch",),
    "gpu": ("torch",),
    "learn": ("torch",),
    "nlstar": ("torch",),
    "weights": ("torch",),
    "delay": ("torch",),
    "seats": ("torch", "magent2"),
    "freerun": ("magent2",),  # and PufferLib for the comparison: `freerun` says how to install it
    "reference": ("torch", "stable_baselines3"),
    "server": ("fastapi", "uvicorn", "websockets", "pydantic"),
}
