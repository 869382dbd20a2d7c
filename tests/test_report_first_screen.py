"""`nonstop report RUN --html` opens with the picture (issue 30): the first screen of the page, 1280×800
in headless Chromium (Debian's /usr/bin/chromium driven by Playwright, as tests/test_live.py does),
shows the five headline figures in words and the first plot; the table of every figure comes after,
folded. Also: the plots' one time axis (world seconds), titles in words, resets on the strips, and a
delay histogram whose axis fits its bars."""

from __future__ import annotations

import numpy as np
import pytest
from test_live import CHROMIUM, CHROMIUM_ARGS, _browser_or_reason
from test_report import make_run

from nonstop.cli import main
from nonstop.studies.report import HEADLINE, build_report, headline


def test_the_first_screen_of_report_html_shows_the_headline_and_the_first_plot(tmp_path, capsys) -> None:
    _browser_or_reason()
    from playwright.sync_api import sync_playwright

    run = tmp_path / "run"
    make_run(run)
    assert main(["report", str(run), "--html"]) == 0
    page_path = run / "report" / "report.html"
    expected = {name: value for name, value, _ in headline(build_report(run, tmp_path / "again"))}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(page_path.as_uri())
            seen = page.evaluate("""() => {
                const box = e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, r.left, r.right]; };
                const cards = [...document.querySelectorAll('#headline > div')].map(d => ({
                    name: d.dataset.figure, value: d.querySelector('b').textContent, box: box(d)}));
                const img = document.querySelector('img');
                const details = document.querySelector('details#figures');
                return {cards, img: img && box(img), loaded: img && img.complete && img.naturalWidth > 0,
                        table: details && box(details), open: details && details.open,
                        width: window.innerWidth, height: window.innerHeight};
            }""")
        finally:
            browser.close()
    assert (seen["width"], seen["height"]) == (1280, 800)
    assert [c["name"] for c in seen["cards"]] == list(HEADLINE)
    for card in seen["cards"]:
        top, bottom, left, right = card["box"]
        assert 0 <= top and bottom <= 800 and 0 <= left and right <= 1280, card  # on the first screen
        assert card["value"] == expected[card["name"]] and card["value"] != "—", card
    top, bottom, left, right = seen["img"]
    assert seen["loaded"] and 0 < top and bottom <= 800 and right <= 1280, seen["img"]  # the whole first plot
    assert seen["table"][0] > bottom and seen["open"] is False  # the raw table: below the plots, folded


def test_the_headline_says_each_figure_in_words(tmp_path) -> None:
    run = tmp_path / "run"
    make_run(run)
    lines = {name: (value, words) for name, value, words in headline(build_report(run))}
    assert lines["inaction"][0].endswith("%") and "β" in lines["inaction"][1]
    assert lines["delay"][0].endswith(" ticks") and lines["τ_I"][0].endswith(" ticks")
    assert lines["updates/s"][0] == f"{np.mean([21, 22, 23, 24, 25]):.3g}"
    assert all(words and "_" not in words for _, words in lines.values())  # words, not keys


def test_every_plot_uses_world_seconds_and_marks_resets(tmp_path, monkeypatch) -> None:
    from nonstop.metrics import plots

    seen: dict[str, dict] = {}
    for name in ("plot_return_over_time", "plot_inaction_delay"):
        real = getattr(plots, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen[_name] = {"args": args, **kwargs}
            return _real(*args, **kwargs)

        monkeypatch.setattr(plots, name, spy)
    run = tmp_path / "run"
    make_run(run)
    build_report(run)
    returns = seen["plot_return_over_time"]
    assert returns["xlabel"] == "world time (s)"
    from test_report import RETURNS

    log_tau = build_report(run).summary["ticks"]["duration_s"] / build_report(run).summary["ticks"]["ticks"]
    assert np.allclose(returns["args"][0], [50 * (i + 1) * log_tau for i in range(len(RETURNS))])  # end_tick·τ_M
    strip = seen["plot_inaction_delay"]
    assert strip["xlabel"] == "world time (s)" and strip["resets_s"] is not None


def test_titles_are_words_not_reprs_and_the_histogram_fits_its_bars(tmp_path) -> None:
    from matplotlib.figure import Figure

    from nonstop.metrics.plots import latency_words, plot_delay_histogram

    assert latency_words("Constant(seconds=0.1)") == "model latency 0.1 s"
    captured: list = []
    real_savefig = Figure.savefig

    def keep(self, *a, **k):
        captured.append(self)
        return real_savefig(self, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", keep)
        plot_delay_histogram(np.ones(500, np.int64), tmp_path / "one.png")
    ax = captured[-1].axes[0]
    low, high = ax.get_xlim()
    assert low > -1 and high < 3 and all(float(t).is_integer() for t in ax.get_xticks())  # no −0.5…1.5 for one bar
