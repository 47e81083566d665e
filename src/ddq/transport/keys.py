"""The run's key plan: every Redis key a run uses, the line that names a run's id (its keys' prefix), how
the flat weights split into shard slices, and the names of their parts that telemetry shows.

Every process of a distributed run (driver, shards, workers, Celery, the
dashboard) talks through these keys, so they live here, below all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

RUN_ID_LINE = "ddq: run id "  # a distributed run prints it, then its id: the `<run>` of its keys below


def run_ids(output: str) -> list[str]:
    """The run ids a `ddq train`'s output (its stderr) named, in order: a resumed run's sessions each name one."""
    return [line[len(RUN_ID_LINE):].split()[0] for line in output.splitlines() if line.startswith(RUN_ID_LINE)]


def shard_bounds(size: int, shards: int) -> list[tuple[int, int]]:
    """[start, end) of each shard's contiguous slice of a flat vector of `size` values."""
    if not 1 <= shards <= size:
        raise ValueError(f"cannot split {size} parameters into {shards} shards")
    edges = [round(i * size / shards) for i in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


_LAYER_KINDS = {4: "conv", 2: "fc", 1: "norm"}


def readable_names(layout: list[tuple[str, tuple[int, ...]]]) -> list[str]:
    """Names a person reads: torch's `nn.Sequential` indices ("2.weight") become the layer's kind and
    its place among the layers with parameters ("fc2.weight", "conv1.bias", "norm3.weight" for PQN's
    LayerNorm; a dueling head's "8.value.weight" becomes "fc4.value.weight"); names a definition gave
    (a prototxt's layer names) stay as they are."""
    names: list[str] = []
    layers: dict[str, str] = {}  # module index -> readable layer name
    for name, shape in layout:
        module, _, rest = name.partition(".")
        if not module.isdigit() or not rest:
            names.append(name)
            continue
        if module not in layers:
            # by the shape of the layer's first parameter: a conv's weight is 4-D, a fully connected one's
            # 2-D, a norm layer's 1-D
            layers[module] = f"{_LAYER_KINDS.get(len(shape), 'layer')}{len(layers) + 1}"
        names.append(f"{layers[module]}.{rest}")
    return names


@dataclass(frozen=True)
class ShardKeys:
    grads: str  # list: gradient messages, pushed with LPUSH, taken with BRPOP/RPOP (first in, first out)
    weights: str  # string: the latest weights message of this shard's slice
    target: str  # string: the target network's slice, refreshed every C updates
    snapshot: str  # hash: weights, target, optimizer state and counters, every N updates
    metrics: str  # string: JSON of the babysitting numbers
    applied: str  # pub/sub channel: the version, each time gradients were applied (weights follow at once)
    store: str  # string: the URL of the Redis of the shard's own that holds the keys above but snapshot and
    # metrics (`ddq.transport.shard_stores`); absent: the run's Redis holds them


@dataclass(frozen=True)
class RunKeys:
    """Every Redis key of one run lives under `ddq:<run>:`, so runs can share a server."""

    run: str

    @property
    def prefix(self) -> str:
        return f"ddq:{self.run}"

    @property
    def control(self) -> str:
        """String: "stop" asks every process of the run to finish (ddq.lifecycle reads and writes it)."""
        return f"{self.prefix}:control"

    @property
    def stop_reason(self) -> str:
        """String: why the run was stopped, beside the control key (ddq.lifecycle)."""
        return f"{self.prefix}:stop_reason"

    @property
    def workers_finished(self) -> str:
        """String: set by the driver once its Spark job ended, so no worker pushes again (ddq.lifecycle)."""
        return f"{self.prefix}:workers_finished"

    @property
    def env_steps(self) -> str:
        """Integer: env steps played by all workers together (INCRBY)."""
        return f"{self.prefix}:env_steps"

    @property
    def episode_count(self) -> str:
        """Integer: training episodes ended by all workers together (INCRBY), a resumed run's earlier ones
        included: what the workers hold the episode budget against."""
        return f"{self.prefix}:episode_count"

    @property
    def pushes(self) -> str:
        """Integer: gradients pushed by all workers together (every shard gets each one)."""
        return f"{self.prefix}:pushes"

    @property
    def info(self) -> str:
        """String: JSON of the run itself (config, start time, state), written by the driver."""
        return f"{self.prefix}:info"

    @property
    def episodes(self) -> str:
        """List, append-only: JSON of each finished training episode (readers keep their own cursor)."""
        return f"{self.prefix}:episodes"

    @property
    def evaluations(self) -> str:
        """List, append-only: JSON of each greedy evaluation (the driver's, and Celery's of snapshots)."""
        return f"{self.prefix}:evaluations"

    @property
    def replay(self) -> str:
        """Hash: `version` of the latest evaluated Snake episode and `episode`, the JSON of its frames
        (a page reads the small version to know whether to fetch the large episode)."""
        return f"{self.prefix}:replay"

    @property
    def progress(self) -> str:
        """List, append-only: JSON of the driver's once-a-second progress points (the dashboard's series)."""
        return f"{self.prefix}:progress"

    @property
    def experience(self) -> str:
        """List: experience messages (`ddq.transport.experience`), LPUSHed by actors, taken by the learner."""
        return f"{self.prefix}:experience"

    @property
    def trained_steps(self) -> str:
        """Integer: env steps the learner has trained on (actor-learner's epsilon schedule follows it)."""
        return f"{self.prefix}:trained_steps"

    @property
    def eval_points(self) -> str:
        """Stream: actor-learner: the learner's weights at each eval_every mark (`ddq.transport.eval_points`)."""
        return f"{self.prefix}:eval_points"

    @property
    def round_ready(self) -> str:
        """Integer: actor-learner --sync: the last round every actor has sent (set after their barrier)."""
        return f"{self.prefix}:round_ready"

    @property
    def round_done(self) -> str:
        """Integer: actor-learner --sync: the last round the learner has trained on and published weights for."""
        return f"{self.prefix}:round_done"

    @property
    def workers(self) -> str:
        """Hash: worker id -> JSON of its latest statistics and heartbeat."""
        return f"{self.prefix}:workers"

    def stage_store(self, start: int) -> str:
        """Prefix: the torch.distributed store (`ddq.transport.stage_store`) where one start of a barrier
        stage's tasks form their process group: a stage the driver starts again forms under keys of its own."""
        return f"{self.prefix}:stage:{start}"

    @property
    def stage_start(self) -> str:
        """Counter: the newest start of the data-parallel stage; an earlier start's snapshots are refused."""
        return f"{self.prefix}:stage-start"

    def shard(self, index: int) -> ShardKeys:
        base = f"{self.prefix}:ps:{index}"
        return ShardKeys(f"{base}:grads", f"{base}:weights", f"{base}:target", f"{base}:snapshot",
                         f"{base}:metrics", f"{base}:applied", f"{base}:store")
