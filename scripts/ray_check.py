"""The summary of scripts/ray-check: issue 23's Ray targets, each figure beside its threshold.

    python scripts/ray_check.py summary OUT

Reads OUT/steps.tsv and the JSON each step left (OUT/<step>.json: a bench's --json line) and writes
OUT/summary.txt and summary.json, each check PASS, FAIL or SKIP with the reason.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# the loader and the report are gpu_check.py's (this script runs beside it, from scripts/)
from gpu_check import _load, tally, write_report

THRESHOLDS = {
    "ray_1_actor_per_node": "bench ray: a 1.5-tick model acts at every tick on 1 actor per node (meets_target), "
    "no cpu_contention in the diagnosis",
    "ray_2_actors_per_node": "bench ray --actors-per-node 2 --forward-ticks 3.5: a ~4-tick model acts at every tick "
    "on 2 x 2 actors (meets_target)",
    "nstar_on_ray": "bench nstar --backend ray: N_I* = the formula from the world's tau_theta, +-1, at 2, 5 and 12 ticks",
}


def summarize(out: str) -> dict[str, Any]:
    steps: dict[str, str] = {}
    try:
        with open(os.path.join(out, "steps.tsv")) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 2:
                    steps[parts[0]] = parts[1]
    except OSError:
        pass
    checks = []

    def check(name: str, value: Any, ok: bool | None, why: str = "") -> None:
        verdict = "PASS" if ok else "FAIL" if ok is False else f"SKIP: {why or 'no result'}"
        checks.append({"check": name, "value": value, "threshold": THRESHOLDS[name], "verdict": verdict})

    def why(step: str) -> str:
        status = steps.get(step, "not run")
        return status.removeprefix("skipped: ") if status.startswith("skipped") else f"exit {status}, no JSON"

    for name in ("ray_1_actor_per_node", "ray_2_actors_per_node"):
        r = _load(out, name + ".json")
        if not isinstance(r, dict) or "meets_target" not in r:
            check(name, None, None, why(name))
            continue
        met = all(r["meets_target"].values())
        causes = r.get("diagnosis") or []
        check(
            name,
            {"meets_target": r["meets_target"], "diagnosis": causes},
            met and not any("cpu_contention" in str(c) for c in causes),
        )
    r = _load(out, "nstar_on_ray.json")
    if not isinstance(r, dict) or "rows" not in r:
        check("nstar_on_ray", None, None, why("nstar_on_ray"))
    else:
        rows = [
            {
                "scheduler": x["scheduler"],
                "tau_theta_ticks": x["tau_theta_ticks"],
                "nstar": x["nstar_measured"],
                "formula": x["nstar_formula"],
            }
            for x in r["rows"]
            if x.get("nstar_formula") is not None
        ]
        ok = bool(rows) and all(x["nstar"] is not None and abs(x["nstar"] - x["formula"]) <= 1 for x in rows)
        check("nstar_on_ray", rows, ok)
    return tally(steps, checks)


def write_summary(out: str) -> int:
    result = summarize(out)
    return write_report(
        out, result, ["== steps"] + [f"   {name}  {status}" for name, status in result["steps"].items()]
    )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "summary":
        print("usage: ray_check.py summary OUT_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(write_summary(sys.argv[2]))
