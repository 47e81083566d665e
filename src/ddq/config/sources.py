"""Where settings come from and how they combine: defaults, the env's preset, a TOML file (or a run's
settings document), then flags. Later sources override earlier ones; every setting's name is unique, so
a file may name it inside its section's table or alone. The whole order, with the algorithm's preset and
a Caffe solver, is `ddq.core.settings.build_config`: it asks the algorithm, which sits above config."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ddq.config.sections import TrainConfig
from ddq.gamesim.envs import is_atari, is_minatar

SETTINGS_FORMAT = "ddq-settings"
SETTINGS_VERSION = 2  # 1: the same settings without sections, still read


# The MinAtar paper's DQN plays this many frames at random first: its replay memory's warm-up, before which
# it neither learns nor lowers epsilon.
MINATAR_RANDOM_FRAMES = 5_000

# Hyperparameters that suit each kind of env; any of them can still be overridden.
PRESETS: dict[str, dict[str, Any]] = {
    # CartPole: the default 256x256 MLP. A 64x64 one reaches 475 sooner in serial mode (`ddq bench peers`
    # uses it) but needs 16k-49k env steps in actor-learner mode where 256x256 needs about 13k.
    "CartPole-v1": dict(
        total_steps=60_000, num_envs=4, buffer_size=50_000, batch_size=64, learning_starts=1_000,
        train_frequency=16, replay_ratio=1.0, target_update=100, epsilon_steps=4_000,
        epsilon_end=0.04, eval_every=1_000, log_every=1_000, optim=dict(optimizer="adam", lr=1.5e-3)),
    "ddq/Snake-v0": dict(
        total_steps=300_000, num_envs=16, buffer_size=200_000, batch_size=64, learning_starts=5_000,
        train_frequency=64, replay_ratio=0.25, target_update=500, epsilon_steps=100_000,
        epsilon_end=0.05, eval_every=20_000, log_every=5_000, frame_stack=1, model="mlp",
        optim=dict(optimizer="adam", lr=2.5e-4)),
    "atari": dict(
        total_steps=2_000_000, num_envs=4, buffer_size=200_000, batch_size=32, learning_starts=20_000,
        train_frequency=16, replay_ratio=0.25, target_update=2_000, epsilon_steps=250_000,
        epsilon_end=0.01, eval_every=50_000, frame_stack=4, gamma=0.99,
        optim=dict(optimizer="adam", lr=1e-4, eps=1.5e-4)),
    # MinAtar: the DQN of Young and Tian (2019), "MinAtar: An Atari-Inspired Testbed": conv 16 3x3 - fc 128,
    # replay 100k, batch 32, one update per frame from frame 5,000, target every 1,000 updates, 5,000 random
    # frames and then epsilon from 1 to 0.1 over 100k frames, centred RMSprop (lr 2.5e-4, alpha 0.95, eps
    # 0.01), Huber loss, the plain max target, no gradient clipping, single frames, 5M frames.
    "minatar": dict(
        total_steps=5_000_000, num_envs=1, buffer_size=100_000, batch_size=32,
        learning_starts=MINATAR_RANDOM_FRAMES, train_frequency=1, replay_ratio=1.0, target_update=1_000,
        epsilon_start=1.0, epsilon_end=0.1, epsilon_steps=100_000, epsilon_delay=MINATAR_RANDOM_FRAMES,
        frame_stack=1, gamma=0.99, model="minatar", double_dqn=False, max_grad_norm=None, eval_every=100_000,
        log_every=10_000,
        optim=dict(optimizer="rmsprop", lr=2.5e-4, rms_decay=0.95, eps=0.01, centered=True)),
}


def preset_key(env_id: str) -> str:
    """What presets are keyed by: the env's id, or its family ("atari", "minatar")."""
    return "atari" if is_atari(env_id) else "minatar" if is_minatar(env_id) else env_id


def preset_for(env_id: str) -> dict[str, Any]:
    return PRESETS.get(preset_key(env_id), {})


def _sections(cls: type, path: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """Every section below `cls` by name ("agent", "optim", "server", ...): its path from TrainConfig."""
    found: dict[str, tuple[str, ...]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            found[f.name] = (*path, f.name)
            found.update(_sections(hints[f.name], (*path, f.name)))
    return found


def _leaves(cls: type, path: tuple[str, ...] = ()) -> dict[str, tuple[str, ...]]:
    """Every setting below `cls` by name ("gamma", "lr", "shards", ...): its path from TrainConfig."""
    found: dict[str, tuple[str, ...]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            found.update(_leaves(hints[f.name], (*path, f.name)))
        else:
            found[f.name] = (*path, f.name)
    return found


SECTIONS, SETTINGS = _sections(TrainConfig), _leaves(TrainConfig)


def flat_settings(values: dict[str, Any]) -> dict[str, Any]:
    """A configuration's dict (`dataclasses.asdict`, a summary's "config") with its sections flattened:
    every setting by its own name."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict):
            flat.update(flat_settings(value))
        else:
            flat[key] = value
    return flat


def setting_path(name: str) -> tuple[str, ...]:
    """Where setting `name` lives: ("agent", "optim", "lr") for "lr"."""
    return SETTINGS[name]


def merge(config: TrainConfig, values: dict[str, Any], source: str) -> TrainConfig:
    """A copy of `config` with `values` applied: settings named alone (`gamma`) or inside their sections'
    tables (`[agent] gamma`, `[agent.optim] lr`, or `[optim] lr`).

    `source` names where the values come from (a file's path, "the command line", a preset): an
    unknown key, a value of the wrong type or out of range is a ValueError that names the setting,
    its value, that source (with the line, for a file) and what is allowed."""
    updates: dict[tuple[str, ...], Any] = {}
    _collect(values, (), source, updates)
    return _apply(config, updates, (), source)


def _collect(values: dict[str, Any], within: tuple[str, ...], source: str,
             updates: dict[tuple[str, ...], Any]) -> None:
    """The settings `values` names, by path; `within`: the section whose table they are."""
    for key, value in values.items():
        key = key.replace("-", "_")
        path = SECTIONS.get(key) or SETTINGS.get(key)
        if path is None:
            table = f" in [{'.'.join(within)}]" if within else ""
            raise ValueError(f"unknown setting {key!r}{table} {_where(source, key)}; `ddq train --help-all` "
                             "lists them")
        if path[:len(within)] != within:
            raise ValueError(f"{key} {_where(source, key)} is not a setting of [{'.'.join(within)}]; it belongs "
                             f"in [{'.'.join(path[:-1]) or 'the top level'}]")
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ValueError(f"{key} {_where(source, key)} must be a table of settings, not {value!r}")
            _collect(value, path, source, updates)
        elif path in updates:
            raise ValueError(f"{key} {_where(source, key)} is given twice (alone and in its section's table)")
        else:
            updates[path] = value


def _apply(config: Any, updates: dict[tuple[str, ...], Any], prefix: tuple[str, ...], source: str) -> Any:
    changes = {}
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        path = (*prefix, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            if any(key[:len(path)] == path for key in updates):
                changes[f.name] = _apply(getattr(config, f.name), updates, path, source)
        elif path in updates:
            changes[f.name] = _typed(type(config), f.name, updates[path], source)
    return _replace(config, changes, source) if changes else config


def _replace(config: Any, updates: dict[str, Any], source: str) -> Any:
    """dataclasses.replace, with a range error saying where the offending value came from."""
    try:
        return dataclasses.replace(config, **updates)
    except ValueError as error:
        named = next((key for key in updates if re.search(rf"\b{key}\b", str(error))), None)
        raise ValueError(f"{error} ({_where(source, named) if named else source})") from None


_KIND_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}


def _typed(cls: type, key: str, value: Any, source: str) -> Any:
    """`value` as the field's type (a whole float for an int, an int for a float), or a ValueError."""
    kind, is_list = field_type(typing.get_type_hints(cls)[key])
    optional = type(None) in typing.get_args(typing.get_type_hints(cls)[key])
    if dataclasses.is_dataclass(kind) or (value is None and optional):
        return value

    def wrong() -> ValueError:
        allowed = ("a list of " if is_list else "") + _KIND_WORDS.get(kind, kind.__name__)
        return ValueError(f"{key} = {value!r} {_where(source, key)}: expected {allowed}"
                          + (" or none" if optional else ""))

    def one(item: Any) -> Any:
        if kind is float and isinstance(item, (int, float)) and not isinstance(item, bool):
            return float(item)
        if kind is int and isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, kind) and not (kind is int and isinstance(item, bool)):
            return item
        raise wrong()

    if is_list and not isinstance(value, list):
        raise wrong()
    return [one(item) for item in value] if is_list else one(value)


class SettingRefused(ValueError):
    """A setting's value that is allowed alone but not beside the others (an algorithm's refusal); `setting`
    names it, so that the message can say where it came from (`where_given`)."""

    def __init__(self, setting: str, message: str):
        super().__init__(message)
        self.setting = setting


COMMAND_LINE = "the command line"
PYTHON_CALL = "ddq.train's keywords"  # `ddq.train(total_steps=...)`: its errors name keywords, not flags


def where_given(key: str, cli_values: dict[str, Any], file_values: dict[str, Any], config_file: str | None,
                given_in: str = COMMAND_LINE) -> str:
    """Where setting `key` got its value, the later source first: 'given as --key' (or 'given as key=' in
    a Python call: `given_in`), 'in FILE, line N', or 'the default or the preset'."""
    if key in cli_values:
        return _where(given_in, key)
    if config_file and named_setting(file_values, key) is not None:
        return _where(config_file, key)
    return "the default or the env's preset"


def spelled(key: str, given_in: str = COMMAND_LINE) -> str:
    """Setting `key` as the user writes it: `--key-name` on the command line, `key_name=` in a Python call."""
    return f"{key}=" if given_in == PYTHON_CALL else f"--{key.replace('_', '-')}"


def from_file(key: str, config_file: str) -> str:
    """Setting `key` as a line names it when a settings file gave it: `redis_url in run.toml`."""
    return f"{key} in {config_file}"


def _where(source: str, key: str) -> str:
    """'given as --key', 'given as key=', 'in FILE, line N', or 'in SOURCE'."""
    if source in (COMMAND_LINE, PYTHON_CALL):
        return f"given as {spelled(key, source)}"
    path = Path(source)
    if path.suffix in (".toml", ".json", ".prototxt") and path.is_file():
        pattern = re.compile(rf"^\s*\"?{re.escape(key)}\"?\s*[=:]")
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.match(line):
                return f"in {source}, line {number}"
    return f"in {source}"


def named_setting(values: dict[str, Any], name: str) -> Any:
    """Setting `name` in `values`, named alone or inside its sections' tables; None when absent."""
    if name in values:
        return values[name]
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict) and (found := named_setting(value, name)) is not None:
            return found
    return None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML file, a JSON file of the same keys, or a run folder's config.json (a settings
    document: its settings, to start from again)."""
    try:
        with open(path, "rb") as handle:
            values = json.load(handle) if str(path).endswith(".json") else tomllib.load(handle)
    except OSError as error:
        raise ValueError(f"--config {path}: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, ValueError) as error:
        kind = "JSON" if str(path).endswith(".json") else "TOML"
        raise ValueError(f"--config {path} is not valid {kind}: {error}") from None
    if isinstance(values, dict) and values.get("format") == SETTINGS_FORMAT:
        return document_values(values, str(path))
    return values


def field_type(annotation: Any) -> tuple[type, bool]:
    """(element type, is_list) of a field annotation such as `int | None` or `list[int]`."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return field_type(args[0])
    if typing.get_origin(annotation) is list:
        return args[0], True
    return annotation, False


def config_of(**settings: Any) -> TrainConfig:
    """A configuration from settings named alone, no preset applied: `config_of(env="CartPole-v1")`."""
    return merge(TrainConfig(), settings, "config_of")


def document_values(document: Any, source: str) -> dict[str, Any]:
    """The settings a settings document (`ddq.config.documents`) holds, once its format and version are
    known to this ddq."""
    if not isinstance(document, dict) or document.get("format") != SETTINGS_FORMAT:
        raise ValueError(f"{source} does not hold ddq settings")
    if document.get("version") not in (1, SETTINGS_VERSION):
        raise ValueError(f"{source} holds settings version {document.get('version')}; this ddq reads "
                         f"versions 1 to {SETTINGS_VERSION}")
    return document["config"]
