"""The live page for several seats: every seat of a session in one view (a grid coloured by
inaction and delay), each team's summary, and the world's frame with its agents marked.

The JSON view (`nonstop.server.live.seats_view`, ``GET /live/sessions/{sid}/seats``) is checked on
the wire; the page (fed by ``/ws/seats/{sid}``: tests/test_live_feed.py) in Debian's chromium driven
by Playwright, as tests/test_live.py does: the two-seat duel (one seat held by a client, the other
played by β) and a generic twelve-seat world of two teams that marks its agents and loses some of
them. The grid is a canvas: the page's ``seatCells()`` on the view says what it drew for each seat.
"""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from test_live import CHROMIUM, CHROMIUM_ARGS, _browser_or_reason

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from nonstop.envs import register
from nonstop.server.app import ServerThread
from nonstop.server.client import Client, http_get
from nonstop.envs.seats import team_of
from nonstop.server.liveworld import team_rows, world_view

pytestmark = pytest.mark.wall
GRID_WORLD = "test/seat-grid"
SIDE = 16  # the grid world's map: SIDE × SIDE cells


class SeatGrid:
    """Twelve agents, ``red_0..5`` and ``blue_0..5``, on a 16 × 16 map: red in the top row, blue in
    the bottom row, each moving one column right per tick. Agent ``red_k`` and ``blue_k`` leave the
    map (no position) after ``10 * (k + 1)`` ticks for k < 2, so four of twelve die early.
    Observation: the agent's (row, col); action: Discrete(2), ignored."""

    metadata: dict[str, Any] = {"name": "seat_grid"}

    def __init__(self) -> None:
        self.possible_agents = [f"{team}_{k}" for team in ("red", "blue") for k in range(6)]
        self.agents = list(self.possible_agents)
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(0, SIDE, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def _pos(self, agent: str) -> tuple[int, int]:
        team, k = agent.split("_")
        return (0 if team == "red" else SIDE - 1, (int(k) * 2 + self.t) % SIDE)

    def _alive(self, agent: str) -> bool:
        k = int(agent.split("_")[1])
        return k >= 2 or self.t < 10 * (k + 1)

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: np.asarray(self._pos(a), np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        zeros = {a: False for a in self.agents}
        return self._obs(), {a: 0.0 for a in self.agents}, zeros, dict(zeros), {a: {} for a in self.agents}

    def seat_positions(self) -> dict[str, tuple[int, int]]:
        return {a: self._pos(a) for a in self.agents if self._alive(a)}

    def live_frame(self) -> np.ndarray:
        frame = np.full((SIDE, SIDE, 3), 30, np.uint8)
        frame[SIDE // 2, :] = 120  # a wall across the middle
        return frame

    def close(self) -> None:
        pass


register(GRID_WORLD, SeatGrid, family="multi", tick_hz=30.0, description="twelve seats on a grid (tests)")


def test_teams_and_world_view_of_a_world() -> None:
    assert [team_of(s) for s in ("red_0", "blue_11", "first_0", "agent")] == ["red", "blue", "first", "agent"]
    world = SeatGrid()
    world.reset()
    for _ in range(15):
        world.step({})
    view = world_view(world)
    assert view["frame"]["shape"] == [SIDE, SIDE, 3]
    assert set(view["positions"]) == set(world.possible_agents) - {"red_0", "blue_0"}  # dead at tick 10
    assert view["positions"]["red_3"] == [0, (3 * 2 + 15) % SIDE]
    rows = [
        {"seat": a, "agent_ticks": 3, "inaction_ticks": 1, "last_delay": 2, "total_reward": 1.0}
        for a in world.possible_agents
    ]
    alive = {a: a in view["positions"] for a in world.possible_agents}
    assert [(t["team"], t["seats"], t["alive"], t["inaction_fraction"]) for t in team_rows(rows, alive)] == [
        ("red", 6, 5, 0.25),
        ("blue", 6, 5, 0.25),
    ]
    assert world_view(gym.make("CartPole-v1")) == {"frame": None, "positions": None}  # offers neither


def test_the_seats_feed_of_a_duel(no_shm_leak) -> None:
    with ServerThread(envs=["multi/duel"], tick_procs=0) as srv, Client(srv.url) as owner:
        sid = owner.reset(seed=1).info["session_id"]
        owner.act(1)
        owner.wait(3)
        feed = http_get(srv.url, f"/live/sessions/{sid}/seats")
        first, second = feed["seats"]
        assert (first["seat"], first["team"], first["held"], first["agent_ticks"]) == ("first_0", "first", True, 1)
        assert (second["seat"], second["held"], second["agent_ticks"]) == ("second_0", False, 0)
        assert second["inaction_fraction"] == 1.0  # nobody holds it: β plays every tick
        assert [t["team"] for t in feed["teams"]] == ["first", "second"] and feed["frame"] is None
        assert "alive" not in first  # the duel offers no positions: nothing is said of who lives


def _watch(url: str, sid: str, check: Any, tmp_path: Any, shot: str) -> dict:
    """Open the page, wait until ``check`` (JS: the view's element -> truthy) holds, return its value."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    http = url.replace("ws://", "http://")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{http}/")
            view = f'article.view[data-session="{sid}"]'
            page.locator(view).wait_for(timeout=60_000)
            probe = f"() => {{ const v = document.querySelector('{view}'); return v && ({check})(v); }}"
            page.wait_for_function(probe, timeout=60_000)
            value = page.evaluate(probe)
            page.screenshot(path=str(tmp_path / shot), full_page=True)
        finally:
            browser.close()
    assert not errors, f"the page raised: {errors}"
    return value


SEATS_JS = """v => { const cells = v.seatCells ? v.seatCells() : [];
    const grid = v.querySelector('canvas.seat-grid');
    if (Number(grid.dataset.drawn || 0) < CHECK_POLLS) return null;
    return {polls: Number(grid.dataset.drawn), section: !v.querySelector('.seats').hidden,
            shown: v.querySelector('.shown-seat').textContent,
            world: !v.querySelector('.world-box').hidden,
            marks: Number(v.querySelector('canvas.world').dataset.marks || -1),
            cells,
            teams: [...v.querySelectorAll('table.teams tbody tr')].map(
                r => [...r.querySelectorAll('td')].map(td => td.textContent))}; }"""


def test_the_page_shows_both_seats_of_a_duel(tmp_path, no_shm_leak) -> None:
    """A client plays ``first_0`` every few ticks; ``second_0`` is nobody's (β plays it). The page
    shows both seats: the free one at 100 % inaction, the held one below, each team's row."""
    _browser_or_reason()
    stop = threading.Event()
    with ServerThread(envs=["multi/duel"], tick_procs=0) as srv, Client(srv.url) as owner:
        sid = owner.reset(seed=1).info["session_id"]

        def play() -> None:
            while not stop.is_set():
                owner.act(1)
                owner.wait(2)

        player = threading.Thread(target=play, daemon=True)
        player.start()
        try:
            seen = _watch(srv.url, sid, SEATS_JS.replace("CHECK_POLLS", "3"), tmp_path, "duel.png")
        finally:
            stop.set()
            player.join(timeout=30)
    assert seen["section"] and seen["shown"] == "first_0" and not seen["world"]
    first, second = seen["cells"]
    assert (first["seat"], first["team"], first["held"]) == ("first_0", "first", True)
    assert (second["seat"], second["team"], second["held"]) == ("second_0", "second", False)
    assert float(second["inaction"]) == 1.0 and second["delay"] == ""  # β's every tick: no delay to show
    assert float(first["inaction"]) < 1.0 and first["delay"] != ""  # the client's actions land
    assert first["fill"] != second["fill"]  # coloured by inaction
    assert [row[0] for row in seen["teams"]] == ["first", "second"] and seen["teams"][1][3] == "100%"


def test_the_page_shows_every_seat_of_a_team_world_and_marks_its_agents(tmp_path, no_shm_leak) -> None:
    """Twelve seats of two teams, nobody playing: the grid has twelve cells, the world's frame marks
    every living agent, and the four that left the map are grey cells, counted out of their team."""
    _browser_or_reason()
    with ServerThread(envs=[GRID_WORLD], tick_procs=0) as srv, Client(srv.url) as owner:
        sid = owner.reset(seed=0).info["session_id"]
        owner.wait(40)  # past tick 20: red_0, red_1, blue_0, blue_1 have left
        check = SEATS_JS.replace("CHECK_POLLS", "2").replace(
            "return {polls",
            "if (!cells.some(c => c.alive === 'false') || !v.querySelector('canvas.world').dataset.drawn) return null; "
            "return {polls",
        )
        seen = _watch(srv.url, sid, check, tmp_path, "grid.png")
    cells = {c["seat"]: c for c in seen["cells"]}
    assert len(cells) == 12 and seen["world"]
    dead = {s for s, c in cells.items() if c["dead"]}
    assert dead == {"red_0", "red_1", "blue_0", "blue_1"}
    assert seen["marks"] == 8  # one mark per living agent
    assert all(float(c["inaction"]) == 1.0 for c in cells.values())  # nobody plays: β everywhere
    teams = {row[0]: row for row in seen["teams"]}
    assert teams["red"][1:3] == ["6", "4"] and teams["blue"][1:3] == ["6", "4"]


def test_the_seats_feed_of_battle_has_its_map_and_every_agent(no_shm_leak) -> None:
    """MAgent2's battle (162 seats): the frame is its state map, the marks its grid's agents."""
    pytest.importorskip("magent2")
    with ServerThread(envs=["multi/battle"], tick_procs=0) as srv, Client(srv.url) as owner:
        sid = owner.reset(seed=1).info["session_id"]
        owner.wait(3)
        feed = http_get(srv.url, f"/live/sessions/{sid}/seats")
    assert len(feed["seats"]) == 162 and feed["frame"]["shape"] == [45, 45, 3]
    assert all(s["alive"] and 0 <= min(s["position"]) and max(s["position"]) < 45 for s in feed["seats"])
    red = {tuple(s["position"]) for s in feed["seats"] if s["team"] == "red"}
    assert len(red) == 81 and not red & {tuple(s["position"]) for s in feed["seats"] if s["team"] == "blue"}
    assert [(t["team"], t["seats"], t["alive"]) for t in feed["teams"]] == [("red", 81, 81), ("blue", 81, 81)]
