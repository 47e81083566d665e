"""The Celery app: greedy evaluation of a run's newest snapshot, and snapshot archiving, off the training path.

Broker and result backend are the run's Redis; tasks and results travel as
JSON only. It is configured from the environment, so it also works by hand:

    DDQ_REDIS_URL=unix:///tmp/redis.sock DDQ_RUN=demo DDQ_SETTINGS=runs/demo/config.json \\
        celery -A ddq.services.tasks worker --beat --pool solo --without-gossip --without-mingle --without-heartbeat

(the last three as `ddq train` starts its own: `ddq.services.celery_launch.ALONE` says why)

DDQ_SETTINGS is the settings file every distributed run writes into its
folder (`config.json`, read with `ddq.config.read_settings`: no preset is
applied again). DDQ_EVAL_EVERY_S (default 30) spaces the periodic
evaluations; DDQ_RUN_DIR (default: the folder DDQ_SETTINGS is in) holds
beat's schedule and the archive. Each result
goes to the Redis list `ddq:<run>:evaluations` as JSON (the snapshot's
version, the time, the run's env steps then, the returns); for Snake the
frames of one greedy episode go to the hash `ddq:<run>:replay`, for the dashboard.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import parse_qs, quote, urlparse

import numpy as np
from celery import Celery

from ddq.config import TrainConfig, celery_eval_every_s, read_settings
from ddq.services.telemetry import record_evaluation
from ddq.transport.keys import shard_bounds
from ddq.transport.redis_client import Connection
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.run_store import RunStore
from ddq.transport.wire import layout_bytes

if TYPE_CHECKING:
    import torch

    from ddq.models import FlatParameters

EPISODE_FRAMES_LIMIT = 2000  # frames kept of the recorded Snake episode


def celery_url(redis_url: str) -> str:
    """ddq's Redis URL in the form Celery's Redis transport and result backend take, with its user and
    password: a run that listens beyond loopback turns Redis' default user off, and a URL without them left
    its Celery worker retrying forever. The worker builds it from $DDQ_REDIS_URL, so the password stays in
    its environment, off any command line."""
    parsed = urlparse(redis_url)
    if parsed.scheme == "unix":
        query = parse_qs(parsed.query)
        user, password = (query.get(name, [""])[0] for name in ("username", "password"))
        login = f"{quote(user, safe='')}:{quote(password, safe='')}@" if user or password else ""
        return f"redis+socket://{login}{parsed.path}?virtual_host={query.get('db', ['0'])[0]}"
    if parsed.scheme == "rediss" and "ssl_cert_reqs" not in parse_qs(parsed.query):
        # Celery refuses a rediss:// URL that does not say it; redis-py and ddq require a verified one anyway
        return f"{redis_url}{'&' if parsed.query else '?'}ssl_cert_reqs=required"
    return redis_url


def _settings() -> tuple[str, str, TrainConfig, Path]:
    """The worker's Redis, run, settings and folder from its environment. The folder defaults to the one
    $DDQ_SETTINGS is in, the run's own: the run_dir written there is as `ddq train` was given it, relative
    to where that ran (a worker started by hand elsewhere failed to write beat's schedule there)."""
    url = os.environ.get("DDQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    settings_file = os.environ.get("DDQ_SETTINGS")
    try:
        config = read_settings(settings_file) if settings_file else TrainConfig()
    except (OSError, ValueError) as error:
        _refuse(f"$DDQ_SETTINGS {settings_file}: {error} (it is the config.json a distributed run writes into its "
                "folder)")
    folder = Path(settings_file).parent if settings_file else Path(config.run.run_dir or ".")
    return url, os.environ.get("DDQ_RUN", "default"), config, Path(os.environ.get("DDQ_RUN_DIR") or folder)


def _eval_every_s() -> float:
    """$DDQ_EVAL_EVERY_S; for a worker started by hand with a wrong one, one line and exit 2 (a run checks it
    before it starts any worker, `ddq.preflight`)."""
    try:
        return celery_eval_every_s(os.environ)
    except ValueError as error:
        _refuse(str(error))


def _refuse(line: str) -> NoReturn:
    """One line and exit 2, for a worker started by hand with a wrong setting, where Celery printed its
    usage and tracebacks."""
    print(f"ddq: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None


REDIS_URL, RUN, CONFIG, RUN_DIR = _settings()
app = Celery("ddq", broker=celery_url(REDIS_URL), backend=celery_url(REDIS_URL))
app.conf.update(
    task_serializer="json", result_serializer="json", accept_content=["json"],  # nothing else is decoded
    broker_connection_retry_on_startup=True, worker_hijack_root_logger=False, result_expires=3600,
    beat_schedule={"evaluate-newest-snapshot": {"task": "ddq.tasks.evaluate_snapshot",
                                                "schedule": _eval_every_s()}},
    beat_schedule_filename=str(RUN_DIR / "celerybeat-schedule"),
    # no broadcast commands (shutdown, pool changes, rate limits): any process that can write to the run's
    # Redis could send them, and ddq sends none (its supervisor stops the worker by signal)
    worker_enable_remote_control=False,
)
KEPT = ("celery.backend_cleanup",)  # Celery's own tasks the worker keeps: beat's cleanup of old results


@app.on_after_finalize.connect
def _ddqs_tasks_only(sender: Celery, **_: Any) -> None:
    """The worker runs ddq's tasks alone: Celery's canvas tasks (starmap, chunks, group, ...) would let one
    message in the run's Redis run ddq's evaluation any number of times."""
    for name in [name for name in sender.tasks if not name.startswith("ddq.tasks.") and name not in KEPT]:
        sender.tasks.unregister(name)


def newest_snapshot(client: Connection, run: str, config: TrainConfig, flat: FlatParameters,
                    target: torch.Tensor) -> int | None:
    """Loads the newest snapshot, assembled from every shard's, into `flat` and `target`; returns its
    version, or None before the first snapshot."""
    from ddq.transport import snapshots

    layout = layout_bytes(flat.layout_hash())
    versions = []
    for shard, bounds in enumerate(shard_bounds(flat.size, config.distributed.server.shards)):
        saved = snapshots.shard_weights(client, run, shard, layout, bounds)
        if saved is None:
            return None
        flat.assign(saved.weights.numpy(), bounds[0])
        flat.assign(saved.target.numpy(), bounds[0], into=target)
        versions.append(saved.version)
    return min(versions)


# The tasks take no arguments: their messages come through the run's Redis, which every executor may write to,
# and a folder or an episode count in one would let any of them choose where this host writes, or how long its
# worker is kept busy.
@app.task(name="ddq.tasks.evaluate_snapshot")
def evaluate_snapshot() -> dict | None:
    """Greedy evaluation of the newest snapshot (the run's eval_episodes); the result is also appended to the
    run's list."""
    from ddq.core.agent import env_spec
    from ddq.core.evaluate import evaluate

    client = connect_redis(REDIS_URL)
    newest = _newest_learner(client)
    if newest is None:
        return None
    version, learner = newest
    network = learner.online.train(False)
    agent = CONFIG.agent
    result = evaluate(network, agent.env, CONFIG.run.eval_episodes, agent.frame_stack, agent.env_options,
                      seed=CONFIG.agent.seed + version, epsilon=CONFIG.run.eval_epsilon)
    store = RunStore(client, RUN)
    env_steps = store.env_steps()
    record = record_evaluation(store, "celery", version, env_steps, result.mean_return, result.returns,
                               mean_rewarded_steps=result.mean_rewarded_steps)
    palette = env_spec(CONFIG.agent).board_palette  # a board env's: its episode is replayed on the dashboard
    if palette is not None:
        replay = _board_episode(network, version, dict(palette))
        episode = {**replay, "version": version, "time": record["time"], "env_steps": env_steps,
                   "mean_return": result.mean_return}
        store.write_replay(version, episode)
    return record


def _board_episode(network: torch.nn.Module, seed: int, palette: dict[str, str]) -> dict:
    """One greedy episode's board images (uint8 gray levels, base64), the `palette` they are painted with,
    and frame by frame the score so far and the env's length where it gives one (the snake's), for the
    dashboard to replay."""
    from ddq.core.evaluate import greedy_episode_frames

    options = dataclasses.replace(CONFIG.agent.env_options, step_latency_ms=0.0)  # a replay need not sleep
    episode = greedy_episode_frames(network, CONFIG.agent.env, CONFIG.agent.frame_stack, options, seed=seed,
                                    max_frames=EPISODE_FRAMES_LIMIT)
    frames = episode.frames
    return {"side": int(frames[0].shape[0]), "count": len(frames),
            "frames": base64.b64encode(np.stack(frames).tobytes()).decode(), "palette": palette,
            "scores": episode.rewarded_steps, "lengths": episode.lengths}


@app.task(name="ddq.tasks.archive_snapshot")
def archive_snapshot() -> str | None:
    """Writes the newest snapshot into the run folder's archive/ as a checkpoint file that `ddq evaluate` reads;
    returns its path."""
    from ddq.core import checkpoint as ckpt

    newest = _newest_learner(connect_redis(REDIS_URL))
    if newest is None:
        return None
    version, learner = newest
    out = RUN_DIR / "archive"
    out.mkdir(parents=True, exist_ok=True)
    path = ckpt.save_checkpoint(out / f"snapshot-v{version}.pt", CONFIG, learner, {"version": version}, {})
    return str(path)


def _newest_learner(client: Connection):
    """(version, a learner holding the newest snapshot's weights and target), or None before the first.
    torch is imported here, by the first job, not as the worker starts: beside a starting run its import
    took a core's second and a half from the Spark workers' own."""
    import torch

    from ddq.core.agent import env_spec, make_learner

    torch.set_num_threads(CONFIG.agent.threads)  # evaluation is a background job: no spinning thread pool

    spec = env_spec(CONFIG.agent)
    learner = make_learner(CONFIG.agent, spec.frame_shape, spec.num_actions, torch.device("cpu"))
    version = newest_snapshot(client, RUN, CONFIG, learner.flat, learner.target_flat.data)
    if version is None:
        return None
    learner.updates = version
    return version, learner
