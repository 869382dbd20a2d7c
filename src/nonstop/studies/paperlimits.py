"""Figures 7 and 8 of `nonstop paper` from their benches' rows: N_I* against inference time and model size
(``bench nstar``), N_L* against learning time and model size (``bench nlstar``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from nonstop.studies.delays import PAPER_SIZES

__all__ = ["nlstar_figure", "nstar_figure"]

#: the paper's Game Boy inference ticks → the size they stand for
_TICKS_TO_SIZE: Final = {float(v[2]): v[0] for v in PAPER_SIZES.values()} | {
    float(v[1]): v[0] for v in PAPER_SIZES.values()
}
_SIZE_PARAMS: Final = {"1M": 1e6, "10M": 1e7, "100M": 1e8, "1B": 1e9}
_ALGORITHM: Final = {"max_time": "Algorithm 1", "exp_time": "Algorithm 2"}


def nstar_figure(fig: Any, budget: str, source: dict[str, Any], out: Path) -> tuple[list[dict[str, Any]], Path | None]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [_nstar_row(r) for r in source.get("rows", [])]
    fig_, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    searched = [r for r in rows if r["part"] == "search"]
    keys = sorted({(r["scheduler"], r["epsilon"], r["start"]) for r in searched}, key=str)
    for (name, eps, start), marker in zip(keys, "os^vD<>p*hx"):
        sel = sorted(
            (
                r
                for r in searched
                if (r["scheduler"], r["epsilon"], r["start"]) == (name, eps, start) and r["nstar_measured"]
            ),
            key=lambda r: r["tau_theta_ticks"],
        )
        label = f"{_ALGORITHM.get(name, name)}, ε={eps:g}, {start}"
        left.plot([r["tau_theta_ticks"] for r in sel], [r["nstar_measured"] for r in sel], marker=marker, label=label)
        sized = [r for r in sel if r["size"]]
        right.plot(
            [_SIZE_PARAMS[r["size"]] for r in sized], [r["nstar_measured"] for r in sized], marker=marker, label=label
        )
    left.set_xlabel("mean inference time τ̄_θ (ticks)")
    right.set_xlabel("model size |θ| (the paper's inference ticks per size)")
    return rows, _save_pair(
        fig_,
        (left, right),
        "N_I*",
        f"Figure 7 (nonstop paper --budget {budget}): workers to act every tick",
        out / "fig7.png",
        legend_size=8,
    )


def _nstar_row(r: dict[str, Any]) -> dict[str, Any]:
    """One of Figure 7's rows: a search (``part`` search or jitter: N_I* as the row starts) or a
    fixed-N trial set on one clock (``part`` clocks: the inaction at each N)."""
    fixed = bool(r.get("fixed_workers"))
    measured, formula = r.get("nstar_measured"), r.get("nstar_formula")
    return {
        "part": r.get("part", "search"),
        "clock": r.get("clock"),
        "scheduler": r["scheduler"],
        "algorithm": _ALGORITHM.get(r["scheduler"], r["scheduler"]),
        # the authors' start (τ̂ from the declared maximum, workers staggered by it) or the cold start (0)
        "start": r.get("start"),
        "epsilon": r.get("sigma"),
        "jitter": r.get("jitter"),
        "tau_theta_ticks": r["tau_theta_ticks"],
        "size": _TICKS_TO_SIZE.get(float(r["tau_theta_ticks"])),
        "nstar_measured": measured,
        "nstar_formula": formula,
        "lower_bound": r.get("lower_bound"),
        "within_formula_plus_1": None
        if fixed
        else (measured is not None and formula is not None and measured <= formula + 1),
        "tau_theta_max_ticks": r.get("tau_theta_max_ticks"),
        "inaction_at_n": {int(n): v for n, v in r["trials"].items()} if fixed else None,
    }


def nlstar_figure(fig: Any, budget: str, source: dict[str, Any], out: Path) -> tuple[list[dict[str, Any]], Path | None]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        {
            "k": r["k"],
            "batch": r["batch"],
            "params": r["params"],
            "tau_l_over_tau_m": r["tau_l_over_tau_m"],
            "nlstar_theory": r["nlstar_theory"],
            "nlstar_measured": r["nlstar_measured"],
            "measured_up_to": source.get("max_learners"),
            "backend": source.get("backend"),
            "best_transitions_per_s": max(map(float, (r.get("throughput_transitions_per_s") or {"0": 0}).values())),
        }
        for r in source.get("rows", [])
    ]
    fig_, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for batch in sorted({r["batch"] for r in rows}):
        sel = sorted((r for r in rows if r["batch"] == batch), key=lambda r: r["params"])
        for ax, x in ((left, "tau_l_over_tau_m"), (right, "params")):
            (line,) = ax.plot([r[x] for r in sel], [r["nlstar_theory"] for r in sel], "--", label=f"theory, B={batch}")
            meas = [(r[x], r["nlstar_measured"]) for r in sel if r["nlstar_measured"] is not None]
            if meas:
                ax.plot(
                    *zip(*meas),
                    "s",
                    color=line.get_color(),
                    fillstyle="none",
                    markersize=9,
                    label=f"measured, B={batch}",
                )
            above = [(r[x], r["measured_up_to"]) for r in sel if r["nlstar_measured"] is None and r["measured_up_to"]]
            if above:  # none of the learners measured kept up: N_L* is above the most tried
                ax.plot(*zip(*above), "^", color=line.get_color(), markersize=9, label=f"measured > N, B={batch}")
    left.set_xlabel("τ_L per transition / τ_M")
    right.set_xlabel("model size |θ|")
    return rows, _save_pair(
        fig_,
        (left, right),
        "N_L*",
        f"Figure 8 (nonstop paper --budget {budget}): learners to learn from every transition at 60 Hz",
        out / "fig8.png",
        legend_size=7,
    )


def _save_pair(fig_: Any, axes: tuple[Any, Any], ylabel: str, title: str, path: Path, *, legend_size: int) -> Path:
    """Finish a two-panel figure, against an inference or learning time (left) and against model size
    (right, log scale), and save it."""
    import matplotlib.pyplot as plt

    axes[1].set_xscale("log")
    for ax in axes:
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)
    fig_.suptitle(title, fontsize=10)
    fig_.tight_layout()
    fig_.savefig(path, dpi=110)
    plt.close(fig_)
    return path
