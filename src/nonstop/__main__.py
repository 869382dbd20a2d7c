"""``python -m nonstop``: the ``nonstop`` command, for a machine where the console script is not on PATH."""

from nonstop.cli import entry

if __name__ == "__main__":
    entry()
