"""`nonstop bench server --team`: one client holds a whole team over a real server process, one
message a tick each way, and the bench reports each message's size and latency beside the host's
lateness. Speed is not asserted here (the bench's own output says it); what is checked is that the
figures are measured and mean what they say."""

from __future__ import annotations

import argparse
import json
import math

import pytest

pytestmark = pytest.mark.slow


def _run(argv: list[str]) -> dict:
    from nonstop.bench import server

    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args(argv)
    args.quick, args.json = True, True
    return server.run(args)


def test_bench_server_team_measures_one_message_a_tick_each_way(no_shm_leak) -> None:
    pytest.importorskip("magent2")
    from nonstop.bench.serverteam import TEAM_RESULT_KEYS

    # the 162-agent battle (81 a team) keeps this short; the bench's default is the 1,058-agent one
    result = _run(["--team", "--env", "multi/battle", "--seats", "80", "--seconds", "2"])
    assert result["mode"] == "team" and result["team"] == "red"
    assert result["team_seats"] == 81 and result["world_seats"] == 162
    for key in TEAM_RESULT_KEYS:
        value = result[key]
        assert isinstance(value, (bool, int, float)) and (isinstance(value, bool) or math.isfinite(value)), key
    assert result["messages"] >= 5 and 0 < result["messages_per_tick"] <= 1.05  # never more than one a tick
    # every step carries 81 actions and every reply 81 seats' counters (encoding none: no windows)
    assert 81 * 8 < result["request_bytes_p50"] < 81 * 40 and result["reply_bytes_p50"] > 81 * 150
    assert result["round_trip_ms_p50"] > 0 and result["reply_lag_ms_p50"] > -1.0  # replies come after their tick
    assert result["state_reply_bytes_all"] > result["state_reply_bytes_team"] > 0  # the team's rows, not the world's
    assert result["health_after"] == "healthy"
    json.loads(json.dumps(result, allow_nan=False))


def test_bench_server_team_refuses_a_team_larger_than_the_worlds(no_shm_leak) -> None:
    pytest.importorskip("magent2")
    with pytest.raises(ValueError, match="team red has 81 seats"):
        _run(["--team", "--env", "multi/battle", "--seats", "500", "--seconds", "1"])
