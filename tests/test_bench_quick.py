"""The realtime benchmarks run end to end in quick mode (smaller still, so this file stays under a
minute) and return what they document. Speed targets are *not* asserted here: they live in the
benchmarks' own output (BENCHMARKS.md), never in timed unit tests."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from nonstop.bench import channels, clock, host, ticklog
from nonstop.bench.channels import our_segments

pytestmark = pytest.mark.slow


def _run(module, argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    args.quick = True
    args.json = True
    return module.run(args)


def _check(result: dict, keys: tuple[str, ...], bench: str) -> None:
    assert result["bench"] == bench
    missing = [k for k in keys if k not in result]
    assert not missing, f"{bench}: result lacks {missing}"
    for key in keys:
        value = result[key]
        assert isinstance(value, (bool, int, float)), f"{bench}: {key} is {type(value).__name__}"
        assert isinstance(value, bool) or math.isfinite(value), f"{bench}: {key} = {value}"
    assert isinstance(result["meets_target"], bool)
    assert isinstance(result["machine"], dict) and result["machine"]["cpu_count"]
    json.loads(json.dumps(result, allow_nan=False))  # one JSON object, no NaN/inf anywhere


@pytest.fixture
def no_leftover_segments():
    before = our_segments()
    yield
    leaked = set(our_segments()) - set(before)
    assert not leaked, f"a benchmark left nonstop_* segments in /dev/shm: {sorted(leaked)}"


@pytest.mark.parametrize("module", [clock, host, channels, ticklog], ids=["clock", "host", "channels", "ticklog"])
def test_help_renders(module) -> None:
    """``nonstop bench --help`` %-formats every DESCRIPTION and option help."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    module.add_arguments(sub.add_parser("bench", help=module.DESCRIPTION))
    assert module.DESCRIPTION.split()[0] in parser.format_help()
    assert sub.choices["bench"].format_help()


def test_clock_quick(no_leftover_segments) -> None:
    result = _run(clock, ["--seconds", "1.5"])
    _check(result, clock.RESULT_KEYS, "clock")
    assert result["wall_ticks"] > 0 and result["plain_sleep_ticks"] > 0
    assert result["shm_leftovers"] == 0
    assert result["per_round"]["wall"][0]["reader_ticks_seen"] > 0  # the reader really polled


def test_host_quick(no_leftover_segments) -> None:
    result = _run(host, ["--steps", "300", "--repeats", "2"])
    _check(result, host.RESULT_KEYS, "host")
    assert result["steps"] == 300 and result["ratio_pairs"]["n"] == 2


def test_channels_quick(no_leftover_segments) -> None:
    result = _run(channels, ["--round-trips", "300", "--warmup", "50"])
    _check(result, channels.RESULT_KEYS, "channels")
    assert result["errors"] == 0  # every reply carried what was sent
    assert result["shm_leftovers"] == 0
    assert result["stats_us"]["slot"]["n"] == 300


@pytest.mark.wall  # health_after: the server's sessions kept within half a second of real time (CI's wall pass)
def test_server_quick(no_leftover_segments) -> None:
    """Quick `nonstop bench server`: a real server process, 4 sessions, one client each."""
    pytest.importorskip("fastapi")
    from nonstop.bench import server

    result = _run(server, ["--seconds", "2", "--ramp", "0.2"])
    _check(result, server.RESULT_KEYS, "server")
    assert result["sessions"] == 4 and result["health_after"] == "healthy"
    assert result["ticks_per_s"] > 0 and result["reset_ms"]["n"] == 4


def test_ticklog_quick(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the streamed variant's directory, removed after
    result = _run(ticklog, ["--rows", "140000", "--rss-at", "70000", "--rate", "0"])
    _check(result, ticklog.RESULT_KEYS, "ticklog")
    assert set(result["variants"]) == {"floor", "doubling", "chunked", "streamed"}
    streamed = result["variants"]["streamed"]
    assert streamed["append_us"]["n"] == 140000 and streamed["seals"] == 2  # rows 65,537 and 131,073
    assert streamed["chunk_files"] == 3  # two full chunks and the partial last one, flushed by close()
    assert result["variants"]["doubling"]["seals"] == 6  # capacity 4096 doubled at rows 4,097 … 131,073
    assert not list(tmp_path.iterdir())  # the temporary log directory was removed


def test_ticklog_quick_with_many_seats(tmp_path, monkeypatch) -> None:
    """``--seats``: each append is a tick of every seat; the result says what a tick costs in memory."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    result = _run(ticklog, ["--seats", "50", "--rows", "6000", "--rss-at", "2000", "--rate", "0"])
    _check(result, ticklog.RESULT_KEYS, "ticklog")
    assert set(result["variants"]) == {"floor", "chunked", "streamed"}  # no doubling baseline unless named
    assert result["seats"] == 50 and result["row_bytes"] == (9 + 9 * 50) * 8 and result["one_seat_row_bytes"] == 144
    streamed = result["variants"]["streamed"]
    assert result["chunk_rows"] == streamed["chunk_rows"] == 2570  # a one-seat chunk's 9.4 MB, in rows of 50 seats
    assert streamed["seals"] == 2 and streamed["chunk_files"] == 3
    assert result["bytes_per_tick"] > 0 and result["memory_per_tick_vs_one_seat"] > 0


@pytest.mark.wall
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time (tests/test_ray_backend.py)
def test_ray_quick_breaks_tau_theta_down(monkeypatch) -> None:
    """`nonstop bench ray` on a small local cluster: each part of the actors' τ_θ, the machine's CPU use
    during their world, and a diagnosis whose every cause carries its figure (issue 23)."""
    pytest.importorskip("ray", reason="the Ray backend needs the [ray] extra")
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from nonstop.bench import ray as bench_ray

    result = _run(bench_ray, ["--k", "0.5", "--calls", "10", "--seconds", "1", "--passes", "2", "--probe-calls", "3"])
    json.dumps(result, allow_nan=False)  # one JSON object, no NaN/inf anywhere
    parts = result["tau_theta_parts"]
    for name in ("world", "forward_in_actor", "ray_overhead", "wait_before_call"):
        assert parts[name]["n"] > 0 and parts[name]["p50_ms"] >= 0, name
    assert parts["forward_quiet"]["n"] == parts["forward_together"]["n"] == 2 * 3  # 2 actors, 3 calls each
    assert parts["world"]["mean_ms"] >= parts["forward_in_actor"]["mean_ms"]  # the call is part of τ_θ
    world = result["ray_actor_per_node"]
    assert world["actor_niceness"] == [0] and world["nodes_used"] == 2 and world["actors_per_node"] == 1
    assert world["cpu"]["cores"] >= 1 and world["cpu"]["idle_cores"] is not None
    assert all(c["text"] and "share_of_tau_theta" in c or c["cause"] == "unexplained" for c in result["diagnosis"])
    assert result["machine_limit"] is None or any(c["cause"] == "cpu_contention" for c in result["diagnosis"])
