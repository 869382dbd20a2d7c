"""The console every nonstop command prints its tables through: rich's, never cut to 80 columns on a pipe.

rich lays output out for a terminal's width; when stdout is not a terminal (a pipe, a CI log, a
file) it assumes 80 columns, so a wide table has its headers cut ("inacti…") and its cells wrapped,
and a long line is broken in two. `Console` here is rich's `rich.console.Console` with one
difference: when it is not writing to a terminal and no width was chosen (``width=`` or
``$COLUMNS``), each `print` is laid out as wide as what it prints needs (up to `MAX_WIDTH`
columns), so tables keep their natural width and lines stay whole in logs. On a terminal nothing
changes: rich fits the terminal as usual.

>>> import io
>>> from rich.table import Table
>>> table = Table("figure", "inaction fraction (sequential)", "inaction fraction (staggered)", "delay mean (ticks)")
>>> table.add_row("Boxing at 6 ticks per inference", "0.833", "0.000", "6.0")
>>> out = io.StringIO()
>>> Console(file=out).print(table)
>>> lines = out.getvalue().splitlines()
>>> max(map(len, lines)) > 80, "inaction fraction (sequential)" in out.getvalue()
(True, True)
"""

from __future__ import annotations

import os
from typing import Any, Final

from rich.console import Console as _RichConsole
from rich.measure import Measurement

__all__ = ["Console", "MAX_WIDTH"]

#: The widest a print is laid out on a non-terminal (a runaway renderable stays bounded).
MAX_WIDTH: Final = 1000


class Console(_RichConsole):
    """rich's Console; off a terminal, each print is as wide as its content needs (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        environ = kwargs.get("_environ") or os.environ
        self._width_chosen = kwargs.get("width") is not None or bool(environ.get("COLUMNS", "").strip())

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.is_terminal or self._width_chosen or not objects or kwargs.get("width") is not None:
            super().print(*objects, **kwargs)
            return
        needed = self._natural_width(objects)
        if needed <= self.width:
            super().print(*objects, **kwargs)
            return
        before = self._width
        self.width = needed
        try:
            super().print(*objects, **kwargs)
        finally:
            self._width = before

    def _natural_width(self, objects: tuple[Any, ...]) -> int:
        """The widest of ``objects`` laid out without a width limit; a renderable that fills whatever
        width it is given (a rule, a panel) does not count: it takes the console's width as usual."""
        options = self.options.update_width(MAX_WIDTH)
        widest = 0
        for renderable in objects:
            if not isinstance(renderable, str) and not hasattr(renderable, "__rich_measure__"):
                continue
            widest = max(widest, Measurement.get(self, options, renderable).maximum)
        return min(widest, MAX_WIDTH)
