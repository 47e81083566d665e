"""How a distributed run's driver evaluates: its mirror of the weights, and the two ways evaluations are
timed. Downpour evaluates in line at each eval_every mark of the workers' env steps; actor-learner
and data-parallel evaluate, beside the run, the weights the learner kept at each mark of the env steps it
trained on (each mark as serial training's would be, but those a newer mark replaced while they waited)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch

from ddq.bookkeeping import RunRecord, evaluation_seed, play_evaluation
from ddq.config import TrainConfig
from ddq.core import checkpoint as ckpt
from ddq.core.dqn import next_mark
from ddq.core.learner import Learner
from ddq.modes.background_eval import BackgroundEvaluations
from ddq.modes.run_services import RunServices
from ddq.param_server.client import ParameterClient
from ddq.services.telemetry import record_evaluation
from ddq.transport.eval_points import EvaluationPoint
from ddq.transport.redis_client import StoreError
from ddq.transport.wire import layout_bytes

POINT_WAIT_MS = 200  # the points' reader waits this long on Redis per call: how soon it sees the run stop
POINT_RETRY_S = 0.1  # between its tries while Redis fails
# An evaluation this far behind its point is worth a line: the run learns of its target that much late (a
# data-parallel LunarLander run's one-core services host found it 13-31 s after the workers played it).
LAG_WARNING_S = 10.0


class WeightsMirror:
    """The driver's copy of the run's weights, synced from the weights service: what it evaluates and
    saves as the run's checkpoint (the service keeps its own, newer snapshots, which a resume starts from)."""

    def __init__(self, config: TrainConfig, learner: Learner, device: torch.device, run_dir: Path,
                 keep: Callable[[], None] = lambda: None):
        """`keep`: puts the weights service's newest snapshot beside each checkpoint (`WeightsService.keep`)."""
        self.config, self.learner, self.device, self.run_dir, self.keep = config, learner, device, run_dir, keep

    def connect(self, stack: contextlib.ExitStack, url: str, run: str, slices: int) -> None:
        self.client = ParameterClient(url, run, self.learner.flat, slices, target=self.learner.target_flat)
        stack.callback(self.client.close)

    @property
    def version(self) -> int:
        return self.client.version

    def sync(self) -> None:
        self.client.sync()

    def save(self, record: RunRecord) -> Path:
        """The run's checkpoint: the weights as of the last sync, with the run's counters; and the weights
        service's newest snapshot beside it, which a resume starts from."""
        path = self._write(record, ckpt.CHECKPOINT_NAME)
        self.keep()
        return path

    def _write(self, record: RunRecord, name: str, version: int | None = None) -> Path:
        """The weights (of `version`; None: as of the last sync), with the run's counters, as `name`."""
        self.learner.updates = self.client.version if version is None else version
        return ckpt.save_checkpoint(self.run_dir / name, self.config, self.learner, record.counters.as_dict(), {})

    def save_best_point(self, record: RunRecord, point: EvaluationPoint) -> Path:
        """best.pt with a published point's weights; the mirror's own are put back after (the next sync
        fetches only what moved)."""
        flat = self.learner.flat
        kept = flat.data.clone()
        flat.assign(point.weights)
        try:
            return self._write(record, ckpt.BEST_NAME, point.version)
        finally:
            flat.data.copy_(kept)

    def evaluate(self, record: RunRecord, services: RunServices, closing: bool) -> bool:
        """Greedy evaluation of the newest weights (at an eval_every mark, or `closing` the run), recorded and
        checkpointed (a driver killed later leaves a run to resume from here), and kept in best.pt when the
        best so far; True once the target return is reached."""
        self.sync()
        result = play_evaluation(self.learner.online, self.config,
                                 evaluation_seed(self.config, record.counters.env_steps, closing), self.device)
        noted = record.note(result, record.counters.env_steps, self.version)
        record_evaluation(services.store, "driver", self.version, record.counters.env_steps,
                          result.mean_return, [], mean_rewarded_steps=result.mean_rewarded_steps)
        if noted.best:
            self._write(record, ckpt.BEST_NAME)
        self.save(record)
        return noted.reached


class Evaluator(Protocol):
    @property
    def lag_s(self) -> float:
        """The longest an evaluation's result came after its weights reached the driver, this session (the
        summary's `evaluation_lag_s`)."""
        ...

    @property
    def skipped(self) -> int:
        """Evaluation points not evaluated because a newer one came while they waited (the summary's
        `evaluation_points_skipped`)."""
        ...

    def periodic(self, env_steps: int, stopping: bool) -> bool:
        """Evaluates what is due at `env_steps` of the run; True once an evaluation reached the target."""
        ...

    def close(self) -> None:
        ...


# Makes a run's evaluator; `wake` is the driver's loop's: set when a result waits to be noted.
EvaluatorFactory = Callable[[WeightsMirror, RunRecord, RunServices, threading.Event], Evaluator]


class InlineEvaluator:
    """Evaluates the mirror in the driver's loop once the workers' env steps cross each eval_every mark; marks
    they crossed between two of its looks are evaluated once, and the others count as skipped."""

    lag_s = 0.0  # it evaluates the weights of the moment

    def __init__(self, mirror: WeightsMirror, record: RunRecord, services: RunServices, wake: threading.Event):
        self.mirror, self.record, self.services = mirror, record, services
        self.next_eval = next_mark(record.counters.env_steps, record.config.run.eval_every)
        self.skipped = 0

    def periodic(self, env_steps: int, stopping: bool) -> bool:
        if env_steps < self.next_eval or stopping:
            return False
        every = self.record.config.run.eval_every
        self.skipped += (env_steps - self.next_eval) // every  # the marks passed since its last look, but one
        self.next_eval = next_mark(env_steps, every)
        return self.mirror.evaluate(self.record, self.services, closing=False)

    def close(self) -> None:
        pass


class LagClock:
    """How far a driver's evaluations run behind the points they evaluate. `lag_s`: the longest a result
    came after its point's arrival so far (a point left unanswered at the end counts what it had waited by
    then)."""

    def __init__(self) -> None:
        self.lag_s, self.warned = 0.0, False

    def answered(self, arrived: float, now: float) -> str | None:
        """Notes a result for the point that arrived at `arrived`; the line to say the first time one came
        LAG_WARNING_S or more after its point."""
        waited = now - arrived
        self.lag_s = max(self.lag_s, waited)
        if waited < LAG_WARNING_S or self.warned:
            return None
        self.warned = True
        return (f"an evaluation's result came {waited:.0f} s after its weights reached the driver (its episodes "
                f"are long, or the driver's host is busy): the run learns of its target that much late; a larger "
                f"--eval-every or fewer --eval-episodes ease it")

    def abandoned(self, oldest_arrival: float | None, now: float) -> None:
        """The run ended with points unanswered, the oldest arrived at `oldest_arrival` (None: none was)."""
        if oldest_arrival is not None:
            self.lag_s = max(self.lag_s, now - oldest_arrival)


class PointEvaluator:
    """Evaluates the evaluation points the learner published, beside the run and in order, skipping one a
    newer point replaced while it waited for a free thread (`ddq.modes.background_eval`). A point is
    logged at the env steps the actors had played when it was published.

    A thread of its own waits on the points' stream and hands each point to an evaluation as it arrives,
    and each result wakes the driver's loop: polled with the loop (every half second), a run learnt of
    its target about half a second late on average."""

    def __init__(self, mirror: WeightsMirror, record: RunRecord, services: RunServices, wake: threading.Event):
        self.mirror, self.record, self.services = mirror, record, services
        flat = mirror.learner.flat
        self.points = services.store.evaluation_points(layout_bytes(flat.layout_hash()), flat.size)
        self.background = BackgroundEvaluations(mirror.learner.online, record.config, mirror.device,
                                                on_result=wake.set)
        self.clock = LagClock()
        self.accepting = threading.Event()
        self.accepting.set()
        self.reader_failed: BaseException | None = None  # raised by the driver's next look
        self.reader = threading.Thread(target=self._read, name="evaluation-points", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        """Submits each new point until the run stops; a failed read (Redis restarting, or gone: the
        supervisor says so) is tried again."""
        try:
            while self.accepting.is_set():
                try:
                    points = self.points.read_new(block_ms=POINT_WAIT_MS)
                except StoreError:
                    time.sleep(POINT_RETRY_S)
                    continue
                for point in points:
                    if self.accepting.is_set():
                        self.background.submit(point)
        except Exception as error:  # the run must not go on without its evaluations: the driver raises it
            self.reader_failed = error

    def periodic(self, env_steps: int, stopping: bool) -> bool:
        if self.reader_failed is not None:
            raise self.reader_failed
        if self.background.failed is not None:
            raise self.background.failed
        if stopping:
            self.accepting.clear()  # no new evaluation starts once the run stops
        for line in list(self.points.refused):
            print(f"ddq: warning: {line}", file=sys.stderr, flush=True)
            self.points.refused.remove(line)
        reached = recorded = False
        for point, result, arrived in self.background.finished():
            if (late := self.clock.answered(arrived, time.monotonic())) is not None:
                print(f"ddq: warning: {late}", file=sys.stderr, flush=True)
            noted = self.record.note(result, point.env_steps, point.version, trained_steps=point.trained_steps)
            record_evaluation(self.services.store, "driver", point.version, point.env_steps,
                              result.mean_return, [], mean_rewarded_steps=result.mean_rewarded_steps)
            if noted.best:
                self.mirror.save_best_point(self.record, point)
            reached, recorded = reached or noted.reached, True
        if recorded:  # as in-line evaluations do: a driver killed now leaves a run to resume
            self.mirror.sync()
            self.mirror.save(self.record)
        return reached

    @property
    def lag_s(self) -> float:
        return self.clock.lag_s

    @property
    def skipped(self) -> int:
        return self.background.skipped

    def close(self) -> None:
        """Stops taking points and abandons the evaluations not finished (called again, does nothing more)."""
        self.accepting.clear()
        self.reader.join(POINT_WAIT_MS / 1000 + 1.0)  # past that, blocked on a Redis gone: it submits no more
        self.clock.abandoned(self.background.oldest_arrival(), time.monotonic())
        self.background.close()
