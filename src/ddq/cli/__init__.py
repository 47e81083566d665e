"""The `ddq` command (`command.py`), and the processes ddq starts itself that a person may start by hand
(`hand_started.py`)."""

from ddq.cli.command import build_parser, error_text, main

__all__ = ["build_parser", "error_text", "main"]
