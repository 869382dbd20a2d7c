"""How the tick logs in this folder were made: with nonstop's code from before the tick log kept
seats as (ticks x seats) blocks (main at ba31506, every seat i >= 1 a set of named columns
``seat{i}_source``, ``seat{i}_delay``, ...). Run it only with that code on the path:

    PYTHONPATH=/path/to/old/src python tests/data/ticklog-named-seats/make.py

It writes ``duel/`` (a two-seat log streamed in chunks of 16 rows), ``duel.npz`` (the same log in
one file, `TickLog.save`), ``solo/`` (a one-seat log in chunks of 8 rows) and ``expected.json``:
what that old code read back from each (every column, every seat's summary), which
tests/test_ticklog_seats.py compares with what today's code reads.
"""

import json
import shutil
from pathlib import Path

from nonstop.realtime.host import Session
from nonstop.realtime.ticklog import TickLog

HERE = Path(__file__).parent
TICK = 1 / 60


def describe(log: TickLog) -> dict:
    out = {
        "rows": len(log),
        "seats": log.seats,
        "seat_names": log.seat_names,
        "columns": {
            name: values.tolist()
            for name, values in log.columns().items()
            if name not in ("step_s", "reset_s", "time", "lateness", "deadline")
        },
        "summary": log.summary(),
    }
    out["seat_summaries"] = {name: log.seat(name).summary() for name in log.seat_names}
    return out


def main() -> None:
    for name in ("duel", "solo", "duel.npz", "expected.json"):
        path = HERE / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    kwargs = {"rounds": 2, "min_wait": 4, "max_wait": 6, "timeout": 5, "holster": 0}
    with Session(
        "multi/duel",
        clock="virtual",
        seed=3,
        env_kwargs=kwargs,
        default={"first_0": "repeat"},
        log_dir=HERE / "duel",
        log_chunk_rows=16,
    ) as duel:
        for t in range(50):
            if t % 7 == 3:
                duel.queues[1].submit(1, obs_tick=duel.slots[1].read().tick, episode=duel.slots[1].read().episode)
            if t % 5 == 1:
                duel.queues[0].submit(t % 2, obs_tick=duel.slots[0].read().tick, episode=duel.slots[0].read().episode)
            duel.run_for(TICK)
    duel.tick_log.save(HERE / "duel.npz")
    with Session("theory/inaction", clock="virtual", seed=0, log_dir=HERE / "solo", log_chunk_rows=8) as solo:
        for t in range(20):
            if t % 3 == 0:
                solo.queue.submit(1, obs_tick=solo.slot.read().tick, episode=solo.slot.read().episode)
            solo.run_for(TICK)
    expected = {
        "duel": describe(TickLog.open(HERE / "duel")),
        "duel.npz": describe(TickLog.load(HERE / "duel.npz")),
        "solo": describe(TickLog.open(HERE / "solo")),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
