"""``nonstop report RUN``: plots and a summary of a training run directory (`nonstop.studies.report`)."""

from __future__ import annotations

import argparse
import json

from nonstop.studies.report import build_report, render_summary, write_html, write_markdown

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``nonstop report``."""
    parser.add_argument("run", metavar="RUN", help="run directory written by `nonstop train --out RUN`")
    parser.add_argument("--out", metavar="DIR", help="where to write the plots and report.md (default RUN/report)")
    parser.add_argument("--json", action="store_true", help="also print report.json on the last line")
    parser.add_argument(
        "--html", action="store_true", help="also write report.html: the summary and plots as one self-contained page"
    )


def run_report(args: argparse.Namespace) -> int:
    """Entry point of ``nonstop report``; a missing or unreadable run raises FileNotFoundError/ValueError."""
    from nonstop._console import Console

    report = build_report(args.run, args.out)
    markdown = write_markdown(report)
    render_summary(report, Console())
    print(f"report: {markdown}")
    if args.html:
        print(f"html: {write_html(report)}")
    if args.json:
        print(json.dumps(report.to_json(), allow_nan=False))
    return 0


HELP = "plots and a summary of a training run directory (nonstop train --out RUN)"
run = run_report
