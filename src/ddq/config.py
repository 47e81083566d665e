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


def setting(default: Any, group: str, help: str, brief: bool = False) -> Any:
    """A field of a settings section: its default, its group in `ddq train --help-all`, its help, and
    whether `ddq train --help` shows it (`brief`). Everything a new setting needs, in one place."""
    metadata = {"group": group, "help": help, "brief": brief}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(kind: type, group: str) -> Any:
    """A nested section (env options, optimizer, parameter server): its fields are in `group`."""
    return field(default_factory=kind, metadata={"group": group, "section": True})


def _positive(config: Any, *names: str) -> None:
    for name in names:
        if getattr(config, name) <= 0:
            raise ValueError(f"{name} must be positive, got {getattr(config, name)}")


def _fraction(config: Any, *names: str) -> None:
    for name in names:
        if not 0 <= getattr(config, name) <= 1:
            raise ValueError(f"{name} must be between 0 and 1, got {getattr(config, name)}")


def _positive_or_none(config: Any, *names: str) -> None:
    for name in names:
        if getattr(config, name) is not None and getattr(config, name) <= 0:
            raise ValueError(f"{name} must be positive (or none), got {getattr(config, name)}")


@dataclass
class AgentConfig:
    """The DQN agent: its env, network, algorithm, exploration and arithmetic. All the core receives."""

    env: str = setting(SNAKE_ID, "environment", "Gymnasium env id (ddq/Snake-v0, CartPole-v1, ALE/Pong-v5, ...)", True)
    num_envs: int = setting(8, "environment", "envs stepped together per actor")
    frame_stack: int = setting(1, "environment", "frames per state (stacked at sampling time)")
    env_options: EnvOptions = section(EnvOptions, "environment")
    model: str = setting("auto", "network", "Q-network: auto, mlp, deepq, nature, a shipped definition (ddq models) or a Caffe .prototxt file")
    hidden: list[int] = setting([256, 256], "network", "MLP hidden layer widths")
    dueling: bool = setting(False, "network", "dueling heads: Q = V(s) + A(s, a) - mean A (Wang et al. 2016)")
    buffer_size: int = setting(100_000, "algorithm", "replay memory capacity in transitions")
    batch_size: int = setting(64, "algorithm", "minibatch size")
    gamma: float = setting(0.99, "algorithm", "discount factor")
    n_step: int = setting(1, "algorithm", "n-step returns: rewards summed over this many steps before bootstrapping (1: the original one-step target)")
    learning_starts: int = setting(1_000, "algorithm", "env steps of pure exploration before training")
    train_frequency: int = setting(64, "algorithm", "env steps between training rounds")
    replay_ratio: float = setting(0.5, "algorithm", "gradient updates per env step (independent of workers)")
    target_update: int = setting(100, "algorithm", "updates between target-network refreshes (C)")
    double_dqn: bool = setting(True, "algorithm", "Double-DQN targets (off: the original max over the target net)")
    max_grad_norm: float | None = setting(10.0, "algorithm", "clip the gradient's global norm (none: off)")
    prioritized: bool = setting(False, "algorithm", "prioritized replay (proportional, Schaul et al. 2016)")
    priority_alpha: float = setting(0.6, "algorithm", "prioritized replay: how much priorities matter (0: uniform)")
    priority_beta: float = setting(0.4, "algorithm", "prioritized replay: importance-weight exponent at the start, annealed to 1 over total_steps")
    board_symmetries: bool = setting(False, "algorithm", "train on each replayed transition turned or mirrored by one of the board's 8 symmetries, at random (envs whose rules are the same on a turned board: Snake)")
    optim: OptimizerConfig = section(OptimizerConfig, "optimizer")
    epsilon_start: float = setting(1.0, "exploration", "initial exploration rate")
    epsilon_end: float = setting(0.05, "exploration", "final exploration rate")
    epsilon_steps: int = setting(10_000, "exploration", "env steps over which epsilon falls linearly")
    seed: int = setting(0, "compute", "seed of envs, network init, exploration and replay sampling", True)
    device: str = setting("cpu", "compute", "torch device: cpu, cuda, cuda:1, auto", True)
    threads: int = setting(1, "compute", "torch CPU threads (one per process is fastest on few cores)")
    precision: str = setting("fp32", "compute", "gradient arithmetic: fp32, or bf16 autocast")

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        _positive(self, "num_envs", "batch_size", "frame_stack", "train_frequency", "target_update", "buffer_size",
                  "threads", "replay_ratio", "n_step")
        for name in ("learning_starts", "epsilon_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")
        _fraction(self, "gamma", "epsilon_start", "epsilon_end", "priority_beta")
        _positive_or_none(self, "max_grad_norm")
        if self.priority_alpha < 0:
            raise ValueError(f"priority_alpha must be at least 0, got {self.priority_alpha}")
        if any(width <= 0 for width in self.hidden) or not self.hidden:
            raise ValueError(f"hidden must list positive layer widths, got {self.hidden}")


@dataclass
class RunConfig:
    """One run: its mode, budgets, output folder, evaluations and checkpoints."""

    mode: str = setting("downpour", "run", f"training mode: {', '.join(MODES)}", True)
    total_steps: int = setting(200_000, "run", "env steps to train for", True)
    total_episodes: int | None = setting(None, "run", "stop once this many training episodes have ended (every worker's together)")
    time_budget_s: float | None = setting(None, "run", "stop after this much wall time (from the command's start)", True)
    target_return: float | None = setting(None, "run", "stop once a greedy evaluation averages at least this", True)
    run_dir: str | None = setting(None, "run", "output folder (default runs/<env>-<time>)", True)
    progress: bool = setting(True, "run", "show a progress bar")
    eval_every: int = setting(5_000, "evaluation", "env steps between greedy evaluations")
    eval_episodes: int = setting(10, "evaluation", "episodes per greedy evaluation")
    eval_epsilon: float = setting(0.0, "evaluation", "exploration rate during evaluation")
    log_every: int = setting(1_000, "evaluation", "env steps between logged training points")
    checkpoint_every: int = setting(50_000, "evaluation", "env steps between checkpoints")
    save_replay: bool = setting(True, "evaluation", "save the replay memory with checkpoints (exact resumes)")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        _positive(self, "total_steps", "eval_episodes", "eval_every", "log_every", "checkpoint_every")
        _fraction(self, "eval_epsilon")
        _positive_or_none(self, "time_budget_s", "total_episodes")


@dataclass
class ServerConfig:
    """The parameter server's settings (downpour)."""

    shards: int = setting(1, "parameter server", "parameter-server processes, each owning a slice of the weights")
    max_staleness: int | None = setting(None, "parameter server", "drop gradients more than this many updates old (none: keep all)")
    staleness_scaling: bool = setting(False, "parameter server", "divide each step by its gradient's staleness (Zhang et al. 2016)")
    snapshot_every: int = setting(1000, "parameter server", "updates between snapshots (Redis and a checkpoint file)")
    max_backlog: int = setting(8, "parameter server", "queued gradients per shard beyond which a worker waits")

    def __post_init__(self) -> None:
        if self.shards < 1 or self.snapshot_every < 1 or self.max_backlog < 1:
            raise ValueError("shards, snapshot_every and max_backlog must be positive")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError("max_staleness must be at least 0")


@dataclass
class DistributedConfig:
    """How a distributed run spreads: workers, Spark, Redis, the parameter server and actor-learner's rules."""

    workers: int = setting(2, "cluster", "Barista workers (Spark tasks) in distributed modes", True)
    spark_master: str | None = setting(None, "cluster", "Spark master URL (default local[WORKERS])")
    redis_url: str | None = setting(None, "cluster", "Redis to use: redis://, rediss://, unix:// (default: a private redis-server ddq starts)")
    server: ServerConfig = section(ServerConfig, "parameter server")
    publish_every: int = setting(10, "actor-learner", "learner updates between weight publications (--sync: once a round)")
    send_every: int = setting(16, "actor-learner", "vector steps an actor sends per message")
    actor_backlog: int = setting(1, "actor-learner", "messages per actor waiting for the learner beyond which actors wait (more lets them act on older weights)")
    per_actor_epsilon: bool = setting(False, "actor-learner", "Ape-X's fixed epsilon per actor, 0.4^(1 + 7 i / (N - 1)), instead of the schedule")
    sync: bool = setting(False, "actor-learner", "rounds: every sync_every episodes each actor waits at a Spark barrier, the learner trains on what arrived and all start the next round with the same weights")
    sync_every: int = setting(2, "actor-learner", "--sync: episodes each actor plays per round")

    def __post_init__(self) -> None:
        _positive(self, "workers", "publish_every", "send_every", "sync_every", "actor_backlog")


@dataclass
class ServicesConfig:
    """What babysits a distributed run."""

    celery: bool = setting(True, "services", "run a Celery worker for background greedy evaluation of snapshots (distributed modes)")
    dashboard: bool = setting(True, "services", "serve the live dashboard on 127.0.0.1 while training (distributed modes)")
    dashboard_port: int | None = setting(None, "services", "the dashboard's port (default: a free one)")

    def __post_init__(self) -> None:
        if self.dashboard_port is not None and not 0 <= self.dashboard_port <= 65535:
            raise ValueError(f"dashboard_port must be a port number (0-65535), got {self.dashboard_port}")


@dataclass
class TrainConfig:
    """Everything that defines a training run, in sections: the agent's settings (all the core receives),
    the run's, the distribution's and the services'. A TOML file has the same sections ([agent],
    [agent.optim], [run], ...), or names settings without them: every setting's name is unique."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    run: RunConfig = field(default_factory=RunConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    services: ServicesConfig = field(default_factory=ServicesConfig)

    def __post_init__(self) -> None:
        if self.distributed.sync and self.run.mode != "actor-learner":
            raise ValueError(f"sync rounds are a way of actor-learner training, not of {self.run.mode} mode")
        if self.run.mode == "actor-learner" and self.distributed.server.shards != 1:
            raise ValueError(f"shards must be 1 in actor-learner mode (its one learner owns the weights), "
                             f"got {self.distributed.server.shards}")

    @classmethod
    def of(cls, **settings: Any) -> TrainConfig:
        """A configuration from settings named without their sections: `TrainConfig.of(env="CartPole-v1")`."""
        return merge(cls(), settings, "TrainConfig.of")


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
            raise ValueError(f"unknown setting {key!r} {_where(source, key)}; `ddq train --help` lists them")
        if path[:len(within)] != within:
            raise ValueError(f"{key} {_where(source, key)} is not a setting of [{'.'.join(within)}]; it belongs "
                             f"in [{'.'.join(path[:-1]) or 'the top level'}]")
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ValueError(f"{key} {_where(source, key)} must be a table of settings, not {value!r}")
            _collect(value, path, source, updates)
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


def _named(values: dict[str, Any], name: str) -> Any:
    """Setting `name` in `values`, named alone or inside its sections' tables; None when absent."""
    if name in values:
        return values[name]
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict) and (found := _named(value, name)) is not None:
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
        return dataclasses.asdict(config_from_document(values, str(path)))
    return values


def build_config(cli_values: dict[str, Any], config_file: str | None = None,
                 base: TrainConfig | None = None, solver_file: str | None = None) -> TrainConfig:
    """Defaults (or `base`, for a resume), then the env's preset, the file, a Caffe solver, then the flags."""
    file_values = load_toml(config_file) if config_file else {}
    if base is not None:
        config = base
    else:
        env_id = cli_values.get("env") or _named(file_values, "env") or AgentConfig.env
        config = merge(TrainConfig(), preset_for(env_id), f"the preset for {env_id}")
    config = merge(config, file_values, config_file or "the config file")
    if solver_file:
        from ddq.models.caffe import load_solver

        config = merge(config, load_solver(solver_file).as_settings(), solver_file)
    return merge(config, cli_values, "the command line")


# ------------------------------------------------------------------ settings across processes
SETTINGS_FORMAT = "ddq-settings"
SETTINGS_VERSION = 2  # 1: the same settings without sections, still read
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
    distributed = dataclasses.replace(config.distributed, redis_url=masked_url(config.distributed.redis_url))
    return dataclasses.replace(config, distributed=distributed)


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
    if document.get("version") not in (1, SETTINGS_VERSION):
        raise ValueError(f"{source} holds settings version {document.get('version')}; this ddq reads "
                         f"versions 1 to {SETTINGS_VERSION}")
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
