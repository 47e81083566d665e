"""What each Spark task of a distributed run runs, on an executor: a downpour Barista, an actor, or a rank of
data-parallel's barrier stage (`ddq.spark.job.SparkJob` submits them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ddq.config import decode_settings

if TYPE_CHECKING:
    from ddq.transport.collective import Collective

# --sync actors wait at their meeting for the slowest one's round, however long its episodes: Spark ends a
# barrier stage's other tasks when one fails, so the wait needs no deadline of its own
MEETING_TIMEOUT_S = 7 * 24 * 3600.0


def barista_task(index: int, _rows: Iterator, settings: str, redis_url: str, run: str, start: int
                 ) -> Iterator[dict]:
    """What a Spark task runs: one Barista, to the end of the run. Its statistics are the task's result.
    `settings` is the driver's `encode_settings` text, used as it is; `start`: which start of the job this is
    (`SparkJob`; 0 but for a barrier stage)."""
    from pyspark import TaskContext

    from ddq.param_server.overlap import remote_source
    from ddq.workers.barista import Barista

    context = TaskContext.get()
    attempt = context.attemptNumber() if context else 0
    config = decode_settings(settings, "the driver's settings")
    barista = Barista(config, redis_url, run, index, remote_source(config, redis_url, run, index), attempt)
    yield dataclasses.asdict(barista.run())


def actor_task(index: int, _rows: Iterator, settings: str, redis_url: str, run: str, start: int
               ) -> Iterator[dict]:
    """What a Spark task runs in actor-learner mode: one actor, sending experience to the learner until
    the run ends. Its weights come from the learner through the parameter server's client. With --sync the
    tasks form a barrier stage, and the actors meet between rounds in its process group (`stage_collective`):
    Spark's own allGather took 0.9 s a call on a local master, torch.distributed's all-reduce a millisecond."""
    import torch
    from pyspark import TaskContext

    from ddq.param_server.client import ParameterClient
    from ddq.workers.actor import ExperienceActor

    config = decode_settings(settings, "the driver's settings")
    sync = config.distributed.sync
    context = TaskContext.get()
    attempt = start if sync else context.attemptNumber() if context else 0  # Spark starts a barrier stage once
    meeting = stage_collective(index, redis_url, run, start, MEETING_TIMEOUT_S, torch.device("cpu")) if sync else None
    try:
        actor = ExperienceActor(config, redis_url, run, index,
                                lambda flat: ParameterClient(redis_url, run, flat, 1, index), attempt, meeting)
        yield dataclasses.asdict(actor.run())
    finally:
        if meeting is not None:
            meeting.close()


def data_parallel_task(index: int, _rows: Iterator, settings: str, redis_url: str, run: str, start: int
                       ) -> Iterator[dict]:
    """What a Spark task runs in data-parallel mode: one rank of the barrier stage's process group
    (`stage_collective`)."""
    from ddq.workers.data_parallel import DataParallelWorker

    config = decode_settings(settings, "the driver's settings")
    use_own_gpu(index, config.agent.device)
    # a collective waiting this long on a rank gone (its host vanished, its process hung) fails the stage:
    # twice the stall timeout, since the driver, seeing no env step for that long, starts the stage again
    # first (`ddq.modes.driver.StallWatch`); this is the backstop, and the first rendezvous's patience
    timeout = 2 * config.distributed.stall_timeout
    worker = DataParallelWorker(config, redis_url, run, index,
                                lambda device: stage_collective(index, redis_url, run, start, timeout, device), start)
    yield dataclasses.asdict(worker.run())


def use_own_gpu(rank: int, device: str) -> None:
    """Gives a rank of a barrier stage that trains on a GPU named without an index ("cuda", or "auto" where
    there is one) a GPU of its own, as NCCL requires of the ranks of one group: before, every rank on a
    machine took its first GPU."""
    import torch
    from pyspark import BarrierTaskContext

    from ddq.core.agent import resolve_device

    chosen = resolve_device(device)
    if chosen.type != "cuda" or chosen.index is not None:
        return
    resources = BarrierTaskContext.get().resources()
    assigned = list(resources["gpu"].addresses) if "gpu" in resources else []  # spark.task.resource.gpu.amount
    torch.cuda.set_device(gpu_for(rank, task_hosts(), assigned, torch.cuda.device_count()))


def gpu_for(rank: int, hosts: list[str], assigned: list[str], count: int) -> int:
    """The GPU rank `rank` trains on: the first Spark assigned its task, else its turn among the ranks on its
    host (`hosts`: each rank's), modulo the `count` GPUs there. An assigned address is a torch index as it
    stands: where the executor's CUDA_VISIBLE_DEVICES renumbers its GPUs, Spark's addresses count within it
    (as PySpark's TorchDistributor reads them), so the i-th visible device is torch's cuda:i."""
    if assigned:
        return int(assigned[0])
    return sum(1 for other in hosts[:rank] if other == hosts[rank]) % count


def task_hosts() -> list[str]:
    """The host of each task of this barrier stage, by rank: Spark's task addresses, less their ports."""
    from pyspark import BarrierTaskContext

    return [info.address.rsplit(":", 1)[0] for info in BarrierTaskContext.get().getTaskInfos()]


def stage_collective(index: int, redis_url: str, run: str, start: int, timeout_s: float, device: Any) -> Collective:
    """This barrier task's membership of its stage's process group, formed through a store in the run's Redis
    under keys of this `start` of the stage alone (a stage started again forms anew, whatever the tasks of an
    earlier start left there); its gloo links listen at the executor's own address as Spark knows it."""
    from ddq.transport.collective import Collective
    from ddq.transport.keys import RunKeys
    from ddq.transport.redis_client import connect as connect_redis
    from ddq.transport.stage_store import StageStore

    hosts = task_hosts()
    prefix = RunKeys(run).stage_store(start)
    return Collective(index, len(hosts), hosts[index], StageStore(connect_redis(redis_url), prefix, timeout_s),
                      timeout_s, device)
