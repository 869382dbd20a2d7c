"""``nonstop report RUN --html``: one self-contained page with the summary and every plot inlined."""

from __future__ import annotations

import base64
from html import escape
from html.parser import HTMLParser
from pathlib import Path

from test_report import RETURNS, make_run

from nonstop.cli import main
from nonstop.studies.report import _rows, build_report, write_html


class _Page(HTMLParser):
    """Collects what a self-contained page must not have (outside references) and what it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.references: list[str] = []
        self.rows: list[list[str]] = []  # the cells of each table row
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        for name in ("href", "src"):
            if name in attrs and not (tag == "img" and attrs[name].startswith("data:image/png;base64,")):
                self.references.append(f"{tag} {name}={attrs[name]}")
        if tag in ("link", "script", "iframe", "object", "embed"):
            self.references.append(tag)
        if tag == "tr":
            self.rows.append([])
        if tag == "td":
            self._in_cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data


def test_report_html_is_one_self_contained_page(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    make_run(run)
    assert main(["report", str(run), "--html"]) == 0
    out = run / "report"
    html = out / "report.html"
    assert f"html: {html}" in capsys.readouterr().out
    assert (out / "report.md").is_file()  # beside the existing output, not instead of it
    page = _Page()
    page.feed(html.read_text(encoding="utf-8"))
    assert page.references == []  # nothing outside the file: no links, scripts or file paths
    report = build_report(run, tmp_path / "again")
    assert len(page.images) == len(report.plots) == 3
    inlined = {base64.b64decode(src.split(",", 1)[1]) for src in page.images}
    assert inlined == {Path(p).read_bytes() for p in build_report(run).plots.values()}  # the very PNGs
    assert all(png[:8] == b"\x89PNG\r\n\x1a\n" for png in inlined)
    # the summary table: every figure of the report, with the value the terminal table shows
    body = [row for row in page.rows if row]  # the header row has th cells only
    assert [(key, value) for _, key, value in body] == [(key, text) for _, key, text in _rows(report)]
    assert [source for source, _, _ in body if source] == list(report.summary)  # each source named once
    assert ["episodes", str(len(RETURNS))] == body[[key for _, key, _ in body].index("episodes")][1:]


def test_report_html_of_a_partial_run_says_what_it_skipped(tmp_path) -> None:
    run = tmp_path / "run"
    make_run(run, ticklog=False, episodes=False)
    report = build_report(run)
    text = write_html(report).read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 1  # inaction/delay from progress.csv only
    assert set(report.skipped) == {"delay_histogram", "return_over_time"}
    for name, reason in report.skipped.items():  # each skipped plot with the reason the report gives
        assert f"<li>{name}: {escape(reason)}</li>" in text
    assert f"Not in the run dir: {escape(', '.join(report.missing))}." in text and "episodes.csv" in report.missing
