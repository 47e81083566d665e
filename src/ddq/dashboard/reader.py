"""Everything the dashboard shows of one run, read from its Redis keys; nothing here writes.

Long series (episodes, progress points, evaluations) are append-only lists:
the reader mirrors each into NumPy columns, reading only what was appended
since its last request, and answers with downsampled copies.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ddq.config import TrainConfig, config_from_document
from ddq.dashboard.series import Columns, downsample
from ddq.gamesim.spec import score_of
from ddq.services.telemetry import merge_server, run_updates, shard_reports, worker_rows
from ddq.transport.keys import readable_names, shard_bounds
from ddq.transport.redis_client import Connection, StoreError
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.run_store import ListCursor, RunStore, runs_in
from ddq.transport.shard_stores import store_url
from ddq.transport.wire import BODY_DTYPE, WireError, layout_bytes, read_weights_header

MAX_FILTERS = 64  # first-layer images shown; a wide first layer shows its first units


class RunNotFound(LookupError, ValueError):
    """No run by the name asked for: a mistake the user can fix (the command line's exit 2)."""


class MirroredList:
    """An append-only Redis list of JSON objects, mirrored into numeric columns."""

    def __init__(self, cursor: ListCursor, flatten: Callable[[dict], dict] | None = None):
        self.cursor = cursor
        self.columns = Columns()
        self.flatten = flatten or (lambda entry: entry)
        self.lock = threading.Lock()

    def refresh(self) -> Columns:
        with self.lock:
            self.columns.append([self.flatten(entry) for entry in self.cursor.read_new()])
            return self.columns


def _flatten_progress(point: dict) -> dict:
    ratios = point.pop("layer_ratios", None)
    if isinstance(ratios, dict):
        point.update({f"ratio:{name}": value for name, value in ratios.items()})
    return point


@dataclass
class FirstLayer:
    """Where the first layer's weights sit in the flat vector and how they form images."""

    name: str
    count: int  # values read: the first `count` of the flat vector
    images: tuple[int, int, int, int]  # (filters, channels, height, width) of those values
    layout: bytes
    bounds: list[tuple[int, int]]


class RunReader:
    def __init__(self, client: Connection, run: str, redis_url: str | None = None):
        """`redis_url`: where `client` connects, which holds the password of the stores of shards started by
        hand (`ddq.transport.shard_stores`); without it their weights are read from the run's Redis only."""
        self.client, self.run, self.store = client, run, RunStore(client, run)
        self.redis_url = redis_url
        self._stores: dict[int, tuple[str, RunStore]] = {}  # each shard's store now: its URL, a client
        self._stores_lock = threading.Lock()
        self.episodes = MirroredList(self.store.cursor("episodes"))
        self.progress_points = MirroredList(self.store.cursor("progress"), _flatten_progress)
        self.evaluation_list = MirroredList(self.store.cursor("evaluations"))
        self._first_layer: FirstLayer | str | None = None
        self._config: TrainConfig | None = None

    # ------------------------------------------------------------------ the run
    def info(self) -> dict:
        info = self.store.info()
        if info is None:
            known = ", ".join(runs_in(self.client)) or "none"
            raise RunNotFound(f"no run {self.run!r} that ddq train started in this Redis (runs there: {known}; "
                              "a parameter server and Baristas started by hand record none for the dashboard)")
        return info

    def config(self, info: dict | None = None) -> TrainConfig:
        """The run's settings, decoded once from its info (the driver's settings document)."""
        if self._config is None:
            self._config = config_from_document((info or self.info()).get("settings"), f"run {self.run}'s info")
        return self._config

    def overview(self, server: dict | None = None, workers: list[dict] | None = None) -> dict:
        """The run's header: `server` and `workers` as `server()` and `workers()` read them, when the
        caller already has them (`live`)."""
        info = self.info()
        config = self.config(info)
        server = self.server(info) if server is None else server
        return {"run": self.run, "state": info.get("state"), "started": info.get("started"),
                "finished": info.get("finished"), "run_dir": info.get("run_dir"),
                "env": config.agent.env, "score": dataclasses.asdict(score_of(config.agent.env)),
                "mode": config.run.mode, "model": config.agent.model,
                "workers": config.distributed.workers, "shards": server["shards"],
                "total_steps": config.run.total_steps, "target_return": config.run.target_return,
                "env_steps": self.store.env_steps(), "pushes": self.store.pushes(),
                "updates": run_updates(server, self.workers() if workers is None else workers)[0],
                "episodes": self.store.length("episodes"), "evaluations": self.store.length("evaluations"),
                "summary": info.get("summary"), "restarts": info.get("restarts") or {},
                "evaluation_lag_s": info.get("evaluation_lag_s") or 0.0,
                "replay_version": self.store.replay_version()}

    def live(self, points: int) -> dict:
        """What the page polls once a second, in one answer, the parameter server and the workers read once."""
        server, workers = self.server(), self.workers()
        return {"run": self.overview(server, workers), "returns": self.returns(points),
                "progress": self.progress(points), "server": server, "workers": workers}

    def _started(self) -> float:
        started = self.info().get("started")
        return float(started) if isinstance(started, (int, float)) else 0.0

    # ------------------------------------------------------------------ series
    def returns(self, points: int) -> dict:
        """Training episode returns (bucket mean, min, max) and greedy evaluation scores."""
        started = self._started()
        episodes = self.episodes.refresh()
        evaluations = self.evaluation_list.refresh()
        return {"episodes": {"count": episodes.size, **downsample({
                    "wall_time_s": episodes.get("time") - started, "env_steps": episodes.get("env_steps"),
                    "episode_return": episodes.get("episode_return"), "length": episodes.get("length")},
                    points, spread=("episode_return",))},
                "evaluations": {"count": evaluations.size, **downsample({
                    "wall_time_s": evaluations.get("time") - started, "env_steps": evaluations.get("env_steps"),
                    "version": evaluations.get("version"), "mean_return": evaluations.get("mean_return"),
                    "mean_rewarded_steps": evaluations.get("mean_rewarded_steps")},
                    points)}}

    def progress(self, points: int) -> dict:
        """The driver's progress points: throughput, learning, per-layer update ratios."""
        columns = self.progress_points.refresh()
        names = ("wall_time_s", "env_steps", "updates", "updates_per_s", "env_steps_per_s", "pushes_per_s",
                 "loss", "mean_max_q", "epsilon", "rejected_total", "dropped_stale")
        ratios = sorted(name for name in columns.names() if name.startswith("ratio:"))
        series = downsample({name: columns.get(name) for name in (*names, *ratios)}, points)
        return {"count": columns.size, **{name: series[name] for name in names},
                "layer_ratios": {name[len("ratio:"):]: series[name] for name in ratios}}

    # ------------------------------------------------------------------ latest state
    def server(self, info: dict | None = None) -> dict:
        reports = shard_reports(self.store, self.config(info).distributed.server.shards)
        return {**merge_server(reports), "per_shard": [
            {key: report.get(key) for key in ("shard", "version", "applied", "updates_per_s", "rejected_total",
                                              "dropped_stale", "time")} for report in reports]}

    def workers(self) -> list[dict]:
        return worker_rows(self.store)

    def replay(self) -> dict | None:
        """The latest evaluated board episode: its frames (base64 uint8, side x side each) and palette."""
        replay = self.store.replay()
        if replay is None or not isinstance(replay.get("frames"), str) or not isinstance(replay.get("side"), int):
            return None
        return replay

    # ------------------------------------------------------------------ first layer
    def first_layer(self) -> dict:
        """The first layer's weights as grayscale images: conv filters, or an MLP's first units over the
        input frames. Each image is normalised on its own (-max|w| black, +max|w| white)."""
        layer = self._locate_first_layer()
        if isinstance(layer, str):
            return {"available": False, "reason": layer}
        values, version = self._read_prefix(layer)
        if values is None:
            return {"available": False, "reason": "no weights published yet"}
        filters, channels, height, width = layer.images
        images = np.nan_to_num(values[:filters * channels * height * width]).reshape(filters, -1)
        scale = np.abs(images).max(axis=1, keepdims=True)
        gray = np.round(127.5 + 127.5 * images / np.where(scale > 0, scale, 1.0)).astype(np.uint8)
        return {"available": True, "layer": layer.name, "version": version, "filters": filters,
                "channels": channels, "height": height, "width": width,
                "pixels": base64.b64encode(gray.tobytes()).decode()}

    def _locate_first_layer(self) -> FirstLayer | str:
        if self._first_layer is None:
            info = self.info()
            self._first_layer = self._first_layer_of(info.get("network"), self.config(info).distributed.server.shards)
        return self._first_layer

    @staticmethod
    def _first_layer_of(network: object, shards: int) -> FirstLayer | str:
        """From the network the driver described in the run's info (`telemetry.network_info`): nothing
        is built here."""
        if not isinstance(network, dict) or not network.get("layout"):
            return "the run's info does not describe its network"
        layout = [(str(name), tuple(int(n) for n in shape)) for name, shape in network["layout"]]
        size = sum(math.prod(shape) for _, shape in layout)
        shape = layout[0][1]
        name = readable_names(layout)[0]
        state = tuple(int(n) for n in network.get("state_shape") or ())
        if len(shape) == 4:
            images = shape
        elif len(shape) == 2 and len(state) == 3 and shape[1] == math.prod(state):
            images = (shape[0], *state)
        else:
            return f"the first layer ({name}, shape {'x'.join(map(str, shape))}) does not look at images"
        images = (min(images[0], MAX_FILTERS), *images[1:])
        return FirstLayer(name, math.prod(images), images, layout_bytes(str(network["layout_hash"])),
                          shard_bounds(size, shards))

    def _weights_of(self, shard: int) -> RunStore:
        """Where shard `shard` publishes its weights: its own store while a shard started by hand serves,
        else the run's Redis (where such a shard hands them back as it stops)."""
        if self.redis_url is None:
            return self.store
        key = self.store.keys.shard(shard).store
        url = store_url(self.client.get(key), key, self.redis_url)
        with self._stores_lock:  # the dashboard's requests run in threads of their own
            known = self._stores.get(shard)
            if known is not None and known[0] == url:
                return known[1]
            if known is not None:  # the shard stopped, or was started again elsewhere: its old store is gone
                del self._stores[shard]
                known[1].client.close()
            if url == self.redis_url:
                return self.store
            self._stores[shard] = (url, RunStore(connect_redis(url, retry=None), self.run))
            return self._stores[shard][1]

    def _read_prefix(self, layer: FirstLayer) -> tuple[np.ndarray | None, int]:
        """The first `layer.count` published weights, read with GETRANGE from the shards holding them."""
        parts, versions = [], []
        for shard, (start, end) in enumerate(layer.bounds):
            if start >= layer.count:
                break
            wanted = min(end, layer.count) - start
            try:
                head, body = self._weights_of(shard).weights_prefix(shard, wanted)
            except (StoreError, ValueError):  # a shard's store gone with its host, or a bad registration
                return None, 0
            try:
                header = read_weights_header(head, layer.layout, (start, end))
            except WireError:
                return None, 0
            if len(body) != 4 * wanted:
                return None, 0
            parts.append(np.frombuffer(body, dtype=BODY_DTYPE))
            versions.append(header.version)
        return np.concatenate(parts), min(versions)
