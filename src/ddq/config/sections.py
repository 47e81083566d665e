"""The run's settings in sections: the agent's (all the core receives), the run's, the distribution's and the
services'. Each field says its default, its group in `ddq train --help-all` and its help (`setting`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddq.config.checks import finite_or_none, fraction, positive, positive_or_none
from ddq.config.optimizer import OptimizerConfig
from ddq.gamesim import DEFAULT_ENV_ID
from ddq.gamesim.envs import EnvOptions

SERIAL = "serial"  # one process; every other mode is distributed (Spark runs its workers)
MODES = (SERIAL, "downpour", "actor-learner", "data-parallel")
PRECISIONS = ("fp32", "bf16")


BY_HAND = "by-hand"  # downpour's shards started by hand, each on a host of its own (ServerConfig.shard_hosts)
SHARD_HOSTS = ("driver", BY_HAND)  # where downpour's shards run


def is_distributed(mode: str) -> bool:
    """Whether a mode runs workers on Spark, with Redis and the driver's services."""
    return mode != SERIAL


def workers_start_together(mode: str, sync: bool) -> bool:
    """Whether a mode's workers form a Spark barrier stage, which starts only once every one of them has a task
    slot: data-parallel's, and actor-learner's with --sync rounds."""
    return mode == "data-parallel" or (mode == "actor-learner" and sync)


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


@dataclass
class AgentConfig:
    """The DQN agent: its env, network, algorithm, exploration and arithmetic. All the core receives."""

    env: str = setting(DEFAULT_ENV_ID, "environment", "Gymnasium env id (ddq/Snake-v0, CartPole-v1, ALE/Pong-v5, ...)", True)
    num_envs: int = setting(8, "environment", "envs stepped together per actor")
    frame_stack: int = setting(1, "environment", "frames per state (stacked at sampling time)")
    env_options: EnvOptions = section(EnvOptions, "environment")
    model: str = setting("auto", "network", "Q-network: auto, mlp, small-conv, snake-conv (Snake's board as planes), snake-conv-wide (the same, twice the channels and units), snake-conv-turned (snake-conv on the board turned so the snake heads up), snake-conv-egocentric (turned and centred on its head), minatar, deepq, nature, a shipped definition (ddq models) or a Caffe .prototxt file")
    hidden: list[int] = setting([256, 256], "network", "MLP hidden layer widths")
    dueling: bool = setting(False, "network", "dueling heads: Q = V(s) + A(s, a) - mean A (Wang et al. 2016)")
    algo: str = setting("dqn", "algorithm", "%(algorithms)s; unnamed, the env's measured choice (CartPole-v1, LunarLander-v3: pqn), but dqn in actor-learner mode or beside a setting only DQN reads", True)
    q_lambda: float = setting(0.65, "algorithm", "pqn: lambda of its Q(lambda) returns (0: one-step targets; 1: returns to the rollout's end)")
    rollout_steps: int = setting(32, "algorithm", "pqn: vector steps of every env per rollout, then it trains on them")
    epochs: int = setting(2, "algorithm", "pqn: passes over each rollout")
    minibatches: int = setting(4, "algorithm", "pqn: minibatches per pass (each one gradient)")
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
    board_symmetries: bool = setting(False, "algorithm", "train on each minibatch's moves (DQN's replayed transitions, PQN's rollout rows) turned or mirrored by one of the board's 8 symmetries, at random (envs whose rules are the same on a turned board: Snake)")
    optim: OptimizerConfig = section(OptimizerConfig, "optimizer")
    epsilon_start: float = setting(1.0, "exploration", "initial exploration rate")
    epsilon_end: float = setting(0.05, "exploration", "final exploration rate")
    epsilon_steps: int = setting(10_000, "exploration", "env steps over which epsilon falls linearly")
    epsilon_delay: int = setting(0, "exploration", "env steps at epsilon_start before it starts to fall")
    seed: int = setting(0, "compute", "seed of envs, network init, exploration and replay sampling", True)
    device: str = setting("cpu", "compute", "torch device: cpu, cuda, cuda:1, auto", True)
    threads: int = setting(1, "compute", "torch CPU threads (one per process is fastest on few cores)")
    precision: str = setting("fp32", "compute", "gradient arithmetic: fp32, or bf16 autocast")

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        positive(self, "rollout_steps", "epochs", "minibatches")
        fraction(self, "q_lambda")
        positive(self, "num_envs", "batch_size", "frame_stack", "train_frequency", "target_update", "buffer_size",
                  "threads", "replay_ratio", "n_step")
        for name in ("learning_starts", "epsilon_steps", "epsilon_delay"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")
        fraction(self, "gamma", "epsilon_start", "epsilon_end", "priority_beta")
        positive_or_none(self, "max_grad_norm")
        if self.priority_alpha < 0:
            raise ValueError(f"priority_alpha must be at least 0, got {self.priority_alpha}")
        if any(width <= 0 for width in self.hidden) or not self.hidden:
            raise ValueError(f"hidden must list positive layer widths, got {self.hidden}")

    def rising_exploration(self) -> str | None:
        """Why these settings' exploration would rise as the agent learns (an end above the start), else None.
        Asked of the settings once all their sources are merged: a file's start may wait for a flag's end."""
        if self.epsilon_end <= self.epsilon_start:
            return None
        return (f"epsilon_end {self.epsilon_end} is above epsilon_start {self.epsilon_start}: exploration falls from "
                "epsilon_start to epsilon_end; give an end at most the start (equal: constant)")


@dataclass
class RunConfig:
    """One run: its mode, budgets, output folder, evaluations and checkpoints."""

    mode: str = setting("downpour", "run", f"training mode: {', '.join(MODES)} (default: one measured no slower "
                        "than serial to any target here: serial on one machine, where data-parallel takes 3x as long on a task of seconds; data-parallel with a "
                        "setting only distributed runs read, or a standalone cluster master; downpour or actor-learner with a setting only that "
                        "one reads; downpour on another cluster master, or spark-submit with no --spark-master)", True)
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
    checkpoint_every: int = setting(50_000, "evaluation", "env steps between a serial run's checkpoints (a distributed run's come with its evaluations)")
    save_replay: bool = setting(True, "evaluation", "save the replay memory with checkpoints, so that a resumed DQN run goes on exactly (PQN keeps no replay memory)")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        positive(self, "total_steps", "eval_episodes", "eval_every", "log_every", "checkpoint_every")
        fraction(self, "eval_epsilon")
        positive_or_none(self, "time_budget_s", "total_episodes")
        finite_or_none(self, "target_return")  # nan: never reached, and said nowhere


@dataclass
class ServerConfig:
    """The parameter server's settings (downpour)."""

    shards: int = setting(1, "parameter server", "parameter-server processes, each owning a slice of the weights")
    max_staleness: int | None = setting(None, "parameter server", "drop gradients more than this many updates old (none: keep all)")
    staleness_scaling: bool = setting(False, "parameter server", "divide each step by its gradient's staleness (Zhang et al. 2016)")
    snapshot_every: int = setting(1000, "parameter server", "updates between snapshots (Redis and a checkpoint file)")
    max_backlog: int = setting(8, "parameter server", "queued gradients per shard beyond which a worker waits")
    push_every: int = setting(1, "parameter server", "DistBelief's n_push: gradients a worker sums (as their mean) before a push; those computed while a push is on the wire join the next one")
    fetch_every: int = setting(1, "parameter server", "DistBelief's n_fetch: pushes between a worker's fetches of the weights")
    shard_hosts: str = setting("driver", "parameter server", "where the shards run: driver (ddq train starts them on this host; the run's Redis carries their gradients and weights) or by-hand (each is started by hand on a host of its own, `ddq param-server --listen ADDR`, and serves them from a Redis there, so their bytes go over that host's link: docs/cluster.md)")
    max_lag: int = setting(64, "parameter server", "gradients a worker may compute on weights that lack its own earlier ones while its pushes are on the wire (0: each waits for its predecessor's weights; at least push_every * fetch_every - 1 is allowed)")

    def __post_init__(self) -> None:
        positive(self, "shards", "snapshot_every", "max_backlog")
        if self.max_lag < 0:
            raise ValueError(f"max_lag must be at least 0, got {self.max_lag}")
        positive(self, "push_every", "fetch_every")
        if self.shard_hosts not in SHARD_HOSTS:
            raise ValueError(f"shard_hosts is {self.shard_hosts!r}; choose one of {', '.join(SHARD_HOSTS)}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError("max_staleness must be at least 0")


@dataclass
class DistributedConfig:
    """How a distributed run spreads: workers, Spark, Redis, the parameter server and actor-learner's rules."""

    workers: int = setting(2, "cluster", "Barista workers (Spark tasks) in distributed modes", True)
    spark_master: str | None = setting(None, "cluster", "Spark master URL: local[N] (this host), spark://HOST:PORT (a standalone cluster), yarn or k8s://https://HOST:PORT; with a cluster master the run's private Redis serves the executors over TLS (see --listen; docs/cluster.md) (default local[WORKERS])", True)
    redis_url: str | None = setting(None, "cluster", "Redis to use: redis://, rediss://, unix:// (default: $DDQ_REDIS_URL, which keeps a password off the command line; without it, a private redis-server ddq starts)")
    listen: str | None = setting(None, "cluster", "an address of this host where Spark's driver and the run's private Redis serve executors on other hosts; the Redis then speaks only TLS, with a certificate authority made for the run and $DDQ_REDIS_PASSWORD, or a password made for the run (default: this host only; with a cluster master and no redis_url, the address that reaches the master)")
    redis_port: int | None = setting(None, "cluster", "with --listen or a cluster master, the TLS port the run's private Redis serves other hosts on (default: a free one; fixed, a firewall can let the executors in)")
    stall_timeout: float = setting(300.0, "cluster", "seconds without a new env step from any worker after which the run ends, resumable: the driver lost its workers (a cut network), the cluster has no executor free, its master never takes the application, or Spark's JVM never answers as it starts (for which ddq waits 120 s at least); a data-parallel stage that trained and then stopped (a hung worker) is started again instead (at most 3 times within 10 minutes); once the run stops, workers that add no step for that long are ended")
    server: ServerConfig = section(ServerConfig, "parameter server")
    publish_every: int = setting(10, "actor-learner", "learner updates between weight publications (actor-learner's learner, data-parallel's worker 0; --sync: once a round)")
    send_every: int = setting(16, "actor-learner", "vector steps an actor sends per message")
    actor_backlog: int = setting(1, "actor-learner", "messages per actor waiting for the learner beyond which actors wait (more lets them act on older weights)")
    per_actor_epsilon: bool = setting(False, "actor-learner", "Ape-X's fixed epsilon per actor, 0.4^(1 + 7 i / (N - 1)), instead of the schedule")
    sync: bool = setting(False, "actor-learner", "rounds: every sync_every episodes the actors (a Spark barrier stage) meet in a gloo group, the learner trains on what arrived and all start the next round with the same weights")
    sync_every: int = setting(2, "actor-learner", "--sync: episodes each actor plays per round")

    def __post_init__(self) -> None:
        positive(self, "workers", "publish_every", "send_every", "sync_every", "actor_backlog", "stall_timeout")
        if self.redis_port is not None and not 1 <= self.redis_port <= 65535:
            raise ValueError(f"redis_port must be a TCP port, 1-65535, got {self.redis_port}")


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
            raise ValueError(f"sync rounds are a way of actor-learner training (mode actor-learner), not of "
                             f"{self.run.mode} mode")
        if self.distributed.server.shard_hosts == BY_HAND and self.run.mode != "downpour":
            raise ValueError(f"shards started by hand are downpour's (mode downpour), not {self.run.mode} mode's")
        if self.run.mode in ("actor-learner", "data-parallel") and self.distributed.server.shards != 1:
            raise ValueError(f"shards must be 1 in {self.run.mode} mode (the parameter server's shards are "
                             f"downpour's), got {self.distributed.server.shards}")
