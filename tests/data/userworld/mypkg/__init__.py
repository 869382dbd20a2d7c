"""A user's own package, as `tests/test_userworld.py` trains on it: a plain package beside the command."""
