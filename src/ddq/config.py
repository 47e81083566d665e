"""Typed run configuration: defaults, per-env presets, a TOML file, then command-line flags.

Later sources override earlier ones. Every field of `TrainConfig` (and of its
nested env and optimizer settings) is also a `ddq train` flag of the same
name with dashes, so the file and the flags never drift apart.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ddq.core.optimizer_settings import OptimizerConfig
from ddq.gamesim import SNAKE_ID
from ddq.gamesim.envs import EnvOptions, is_atari

MODES = ("serial", "downpour", "actor-learner")
PRECISIONS = ("fp32", "bf16")


@dataclass
class ServerConfig:
    """The parameter server's settings (distributed modes)."""

    shards: int = field(default=1, metadata={"help": "parameter-server processes, each owning a slice of the weights"})
    max_staleness: int | None = field(default=None, metadata={"help": "drop gradients more than this many updates old (none: keep all)"})
    staleness_scaling: bool = field(default=False, metadata={"help": "divide each step by its gradient's staleness (Zhang et al. 2016)"})
    snapshot_every: int = field(default=1000, metadata={"help": "updates between snapshots (Redis and a checkpoint file)"})
    max_backlog: int = field(default=8, metadata={"help": "queued gradients per shard beyond which a worker waits"})

    def __post_init__(self) -> None:
        if self.shards < 1 or self.snapshot_every < 1 or self.max_backlog < 1:
            raise ValueError("shards, snapshot_every and max_backlog must be positive")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError("max_staleness must be at least 0")


@dataclass
class TrainConfig:
    """Everything that defines a training run."""

    mode: str = field(default="downpour", metadata={"help": f"training mode: {', '.join(MODES)}"})
    env: str = field(default=SNAKE_ID, metadata={"help": "Gymnasium env id (ddq/Snake-v0, CartPole-v1, ALE/Pong-v5, ...)"})
    seed: int = field(default=0, metadata={"help": "seed of envs, network init, exploration and replay sampling"})
    total_steps: int = field(default=200_000, metadata={"help": "env steps to train for"})
    run_dir: str | None = field(default=None, metadata={"help": "output folder (default runs/<env>-<time>)"})
    time_budget_s: float | None = field(default=None, metadata={"help": "stop after this much wall time (from the command's start)"})
    target_return: float | None = field(default=None, metadata={"help": "stop once a greedy evaluation averages at least this"})
    total_episodes: int | None = field(default=None, metadata={"help": "stop once this many training episodes have "
                                                                       "ended (every worker's together)"})
    num_envs: int = field(default=8, metadata={"help": "envs stepped together per actor"})
    model: str = field(default="auto", metadata={"help": "Q-network: auto, mlp, deepq, nature, a shipped "
                                                          "definition (ddq models) or a Caffe .prototxt file"})
    hidden: list[int] = field(default_factory=lambda: [256, 256], metadata={"help": "MLP hidden layer widths"})
    frame_stack: int = field(default=1, metadata={"help": "frames per state (stacked at sampling time)"})
    buffer_size: int = field(default=100_000, metadata={"help": "replay memory capacity in transitions"})
    batch_size: int = field(default=64, metadata={"help": "minibatch size"})
    gamma: float = field(default=0.99, metadata={"help": "discount factor"})
    learning_starts: int = field(default=1_000, metadata={"help": "env steps of pure exploration before training"})
    train_frequency: int = field(default=64, metadata={"help": "env steps between training rounds"})
    replay_ratio: float = field(default=0.5, metadata={"help": "gradient updates per env step (independent of workers)"})
    target_update: int = field(default=100, metadata={"help": "updates between target-network refreshes (C)"})
    double_dqn: bool = field(default=True, metadata={"help": "Double-DQN targets (off: the original max over the target net)"})
    n_step: int = field(default=1, metadata={"help": "n-step returns: rewards summed over this many steps before "
                                                     "bootstrapping (1: the original one-step target)"})
    dueling: bool = field(default=False, metadata={"help": "dueling heads: Q = V(s) + A(s, a) - mean A (Wang et al. 2016)"})
    board_symmetries: bool = field(default=False, metadata={
        "help": "train on each replayed transition turned or mirrored by one of the board's 8 symmetries, at "
                "random (envs whose rules are the same on a turned board: Snake)"})
    precision: str = field(default="fp32", metadata={"help": "gradient arithmetic: fp32, or bf16 autocast"})
    max_grad_norm: float | None = field(default=10.0, metadata={"help": "clip the gradient's global norm (none: off)"})
    prioritized: bool = field(default=False, metadata={"help": "prioritized replay (proportional, Schaul et al. 2016)"})
    priority_alpha: float = field(default=0.6, metadata={"help": "prioritized replay: how much priorities matter (0: uniform)"})
    priority_beta: float = field(default=0.4, metadata={"help": "prioritized replay: importance-weight exponent at the "
                                                                 "start, annealed to 1 over total_steps"})
    epsilon_start: float = field(default=1.0, metadata={"help": "initial exploration rate"})
    epsilon_end: float = field(default=0.05, metadata={"help": "final exploration rate"})
    epsilon_steps: int = field(default=10_000, metadata={"help": "env steps over which epsilon falls linearly"})
    per_actor_epsilon: bool = field(default=False, metadata={"help": "actor-learner: Ape-X's fixed epsilon per actor, "
                                                                      "0.4^(1 + 7 i / (N - 1)), instead of the schedule"})
    eval_every: int = field(default=5_000, metadata={"help": "env steps between greedy evaluations"})
    eval_episodes: int = field(default=10, metadata={"help": "episodes per greedy evaluation"})
    eval_epsilon: float = field(default=0.0, metadata={"help": "exploration rate during evaluation"})
    log_every: int = field(default=1_000, metadata={"help": "env steps between logged training points"})
    checkpoint_every: int = field(default=50_000, metadata={"help": "env steps between checkpoints"})
    save_replay: bool = field(default=True, metadata={"help": "save the replay memory with checkpoints (exact resumes)"})
    device: str = field(default="cpu", metadata={"help": "torch device: cpu, cuda, cuda:1, auto"})
    threads: int = field(default=1, metadata={"help": "torch CPU threads (one per process is fastest on few cores)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    workers: int = field(default=2, metadata={"help": "Barista workers (Spark tasks) in distributed modes"})
    publish_every: int = field(default=10, metadata={"help": "actor-learner: learner updates between weight publications (--sync: once a round)"})
    send_every: int = field(default=16, metadata={"help": "actor-learner: vector steps an actor sends per message"})
    actor_backlog: int = field(default=1, metadata={"help": "actor-learner: messages per actor waiting for the learner "
                                                            "beyond which actors wait (more lets them act on older weights)"})
    sync: bool = field(default=False, metadata={"help": "actor-learner in rounds: every sync_every episodes each actor "
                                                         "waits at a Spark barrier, the learner trains on what arrived "
                                                         "and all start the next round with the same weights"})
    sync_every: int = field(default=2, metadata={"help": "actor-learner --sync: episodes each actor plays per round"})
    spark_master: str | None = field(default=None, metadata={"help": "Spark master URL (default local[WORKERS])"})
    celery: bool = field(default=True, metadata={"help": "run a Celery worker for background greedy evaluation "
                                                         "of snapshots (distributed modes)"})
    redis_url: str | None = field(default=None, metadata={"help": "Redis to use: redis://, rediss://, unix:// "
                                                                  "(default: a private redis-server ddq starts)"})
    dashboard: bool = field(default=True, metadata={"help": "serve the live dashboard on 127.0.0.1 while "
                                                             "training (distributed modes)"})
    dashboard_port: int | None = field(default=None, metadata={"help": "the dashboard's port (default: a free one)"})
    env_options: EnvOptions = field(default_factory=EnvOptions)
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)
    server: ServerConfig = field(default_factory=ServerConfig)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        for name in ("total_steps", "num_envs", "batch_size", "frame_stack", "train_frequency", "target_update",
                     "eval_episodes", "buffer_size", "workers", "threads", "eval_every", "log_every",
                     "checkpoint_every", "replay_ratio", "n_step", "publish_every", "send_every", "sync_every", "actor_backlog"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("learning_starts", "epsilon_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")
        for name in ("gamma", "epsilon_start", "epsilon_end", "eval_epsilon", "priority_beta"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        for name in ("time_budget_s", "max_grad_norm", "total_episodes"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive (or none), got {getattr(self, name)}")
        if self.priority_alpha < 0:
            raise ValueError(f"priority_alpha must be at least 0, got {self.priority_alpha}")
        if self.sync and self.mode != "actor-learner":
            raise ValueError(f"sync rounds are a way of actor-learner training, not of {self.mode} mode")
        if self.mode == "actor-learner" and self.server.shards != 1:
            raise ValueError(f"shards must be 1 in actor-learner mode (its one learner owns the weights), "
                             f"got {self.server.shards}")
        if any(width <= 0 for width in self.hidden) or not self.hidden:
            raise ValueError(f"hidden must list positive layer widths, got {self.hidden}")
        if self.dashboard_port is not None and not 0 <= self.dashboard_port <= 65535:
            raise ValueError(f"dashboard_port must be a port number (0-65535), got {self.dashboard_port}")


# Hyperparameters that suit each kind of env; any of them can still be overridden.
PRESETS: dict[str, dict[str, Any]] = {
    # CartPole: the default 256x256 MLP. A 64x64 one reaches 475 sooner in serial mode (`ddq bench peers`
    # uses it) but needed 16k-49k env steps in actor-learner mode where 256x256 needs about 13k.
    "CartPole-v1": dict(
        total_steps=60_000, num_envs=4, buffer_size=50_000, batch_size=64, learning_starts=1_000,
        train_frequency=16, replay_ratio=1.0, target_update=100, epsilon_steps=4_000,
        epsilon_end=0.04, eval_every=1_000, log_every=1_000, optim=dict(optimizer="adam", lr=1.5e-3)),
    SNAKE_ID: dict(
        total_steps=300_000, num_envs=16, buffer_size=200_000, batch_size=64, learning_starts=5_000,
        train_frequency=64, replay_ratio=0.25, target_update=500, epsilon_steps=100_000,
        epsilon_end=0.05, eval_every=20_000, log_every=5_000, frame_stack=1, model="mlp",
        optim=dict(optimizer="adam", lr=2.5e-4)),
    "atari": dict(
        total_steps=2_000_000, num_envs=4, buffer_size=200_000, batch_size=32, learning_starts=20_000,
        train_frequency=16, replay_ratio=0.25, target_update=2_000, epsilon_steps=250_000,
        epsilon_end=0.01, eval_every=50_000, frame_stack=4, gamma=0.99,
        optim=dict(optimizer="adam", lr=1e-4, eps=1.5e-4)),
}


def preset_for(env_id: str) -> dict[str, Any]:
    return PRESETS.get("atari" if is_atari(env_id) else env_id, {})


_SECTIONS = {"env_options": EnvOptions, "optim": OptimizerConfig, "server": ServerConfig}


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def merge(config: TrainConfig, values: dict[str, Any], source: str) -> TrainConfig:
    """A copy of `config` with `values` applied: flat keys, or [env_options]/[optim] tables.

    `source` names where the values come from (a file's path, "the command line", a preset): an
    unknown key, a value of the wrong type or out of range is a ValueError that names the setting,
    its value, that source (with the line, for a file) and what is allowed."""
    updates: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    for key, value in values.items():
        key = key.replace("-", "_")
        owner = next((name for name, cls in _SECTIONS.items() if key in _field_names(cls)), None)
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise ValueError(f"{key} {_where(source, key)} must be a table of settings, not {value!r}")
            sections[key].update({k.replace("-", "_"): v for k, v in value.items()})
        elif owner:
            sections[owner][key] = value
        elif key in _field_names(TrainConfig):
            updates[key] = _typed(TrainConfig, key, value, source)
        else:
            raise ValueError(f"unknown setting {key!r} {_where(source, key)}; `ddq train --help` lists them")
    for name, section in sections.items():
        unknown = set(section) - _field_names(_SECTIONS[name])
        if unknown:
            raise ValueError(f"unknown setting(s) {', '.join(sorted(unknown))} in [{name}] of {source}")
        if section:
            typed = {key: _typed(_SECTIONS[name], key, value, source) for key, value in section.items()}
            updates[name] = _replace(getattr(config, name), typed, source)
    return _replace(config, updates, source)


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


def _where(source: str, key: str) -> str:
    """'given as --key', 'in FILE, line N', or 'in SOURCE'."""
    if source == "the command line":
        return f"given as --{key.replace('_', '-')}"
    path = Path(source)
    if path.suffix in (".toml", ".json", ".prototxt") and path.is_file():
        pattern = re.compile(rf"^\s*\"?{re.escape(key)}\"?\s*[=:]")
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.match(line):
                return f"in {source}, line {number}"
    return f"in {source}"


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
        return dataclasses.asdict(config_from_document(values, str(path)))
    return values


def build_config(cli_values: dict[str, Any], config_file: str | None = None,
                 base: TrainConfig | None = None, solver_file: str | None = None) -> TrainConfig:
    """Defaults (or `base`, for a resume), then the env's preset, the file, a Caffe solver, then the flags."""
    file_values = load_toml(config_file) if config_file else {}
    if base is not None:
        config = base
    else:
        env_id = cli_values.get("env") or file_values.get("env") or TrainConfig.env
        config = merge(TrainConfig(), preset_for(env_id), f"the preset for {env_id}")
    config = merge(config, file_values, config_file or "the config file")
    if solver_file:
        from ddq.models.caffe import load_solver

        config = merge(config, load_solver(solver_file).as_settings(), solver_file)
    return merge(config, cli_values, "the command line")


# ------------------------------------------------------------------ settings across processes
SETTINGS_FORMAT = "ddq-settings"
SETTINGS_VERSION = 1
REDIS_URL_ENV = "DDQ_REDIS_URL"  # how the processes ddq starts receive the Redis URL: never on a command line
MASKED = "***"


def masked_url(url: str | None) -> str | None:
    """`url` with its password (and user name) replaced by ***: what files, logs and Redis keys may hold."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is not None or parts.username is not None:  # redis://user:password@host
        url = url.replace(parts.netloc, f"{MASKED}@" + parts.netloc.rsplit("@", 1)[1], 1)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(key in ("password", "username") for key, _ in pairs):  # unix:///path?password=...
        url = url.split("?", 1)[0] + "?" + urlencode(
            [(key, MASKED if key in ("password", "username") else value) for key, value in pairs], safe="*")
    return url


def has_masked_secret(url: str | None) -> bool:
    return bool(url) and MASKED in str(url)


def without_secrets(config: TrainConfig) -> TrainConfig:
    """A copy of `config` fit to be written down: the Redis URL's password masked."""
    return dataclasses.replace(config, redis_url=masked_url(config.redis_url))


def settings_document(config: TrainConfig) -> dict[str, Any]:
    """The resolved settings of a run as plain data, with a format and version, for another process.

    This is the only form in which settings leave the driver: the Spark tasks'
    closure, the shards' and Celery's settings file, the run's info in Redis
    (the dashboard) and checkpoints all carry this document. A Redis password is
    masked: processes ddq starts receive the URL in their environment instead."""
    return {"format": SETTINGS_FORMAT, "version": SETTINGS_VERSION,
            "config": dataclasses.asdict(without_secrets(config))}


def config_from_document(document: Any, source: str) -> TrainConfig:
    """The TrainConfig a `settings_document` holds. No preset is applied again: the driver already
    resolved every setting, so a child process runs exactly the driver's configuration."""
    if not isinstance(document, dict) or document.get("format") != SETTINGS_FORMAT:
        raise ValueError(f"{source} does not hold ddq settings")
    if document.get("version") != SETTINGS_VERSION:
        raise ValueError(f"{source} holds settings version {document.get('version')}; this ddq reads "
                         f"version {SETTINGS_VERSION}")
    return merge(TrainConfig(), document["config"], source)


def encode_settings(config: TrainConfig) -> str:
    """`settings_document` as JSON text."""
    return json.dumps(settings_document(config))


def decode_settings(text: str | bytes, source: str) -> TrainConfig:
    """The TrainConfig of `encode_settings`'s text; one clear error for anything else."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{source} is not JSON: {error}") from error
    return config_from_document(document, source)


def write_settings(config: TrainConfig, path: Path) -> Path:
    """The run's settings as a file (`settings.json` in a run folder) that processes ddq starts read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings_document(config), indent=1))
    return path


def read_settings(path: str | Path) -> TrainConfig:
    return decode_settings(Path(path).read_text(), str(path))


def field_type(annotation: Any) -> tuple[type, bool]:
    """(element type, is_list) of a field annotation such as `int | None` or `list[int]`."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return field_type(args[0])
    if typing.get_origin(annotation) is list:
        return args[0], True
    return annotation, False
