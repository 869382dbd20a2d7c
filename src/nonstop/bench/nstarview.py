"""``nonstop bench nstar``'s figures and table: N_I* against τ̄_θ (and against σ) beside the bound, and
the rows as a table (`nonstop.bench.nstar` measures them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def plot(rows: list[dict[str, Any]], path: Path, args: argparse.Namespace, kind: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    sigma0 = rows[0]["sigma"] if rows else None
    jitter0 = rows[0].get("jitter") if rows else None
    rows = [r for r in rows if r["sigma"] == sigma0 and r.get("jitter") == jitter0]
    for name, start in dict.fromkeys((r["scheduler"], r.get("start")) for r in rows):
        # rows without a measured N_I* (above the cap, or cut short by the time budget) have no point
        sub = [r for r in rows if (r["scheduler"], r.get("start")) == (name, start) and r["nstar_measured"] is not None]
        if sub:
            label = f"{name}, {start}" if start else name
            ax.plot(
                [r["tau_theta_ticks"] for r in sub],
                [r["nstar_measured"] for r in sub],
                "o-",
                label=f"{label} (measured)",
            )
    taus = sorted({r["tau_theta_ticks"] for r in rows})
    ax.plot(taus, [r["lower_bound"] for r in rows[: len(taus)]], "k--", alpha=0.6, label="⌈τ̄_θ/τ_M⌉ (bound)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("τ̄_θ (ticks)")
    ax.set_ylabel("N_I* (workers)")
    spread = "" if sigma0 is None else f", σ={sigma0:g}"
    ax.set_title(f"N_I* vs inference time — {args.clock} clock, {kind}{spread}")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_sigma(rows: list[dict[str, Any]], path: Path, kind: str) -> Path:
    """N_I*/bound against σ, one panel per τ̄_θ, Algorithms 1 and 2 beside quantile_hold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = path.with_name(path.stem + "_sigma" + path.suffix)
    taus = sorted({r["tau_theta_ticks"] for r in rows})
    fig, axes = plt.subplots(1, len(taus), figsize=(4.2 * len(taus), 4.0), squeeze=False)
    jitter0 = rows[0].get("jitter") if rows else None
    for ax, tau in zip(axes[0], taus):
        sub = [
            r
            for r in rows
            if r["tau_theta_ticks"] == tau and r["nstar_measured"] is not None and r.get("jitter") == jitter0
        ]
        for name, start in dict.fromkeys((r["scheduler"], r.get("start")) for r in sub):
            mine = sorted(
                (r["sigma"], r["nstar_measured"]) for r in sub if (r["scheduler"], r.get("start")) == (name, start)
            )
            ax.plot([m[0] for m in mine], [m[1] for m in mine], "o-", label=f"{name}, {start}" if start else name)
        bound = sorted({(r["sigma"], r["lower_bound"]) for r in sub})
        ax.plot([b[0] for b in bound], [b[1] for b in bound], "k--", label="⌈τ̄_θ/τ_M⌉ bound")
        ax.plot([b[0] for b in bound], [2 * b[1] for b in bound], "k:", alpha=0.5, label="2 × bound")
        ax.set_yscale("log")
        ax.set_xlabel(f"σ ({kind})")
        ax.set_ylabel("N_I* (workers)")
        ax.set_title(f"τ̄_θ = {tau:g} ticks")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def render(result: dict[str, Any]) -> None:
    from nonstop._console import Console
    from rich.table import Table

    def num(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    table = Table(title=f"N_I* — {result['clock']} clock, {result['latency']} latency")
    p_ret = next((r["return"]["delay_world"]["p_minimax"] for r in result["rows"] if r.get("return")), None)
    for col in (
        "scheduler",
        "start",
        "σ",
        "jitter",
        "τ̄_θ (ticks)",
        "N_I* measured",
        "formula",
        "bound",
        "×bound",
        "inaction at N_I*",
        "at N_I*−1",
        "delay mean",
        "delay p99",
        "threshold",
        f"return, p {p_ret:g}" if p_ret is not None else "return",
        "return, still",
    ):
        table.add_column(col, justify="right")

    def ret(r: dict[str, Any], world: str) -> str:
        got = (r.get("return") or {}).get(world)
        if not got:
            return "—"
        spread = got["return_sd"] if got["return_sd"] is not None else got["return_se"]
        return f"{got['return_mean']:.3f}" + ("" if spread is None else f" ± {spread:.3f}")

    for r in result["rows"]:
        if r["nstar_measured"] is not None:
            measured, ratio = str(r["nstar_measured"]), f"{r['ratio_to_bound']:.2f}"
        elif r.get("stopped_by"):  # cut short by --time-budget or a failed trial: the bracket its trials gave
            low = "" if r["nstar_above"] is None else f"> {r['nstar_above']}"
            high = "" if r["nstar_at_most"] is None else f"≤ {r['nstar_at_most']}"
            why = "time" if r.get("budget_exhausted") else "stopped"
            measured, ratio = " ".join(part for part in (low, high, f"({why})") if part), "—"
        elif r.get("fixed_workers"):  # --at-workers: the inaction at each N
            measured, ratio = " ".join(f"{n}: {v:.1%}" for n, v in r["trials"].items()), "—"
        elif r.get("nstar_above") is not None:  # still inaction at the search cap
            measured, ratio = f"> {r['nstar_above']}", f"> {r['nstar_above'] / r['lower_bound']:.0f}"
        else:
            measured, ratio = f"auto: {r['n_workers_chosen']}", f"{r['ratio_to_bound']:.2f}"
        table.add_row(
            r["scheduler"],
            r.get("start") or "—",
            num(r.get("sigma"), "g"),
            num(r.get("jitter"), "g"),
            f"{r['tau_theta_ticks']:g}",
            measured,
            num(r["nstar_formula"], "d"),
            str(r["lower_bound"]),
            ratio,
            f"{r['inaction_at_nstar']:.2%}",
            "—" if r.get("inaction_at_nstar_minus_1") is None else f"{r['inaction_at_nstar_minus_1']:.2%}",
            num(r["delay_mean_ticks"], ".1f"),
            num(r["delay_p99_ticks"], ".0f"),
            f"{r['max_inaction']:.2%}",
            ret(r, "delay_world"),
            ret(r, "still_world"),
        )
    Console().print(table)
    for key in ("plot", "plot_sigma"):
        if result.get(key):
            print(f"{key}: {result[key]}")
