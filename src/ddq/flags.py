"""Command-line flags: the run's settings, one per setting of `TrainConfig`, grouped as each field says,
defaults shown; and what every command's flags share (ranges, the nearest flag to a mistyped one).

`ddq train --help` lists the settings a field marks `brief`; `--help-all` lists every one, under its
group and the TOML section it lives in ([agent], [agent.optim], [run], [distributed], [services], ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import typing
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

from ddq.config import PRESETS, TrainConfig, field_type


@cache
def _preset_keys() -> frozenset[str]:
    """Every setting some preset sets: an env's, or an algorithm's over it."""
    from ddq.core.algorithms import ALGORITHMS

    presets = [*PRESETS.values(), *(preset for kind in ALGORITHMS.values() for preset in kind.presets.values())]
    return frozenset({"algo"} | {key for preset in presets for key in preset} | {
        key for preset in presets for section in preset.values() if isinstance(section, dict) for key in section})


class _PresetNote:
    """", or the env's preset" after a setting's default where a preset sets it, worked out when help is
    shown (`%(preset)s` in the help): the algorithms' presets load torch, which parsing flags does without."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return ", or the env's preset" if self.name in _preset_keys() else ""


class _AlgorithmsNote:
    """The algorithms `--algo` names, each with its summary, from the registry when help is shown
    (`%(algorithms)s` in the help): the settings, below the algorithms, cannot list them."""

    def __str__(self) -> str:
        from ddq.core.algorithms import ALGORITHMS

        named = [f"{name} ({kind.summary})" for name, kind in ALGORITHMS.items()]
        return " or ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)


@dataclasses.dataclass
class Setting:
    """One setting as a flag: where it lives, its group, its field, its element type, whether it is a list."""

    section: str  # "agent", "agent.optim", ...
    group: str | None
    field: Any
    kind: type
    is_list: bool


def settings(cls: type = TrainConfig, path: tuple[str, ...] = (), group: str | None = None) -> Iterator[Setting]:
    """Every setting below `cls`, with its group: its own field's, or that of the section holding it."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from settings(hints[f.name], (*path, f.name), f.metadata.get("group", group))
        else:
            yield Setting(".".join(path), f.metadata.get("group", group), f, *field_type(hints[f.name]))


def whole_number(text: str) -> int:
    """An int as RL papers write one: 1000000, 1_000_000 or 1e6 (a float that is whole); else ValueError."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"{text} is not a whole number") from None
        return int(value)


def _parse_optional(kind: type):
    convert = whole_number if kind is int else kind

    def parse(text: str):
        return None if text.lower() == "none" else convert(text)
    parse.__name__ = kind.__name__
    return parse


def add_config_flags(parser: argparse.ArgumentParser, brief: bool = False, leaving_out: tuple[str, ...] = ()) -> None:
    """One flag per setting, in its group; unset flags stay out of the parsed namespace (so a file or preset
    below them shows through). `brief`: only the settings marked brief appear in --help; all still parse.
    `leaving_out`: groups of settings the command never reads, which it neither shows nor takes."""
    groups: dict[tuple[str, str | None], Any] = {}
    for s in settings():
        if s.group in leaving_out:
            continue
        key = (s.section, s.group)
        if key not in groups:
            groups[key] = parser.add_argument_group(f"{s.group} settings ([{s.section}] in a --config file)")
        f = s.field
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = "none" if default is None else " ".join(map(str, default)) if s.is_list else default
        help_text = f.metadata.get("help", "")
        if "default" not in help_text:  # some say it in their own words
            help_text += f" (default: {shown}%(preset)s)"
        if brief and not f.metadata.get("brief"):
            help_text = argparse.SUPPRESS
        flag = "--" + f.name.replace("_", "-")
        if s.kind is bool:
            action = groups[key].add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                              default=argparse.SUPPRESS, help=help_text)
        else:
            action = groups[key].add_argument(flag, dest=f.name, type=_parse_optional(s.kind),
                                              nargs="+" if s.is_list else None, default=argparse.SUPPRESS,
                                              help=help_text, metavar=f.name.upper())
        action.preset = _PresetNote(f.name)  # read by `%(preset)s` in its help
        if "%(algorithms)s" in help_text:  # `--algo`'s
            action.algorithms = _AlgorithmsNote()


def reword(parser: argparse.ArgumentParser, dest: str, help_text: str) -> None:
    """Gives setting `dest`'s flag another help in this command, where the setting's own would mislead (a
    default that only `ddq train` has)."""
    for action in parser._actions:
        if action.dest == dest:
            action.help = help_text


def command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command (or `ddq bench KIND`) that `argv` names: whose flags an unknown flag is
    compared with (`main`)."""
    for action in parser._actions:
        if isinstance(action.choices, dict):  # a command's parsers, by name
            for index, arg in enumerate(argv):
                if arg in action.choices:
                    return command_parser(action.choices[arg], argv[index + 1:])
    return parser


def in_range(kind: Callable[[str], Any], low: float, high: float | None = None) -> Callable[[str], Any]:
    """An argparse type: the text as `kind`, refused unless at least `low` (and at most `high`)."""
    def convert(text: str) -> Any:
        value = kind(text)  # a ValueError argparse reports as an invalid value of the kind's name
        if value < low or (high is not None and value > high):
            allowed = f"at least {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}")
        return value
    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


PORT = in_range(int, 0, 65535)


def unrecognized(unknown: list[str], parser: argparse.ArgumentParser) -> str:
    """argparse's complaint about `unknown` arguments, with the nearest flag `parser` has for each mistyped one."""
    flags = [flag for action in parser._actions for flag in action.option_strings]
    hints = [f"{given} is not a flag of this command; did you mean {close[0]}?" for given in
             (arg.split("=")[0] for arg in unknown if arg.startswith("--"))
             if (close := difflib.get_close_matches(given, flags, n=1))]
    where = f" (`{parser.prog} --help-all` lists every flag)" if parser.prog == "ddq train" else ""
    return "; ".join([f"unrecognized arguments: {' '.join(unknown)}", *hints]) + where
