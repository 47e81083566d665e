"""The run's settings as command-line flags: one per field of `TrainConfig`, in groups, defaults shown.

`ddq train --help` lists the settings people change most; `--help-all` lists every one, grouped
(run, environment, network, algorithm, exploration, evaluation and checkpoints, distributed,
services).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from ddq.config import PRESETS, TrainConfig, field_type

# The settings `ddq train --help` shows; the rest are under --help-all.
COMMON = ("mode", "env", "workers", "total_steps", "target_return", "time_budget_s", "seed", "run_dir", "device",
          "lr")

# Each flag's group in --help-all; a nested section's fields go where their section is listed.
GROUPS: dict[str, tuple[str, ...]] = {
    "run": ("mode", "seed", "total_steps", "total_episodes", "time_budget_s", "target_return", "run_dir", "device",
            "threads",
            "progress", "precision"),
    "environment": ("env", "num_envs", "frame_stack", "env_options"),
    "network": ("model", "hidden", "dueling"),
    "algorithm": ("buffer_size", "batch_size", "gamma", "n_step", "learning_starts", "train_frequency", "replay_ratio",
                  "target_update", "double_dqn", "max_grad_norm", "prioritized", "priority_alpha", "priority_beta",
                  "board_symmetries",
                  "optim"),
    "exploration": ("epsilon_start", "epsilon_end", "epsilon_steps", "per_actor_epsilon"),
    "evaluation": ("eval_every", "eval_episodes", "eval_epsilon", "log_every", "checkpoint_every", "save_replay"),
    "distributed": ("workers", "spark_master", "redis_url", "publish_every", "send_every", "actor_backlog", "sync",
                    "sync_every",
                    "server"),
    "services": ("celery", "dashboard", "dashboard_port"),
}
_GROUP_OF = {name: group for group, names in GROUPS.items() for name in names}
_PRESET_KEYS = {key for preset in PRESETS.values() for key in preset} | {
    key for preset in PRESETS.values() for section in preset.values() if isinstance(section, dict) for key in section}


def _parse_optional(kind: type):
    def parse(text: str):
        return None if text.lower() == "none" else kind(text)
    parse.__name__ = kind.__name__
    return parse


def add_config_flags(parser: argparse.ArgumentParser, brief: bool = False) -> None:
    """One flag per setting, in GROUPS; unset flags stay out of the parsed namespace (so a file or preset
    below them shows through). `brief`: only COMMON's flags appear in --help; all of them still parse."""
    groups = {name: parser.add_argument_group(f"{name} settings") for name in GROUPS}
    for section, f, kind, is_list in _settings(TrainConfig):
        group = groups.get(_GROUP_OF.get(section or f.name, ""), parser)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        shown = "none" if default is None else " ".join(map(str, default)) if is_list else default
        preset = ", or the env's preset" if f.name in _PRESET_KEYS else ""
        help_text = f.metadata.get("help", "")
        if "default" not in help_text:  # some say it in their own words
            help_text += f" (default: {shown}{preset})"
        if brief and f.name not in COMMON:
            help_text = argparse.SUPPRESS
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            group.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=help_text)
        else:
            group.add_argument(flag, dest=f.name, type=_parse_optional(kind), nargs="+" if is_list else None,
                               default=argparse.SUPPRESS, help=help_text, metavar=f.name.upper())


def _settings(cls: type, section: str | None = None) -> list[tuple[str | None, Any, type, bool]]:
    """(section, field, element type, is a list) of every setting, nested sections' fields included."""
    found = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            found += _settings(hints[f.name], f.name)
        else:
            found.append((section, f, *field_type(hints[f.name])))
    return found
