"""Thousands of bad messages at the server: every one gets an error reply with a code, the
connection stays open, no handler crashes, no HTTP request gets a 5xx, and another client's
session keeps ticking throughout (docs/design.md §4; the issue's fault-tolerance contract)."""

from __future__ import annotations

import json
import logging
import time

import pytest

pytest.importorskip("fastapi")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nonstop.server.app import create_app  # noqa: E402
from nonstop.server.protocol import MAX_MESSAGE_BYTES, ErrorCode, ProtocolError, parse_message  # noqa: E402
from nonstop.server.sessions import SessionManager  # noqa: E402

pytestmark = pytest.mark.wall
CODES = {c.value for c in ErrorCode}
TYPES = ["reset", "step", "state", "close", "observe", "act", "wait", "subscribe", "mcp", "", "STEP", None, 3]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "action",
        "obs_tick",
        "ticks",
        "until",
        "every",
        "encoding",
        "seed",
        "env",
        "default",
        "queue_mode",
        "record",
        "max_ticks",
        "episode_id",
        "metadata",
        "junk",
    ]
)
typed = st.builds(
    lambda t, data, extra: {"type": t, "data": data, **extra},
    st.sampled_from(TYPES),
    st.dictionaries(field_names, json_values, max_size=4) | json_values,
    st.dictionaries(st.sampled_from(["extra", "id", "data2"]), json_values, max_size=1),
)
#: integers past int64 and past every float (10**400: numpy cannot convert it; json keeps it exact)
huge_ints = st.integers(min_value=-(10**400), max_value=10**400) | st.sampled_from(
    [10**400, -(10**400), 2**64, 2**1024]
)
numbers = st.integers(min_value=-(2**70), max_value=2**70) | huge_ints | st.floats()  # floats: inf and nan too
bad_actions = st.builds(
    lambda t, a, tick: {"type": t, "data": {"action": a, **({"obs_tick": tick} if tick is not None else {})}},
    st.sampled_from(["act", "step"]),
    numbers | st.lists(numbers, max_size=3) | st.lists(st.lists(numbers, max_size=2), max_size=2) | st.text(),
    st.none() | st.integers(min_value=-5, max_value=10**12),
)
raw_text = st.text(max_size=200) | st.binary(max_size=64).map(lambda b: b.decode("latin-1"))
deep = st.integers(min_value=50, max_value=5000).map(lambda n: "[" * n + "]" * n)
oversized = st.integers(min_value=MAX_MESSAGE_BYTES + 1, max_value=MAX_MESSAGE_BYTES * 4).map(
    lambda n: json.dumps({"type": "act", "data": {"action": 1, "pad": "x" * n}})
)
messages = st.one_of(
    typed.map(json.dumps),
    bad_actions.map(json.dumps),
    raw_text,
    deep,
    oversized,
    json_values.map(json.dumps),
)


def _is_harmless_valid(raw: str) -> bool:
    """Messages that are *valid* and would legitimately not get one prompt reply (close ends the
    connection, a long wait waits, reset restarts the session) are not bad input: skip them."""
    try:
        msg = parse_message(raw)
    except ProtocolError:
        return False
    return msg.type not in ("act", "step", "observe", "state")


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def harness(no_shm_leak):
    from fastapi.testclient import TestClient

    manager = SessionManager(["theory/inaction"], max_sessions=4, idle_timeout=600)
    errors = _Errors()
    logging.getLogger("nonstop.server").addHandler(errors)
    try:
        # Starlette's TestClient addresses the app as "testserver" (its WebSocket URL is fixed)
        with TestClient(create_app(manager, allow_hosts=["testserver"])) as http:
            with http.websocket_connect("/ws") as victim, http.websocket_connect("/ws") as fuzz:
                victim.send_json({"type": "reset", "data": {"seed": 0}})
                victim.receive_json()
                fuzz.send_json({"type": "reset", "data": {"seed": 1}})
                fuzz.receive_json()
                yield http, victim, fuzz, manager, errors, []
    finally:
        logging.getLogger("nonstop.server").removeHandler(errors)


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(raw=messages)
def _fuzz_one(harness, raw: str) -> None:
    hypothesis.assume(not _is_harmless_valid(raw))
    fuzz, sent = harness[2], harness[5]
    fuzz.send_text(raw)
    sent.append(raw)
    reply = fuzz.receive_json()
    assert reply["type"] in ("error", "ack", "observation", "state"), reply
    if reply["type"] == "error":
        assert reply["data"]["code"] in CODES and reply["data"]["message"]
        assert reply["data"]["code"] != "EXECUTION_ERROR", reply  # that code means a handler crashed


@pytest.mark.slow
def test_thousands_of_bad_messages_harm_nobody(harness) -> None:
    http, victim, fuzz, manager, errors, sent = harness
    victim.send_json({"type": "observe", "data": {"encoding": "none"}})
    before = victim.receive_json()["data"]["observation"]["tick"]
    t0 = time.monotonic()
    _fuzz_one(harness)
    elapsed = time.monotonic() - t0
    assert len(sent) >= 1500  # thousands, not a handful that survived the filter
    # the fuzzed connection is still open and its session still plays
    fuzz.send_json({"type": "step", "data": {"action": 1}})
    assert fuzz.receive_json()["type"] == "observation"
    # the other client's world kept ticking the whole time (at least half its rate, on a loaded box)
    victim.send_json({"type": "observe", "data": {"encoding": "none"}})
    after = victim.receive_json()["data"]["observation"]
    assert after["lifecycle"] == "running"
    assert after["tick"] - before >= 0.5 * 60 * elapsed
    assert http.get("/health").status_code == 200
    assert not errors.records, [r.getMessage() for r in errors.records[:3]]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.sampled_from(["/health", "/metadata", "/schema", "/sessions", "/replays", "/ws", "/sessions/x"])
    | st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#%"), max_size=30).map(
        lambda p: "/" + p
    ),
    body=st.binary(max_size=256),
)
def _http_one(harness, method: str, path: str, body: bytes) -> None:
    http = harness[0]
    assert http.request(method, path, content=body).status_code < 500


def test_http_fuzz_never_5xx(harness) -> None:
    _http_one(harness)
    assert harness[3].live_count() == 2


@pytest.fixture
def box_harness(no_shm_leak):
    """A Box world (Pendulum's torque, Box(-2, 2, (1,))) for the numbers fuzz: a client fuzzing its
    own session and one HTTP session, the errors logged meanwhile."""
    from fastapi.testclient import TestClient

    manager = SessionManager(["Pendulum-v1"], max_sessions=4, idle_timeout=600)
    errors = _Errors()
    logging.getLogger("nonstop.server").addHandler(errors)
    try:
        with TestClient(create_app(manager, allow_hosts=["testserver"])) as http:
            with http.websocket_connect("/ws") as fuzz:
                fuzz.send_json({"type": "reset", "data": {"seed": 1, "default": "random"}})
                fuzz.receive_json()
                assert http.post("/reset", json={"seed": 2, "default": "random"}).status_code == 200
                yield http, fuzz, errors
    finally:
        logging.getLogger("nonstop.server").removeHandler(errors)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(msg=bad_actions)
def _fuzz_box_one(box_harness, msg: dict) -> None:
    http, fuzz, _ = box_harness
    raw = json.dumps(msg)  # inf and nan travel as Infinity and NaN, which are not JSON
    fuzz.send_text(raw)
    reply = fuzz.receive_json()
    assert reply["type"] in ("error", "ack", "observation"), reply
    if reply["type"] == "error":
        assert reply["data"]["code"] in ("ACTION_OUT_OF_RANGE", "INVALID_JSON", "VALIDATION_ERROR"), reply
    body = json.dumps({"action": {"action": msg["data"]["action"]}})
    stepped = http.post("/step", content=body, headers={"Content-Type": "application/json"})
    assert stepped.status_code in (200, 422), (stepped.status_code, stepped.text)
    if stepped.status_code == 422:
        assert stepped.json()["data"]["code"] in ("ACTION_OUT_OF_RANGE", "INVALID_JSON", "VALIDATION_ERROR")


def test_huge_and_overflowing_numbers_on_a_box_world_are_bad_actions(box_harness) -> None:
    """Integers past every float, infinities and NaN, alone or in lists, over the WebSocket and HTTP:
    each a bad action (422 over HTTP), never a crash, never a traceback in the log."""
    _fuzz_box_one(box_harness)
    http, fuzz, errors = box_harness
    fuzz.send_json({"type": "act", "data": {"action": [0.5]}})
    assert fuzz.receive_json()["type"] == "ack"
    assert http.post("/step", json={"action": {"action": [0.5]}}).status_code == 200
    assert not errors.records, [r.getMessage() for r in errors.records[:3]]
