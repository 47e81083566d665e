"""What a downpour run tells about itself through Redis, read back and combined in one place.

Writers: the Baristas (their stats hash and the episode log), the parameter
server's shards (a metrics JSON each), the Celery worker (evaluations and
the latest Snake replay) and the driver (the run's info and a progress point
every second). Readers: the driver, which condenses everything into those
progress points, and the dashboard, which shows them. Everything is JSON
parsed as data; an entry that is not a JSON object is skipped, never trusted.
The keys and commands are `ddq.transport.run_store`'s; here is what they mean.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from typing import Any

from ddq.transport.run_store import RunStore, json_object
from ddq.transport.values import counter_value, finite_number

SILENT_AFTER_S = 5.0  # a worker whose heartbeat is older than this is shown as silent


def _counts(value: Any, numbered: bool = False) -> dict[str, int]:
    """A report's counts by name (`numbered`: by a whole number, as staleness's are), whatever else it holds
    left out."""
    if not isinstance(value, dict):
        return {}
    counts = ((str(key), finite_number(count)) for key, count in value.items())
    return {key: int(count) for key, count in counts if count is not None and (not numbered or
                                                                               counter_value(key, -1) >= 0)}


def shard_reports(store: RunStore, shards: int) -> list[dict]:
    """The latest metrics JSON of each shard that has published one."""
    raw = store.shard_reports(shards)
    return [report for report in map(json_object, raw) if report is not None]


def merge_layers(per_shard: list[list[dict]]) -> list[dict]:
    """One row per parameter from the shards' rows (a parameter can straddle shards): norms add in squares."""
    parts: dict[str, dict[str, list[float]]] = {}
    for rows in per_shard:
        for row in rows if isinstance(rows, list) else []:
            if not isinstance(row, dict) or not isinstance(row.get("name"), str):
                continue
            norms = parts.setdefault(row["name"], {"weight_norm": [], "grad_norm": [], "update_norm": []})
            for key, shares in norms.items():
                shares.append(finite_number(row.get(key)) or 0.0)
    merged = []
    for name, norms in parts.items():  # (hypot: a norm of 1e200 squared is past a float's range)
        weight, grad, update = (math.hypot(*norms[k]) for k in ("weight_norm", "grad_norm", "update_norm"))
        merged.append({"name": name, "weight_norm": weight, "grad_norm": grad, "update_norm": update,
                       "update_ratio": finite_number(update / weight) if 0 < weight < math.inf else None})
    return merged


def merge_server(reports: list[dict]) -> dict:
    """The parameter server as one: every shard applies every gradient, so counts are the slowest
    shard's; rejections are each shard's own and add up; staleness judgments add up over shards.
    `shards`: the parameter server's that report; none in actor-learner or data-parallel, where the
    learner, or worker 0, reports in shard 0's place (`role` says which; `reports`: 1)."""
    if not reports:
        return {"shards": 0, "reports": 0, "version": 0, "applied": 0, "updates_per_s": 0.0, "dropped_stale": 0,
                "rejected": {}, "rejected_total": 0, "staleness": {}, "layers": [], "learning_rate": None,
                "mean_loss": None, "mean_max_q": None, "learner": None, "role": None}
    rejected: Counter[str] = Counter()
    staleness: Counter[str] = Counter()
    for report in reports:
        rejected.update(_counts(report.get("rejected")))
        staleness.update(_counts(report.get("staleness"), numbered=True))
    losses = [loss for loss in (finite_number(r.get("mean_loss")) for r in reports) if loss is not None]
    max_qs = [q for q in (finite_number(r.get("mean_max_q")) for r in reports) if q is not None]

    def slowest(key: str) -> float:
        return min(finite_number(r.get(key)) or 0 for r in reports)

    role = reports[0].get("role") if isinstance(reports[0].get("role"), str) else None
    return {"shards": 0 if role else len(reports), "reports": len(reports), "version": int(slowest("version")),
            "applied": int(slowest("applied")),
            "updates_per_s": slowest("updates_per_s"),
            "dropped_stale": int(max(finite_number(r.get("dropped_stale")) or 0 for r in reports)),
            "rejected": dict(rejected), "rejected_total": sum(rejected.values()),
            "staleness": dict(sorted(staleness.items(), key=lambda item: int(item[0]))),
            "layers": merge_layers([r.get("layers") or [] for r in reports]),
            "learning_rate": finite_number(reports[0].get("learning_rate")),
            "mean_loss": sum(losses) / len(losses) if losses else None,
            "mean_max_q": sum(max_qs) / len(max_qs) if max_qs else None,
            "learner": _learner(reports[0]),
            # who reports in shard 0's place: "learner" (actor-learner), "data-parallel" (its worker 0); None: shards
            "role": role}


LEARNER_FIELDS = ("replay_size", "ingested", "messages", "publications", "trained_steps", "policy_lag", "owed_updates")


def _learner(report: dict) -> dict | None:
    """An actor-learner run's learner numbers (its report stands where shard 0's would), else None."""
    if report.get("role") != "learner":
        return None
    numbers = {key: finite_number(report.get(key)) for key in LEARNER_FIELDS}
    ingested, applied = numbers["ingested"], finite_number(report.get("applied"))
    numbers["updates_per_env_step"] = applied / ingested if ingested and applied is not None else None
    return numbers


def collective_share(row: dict) -> float | None:
    """The share of a data-parallel worker's time spent in its stage's all-reduces and broadcasts, waiting
    there for slower workers included (its `collective_s` over its wall time): the worker with far less
    than the others is the one they wait for. None for a row without both (other modes, a worker starting)."""
    seconds, wall = finite_number(row.get("collective_s")), finite_number(row.get("wall_time_s"))
    return min(seconds / wall, 1.0) if seconds and wall else None


def worker_rows(store: RunStore, now: float | None = None) -> list[dict]:
    """Each worker attempt's latest statistics, by worker id and attempt, with its heartbeat's age and its
    `collective_share`; a silent state for one that stopped beating without saying it finished, and
    replaced for an attempt Spark retried (its steps and pushes still count)."""
    now = time.time() if now is None else now
    rows = []
    for stats in map(json_object, store.worker_rows()):
        if stats is None or finite_number(stats.get("worker")) is None:
            continue
        age = now - (finite_number(stats.get("heartbeat")) or 0.0)
        if stats.get("state") == "running" and age > SILENT_AFTER_S:
            stats["state"] = "silent"
        rows.append({**stats, "heartbeat_age_s": age, "restarts": int(finite_number(stats.get("attempt")) or 0),
                     "collective_share": collective_share(stats)})
    rows.sort(key=lambda row: (row["worker"], row["restarts"]))
    for older, newer in zip(rows, rows[1:]):
        if older["worker"] == newer["worker"] and older.get("state") in ("running", "silent"):
            older["state"] = "replaced"
    return rows


def lost_and_redone(rows: list[dict]) -> dict[str, list[dict]]:
    """What a run lost with workers that died (a crashed host, a killed task) and what retries redid:
    `worker_rows` attempts that were replaced or fell silent, and each one's next attempt. A lost attempt's
    env steps and pushes still count; the work it would have done was played by the others or its retry.
    Each row also says the weights version it reached, and the one it began with: a data-parallel stage
    restarted from its newest snapshot lost the updates between the two."""
    def brief(row: dict) -> dict:
        return {key: row.get(key) for key in ("worker", "attempt", "env_steps", "pushes", "state", "weights_version",
                                              "started_from")}

    lost = [row for row in rows if row.get("state") in ("replaced", "silent")]
    redone = [row for row in rows if any(row["worker"] == gone["worker"] and row["restarts"] > gone["restarts"]
                                         for gone in lost)]
    return {"lost": [brief(row) for row in lost], "redone": [brief(row) for row in redone]}


def played(rows: list[dict]) -> int:
    """The env steps `worker_rows` attempts say they played and counted, together: a Barista writes its row
    after its report, an actor's counts only the sends that returned, so each is at most what the run's count
    gained from that attempt (less for one that died between a report and its row)."""
    return sum(int(finite_number(row.get("env_steps")) or 0) for row in rows)


ACCOUNT_COUNTS = ("sent", "applied", "dropped", "repeats", "lost")


def sender_account(reports: list[dict]) -> dict[str, Any] | None:
    """The exact account of what each worker sent and what became of it, from the weights owners' reports
    (each shard's ledger, or the learner's): per worker, over its incarnations, messages `sent`, `applied`,
    `dropped` (too stale, or from the future of a rolled-back shard), refused as `repeats` (never applied
    twice) and `lost` on the way. Every shard takes every push, so their accounts agree (`shards_agree`)
    unless a push reached one shard and not another.
    `versions`: each owner's version with its account (a shard's is what it applied; the summary's
    `updates` are the driver's last copy of the weights, which can be a few behind)."""
    owners = [report for report in reports if isinstance(report.get("senders"), list)]
    accounts = [report["senders"] for report in owners]
    if not accounts:
        return None
    workers: dict[int, dict[str, int]] = {}
    for row in accounts[0]:
        if not isinstance(row, dict) or not isinstance(row.get("sender"), int):
            continue
        totals = workers.setdefault(row["sender"], {"worker": row["sender"], "incarnations": 0,
                                                    **dict.fromkeys(ACCOUNT_COUNTS, 0)})
        totals["incarnations"] += 1
        for count in ACCOUNT_COUNTS:
            totals[count] += int(finite_number(row.get(count)) or 0)
    rows = [workers[worker] for worker in sorted(workers)]
    return {"workers": rows, "applied": sum(row["applied"] for row in rows),
            "repeats": sum(row["repeats"] for row in rows),
            "shards_agree": all(account == accounts[0] for account in accounts),
            "versions": [report.get("version") for report in owners]}  # each owner's, as it reported the account


def _mean(rows: list[dict], key: str) -> float | None:
    values = [v for v in (finite_number(row.get(key)) for row in rows) if v is not None]
    return sum(values) / len(values) if values else None


def mean_staleness(histogram: dict[str, int], before: dict[str, int]) -> float | None:
    """The mean staleness of the gradients judged between two readings of the server's running histogram
    (`merge_server`'s), None when none was."""
    counts = {int(k): n - before.get(k, 0) for k, n in histogram.items()}
    if any(n < 0 for n in counts.values()):  # a shard restarted: its histogram began again
        counts = {int(k): n for k, n in histogram.items()}
    judged = sum(counts.values())
    return sum(k * n for k, n in counts.items()) / judged if judged > 0 else None


def run_updates(server: dict, workers: list[dict]) -> tuple[int, float]:
    """The run's updates so far and their rate now: as its weights owner reports them (a shard, the learner,
    data-parallel's worker 0), or before any report the workers' newest weights version and their running
    mean rate."""
    if server["reports"]:
        return server["version"], server["updates_per_s"]
    active = [row for row in workers if row.get("state") == "running"]
    return (int(max((finite_number(row.get("weights_version")) or 0 for row in workers), default=0)),
            _mean(active, "pushes_per_s") or 0.0)


def progress_point(server: dict, workers: list[dict], env_steps: int, started: float,
                   epsilon: float, now: float | None = None, staleness: float | None = None,
                   previous: dict | None = None) -> dict:
    """One point of the run's progress series: throughput, learning and the per-layer update ratios
    (updates: `run_updates`); without workers' losses and max-Q (actor-learner's actors train nothing)
    they are the learner's. `staleness`: the parameter server's mean since the previous point. With no
    worker running (a run's closing point), the env steps a second are the run's since `previous`, a point
    of the series a second or so before, and the pushes a second unknown: no worker reports the rates of
    its last second."""
    now = time.time() if now is None else now
    active = [row for row in workers if row.get("state") == "running"]
    updates, updates_per_s = run_updates(server, workers)
    loss, max_q = _mean(active, "loss"), _mean(active, "mean_max_q")
    env_steps_per_s: float | None = sum(finite_number(r.get("env_steps_per_s")) or 0.0 for r in active)
    pushes_per_s: float | None = sum(finite_number(r.get("pushes_per_s")) or 0.0 for r in active)
    if not active:
        seconds = now - previous["time"] if previous else 0.0
        env_steps_per_s = (env_steps - previous["env_steps"]) / seconds if previous and seconds > 0 else None
        pushes_per_s = None
    return {"time": now, "wall_time_s": now - started, "env_steps": env_steps, "updates": updates,
            "updates_per_s": updates_per_s, "env_steps_per_s": env_steps_per_s, "pushes_per_s": pushes_per_s,
            "loss": server["mean_loss"] if loss is None else loss,
            "mean_max_q": server.get("mean_max_q") if max_q is None else max_q,
            "epsilon": epsilon, "staleness": staleness, "policy_lag": (server["learner"] or {}).get("policy_lag"),
            "rejected_total": server["rejected_total"], "dropped_stale": server["dropped_stale"],
            "layer_ratios": {row["name"]: row["update_ratio"] for row in server["layers"]}}


def network_info(layout: list[tuple[str, tuple[int, ...]]], layout_hash: str, state_shape: tuple[int, ...]) -> dict:
    """What a reader needs to know of the run's Q-network without building one: its parameters' names and
    shapes in flat order, their layout hash (as in every weights message), and the state shape."""
    return {"layout": [[name, list(shape)] for name, shape in layout], "layout_hash": layout_hash,
            "state_shape": list(state_shape)}


def record_evaluation(store: RunStore, source: str, version: int, env_steps: int, mean_return: float,
                      returns: list[float], **extra: Any) -> dict:
    """Appends a greedy evaluation to the run's list (the driver's and Celery's alike); returns it."""
    record = {"source": source, "version": version, "time": time.time(), "env_steps": env_steps,
              "mean_return": mean_return, "returns": returns, **extra}
    store.append("evaluations", record)
    return record


def newest_rows(known: list[dict], read: list[dict]) -> list[dict]:
    """`known` worker rows updated by those just `read`, by worker and attempt, each the one with the newer
    heartbeat: a Redis restored from an older snapshot forgot rows or holds older ones, which do not
    replace what was read before."""
    rows = {(row["worker"], row["restarts"]): row for row in known}
    for row in read:
        key = (row["worker"], row["restarts"])
        beat, kept = (finite_number(r.get("heartbeat")) or 0.0 for r in (row, rows.get(key, {})))
        if key not in rows or beat >= kept:
            rows[key] = row
    return [rows[key] for key in sorted(rows)]


class RunReporter:
    """The driver's side of the telemetry: the run's info, and a progress point every `every_s`."""

    def __init__(self, store: RunStore, info: dict, shards: int, every_s: float = 1.0):
        self.store, self.shards, self.every_s = store, shards, every_s
        self.info = {**info, "state": "running", "started": info.get("started", time.time())}
        self.store.write_info(self.info)
        self._next = 0.0
        self.workers: list[dict] = []  # the newest worker rows read: what a summary keeps if Redis dies
        self._staleness: dict[str, int] = {}  # the server's staleness histogram at the previous point
        self._recent: deque[dict] = deque()  # the points of the last second or so

    def record_progress(self, env_steps: int, epsilon: float, force: bool = False) -> dict | None:
        """Appends a progress point, at most one per `every_s` unless `force`; returns it."""
        now = time.time()
        if not force and now < self._next:
            return None
        self._next = now + self.every_s
        server = merge_server(shard_reports(self.store, self.shards))
        self.workers = newest_rows(self.workers, worker_rows(self.store, now))
        # a parameter server's gradients' (actor-learner's learner applies its own: its lag is policy_lag)
        staleness = mean_staleness(server["staleness"], self._staleness) if server["learner"] is None else None
        self._staleness = server["staleness"]
        # a closing point's rate is the run's over its last second or more, not since a point just before (a
        # log mark's, or the last regular one): the newest point that old, else the oldest kept
        previous = next((p for p in reversed(self._recent) if now - p["time"] >= self.every_s),
                        self._recent[0] if self._recent else None)
        point = progress_point(server, self.workers, env_steps, self.info["started"], epsilon, now, staleness,
                               previous)
        self.store.append("progress", point)
        self._recent.append(point)
        while len(self._recent) > 1 and now - self._recent[1]["time"] >= self.every_s:
            self._recent.popleft()  # keeps the newest point a second old, and those since
        return point

    def record_restarts(self, restarts: dict[str, int]) -> None:
        """The processes the driver restarted so far (by name), in the run's info, when they changed."""
        if restarts != self.info.get("restarts", {}):
            self.info["restarts"] = dict(restarts)
            self.store.write_info(self.info)

    def record_evaluation_lag(self, lag_s: float) -> None:
        """The longest an evaluation's result came after its weights reached the driver so far (the summary's
        `evaluation_lag_s`), in the run's info, when it grew by a tenth of a second or more."""
        if lag_s >= self.info.get("evaluation_lag_s", 0.0) + 0.1:
            self.info["evaluation_lag_s"] = round(lag_s, 1)
            self.store.write_info(self.info)

    def finish(self, summary: dict) -> None:
        self.info.update(state="finished", finished=time.time(),
                         summary={k: v for k, v in summary.items() if k not in ("config", "workers")})
        self.store.write_info(self.info)
