"""A barrier stage's collective: torch.distributed among its tasks (data-parallel's workers, --sync's actors).

Spark starts the stage's tasks together and numbers them; they form the
process group through a store in the run's Redis (`ddq.transport.stage_store`,
handed in), and torch.distributed does the rest (gloo on CPU, NCCL where each
rank has a GPU of its own, gloo where ranks share one).
Nothing here picks a fixed port or listens beyond the address the task was
given: in local mode that is 127.0.0.1.

Gloo reads its sockets on a thread of its own, which spins while a message has
arrived before its receiver's buffer is posted. On a one-core host that spin
holds the core the posting thread needs until the kernel's next tick: about a
third of the all-reduces took 4 ms, a mean of 1.5-1.7 ms for 1,000-132,467
floats. Run at SCHED_IDLE, the reading thread gives way the moment any other
thread of the host can run; the same all-reduces took 0.18-0.29 ms
(2026-11-27, two processes each pinned to a core). A collective call blocks
its caller, so the reader has the core whenever its rank waits on it (other
processes' threads on that core come first).

Newer torch builds name that thread gloo_tcp_loop; older ones (2.11) leave it
unnamed, so the reader is found as the thread gloo's link device starts.
Looked for by its name, torch 2.11's reader went on spinning: two ranks, each
on a core of a 16-vCPU machine, took a mean of 2.35-2.70 ms per all-reduce
of 132,467 floats, and 0.33 ms on a like machine once found (2026-11-28).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from ddq.transport.stage_store import StageStore


def thread_ids() -> set[int]:
    """This process's threads (none where the system has no /proc, as on macOS)."""
    return {int(thread) for thread in os.listdir("/proc/self/task")} if os.path.isdir("/proc/self/task") else set()


def gloo_link_device(host: str) -> Any:
    """Gloo's TCP device for links on `host` only, its socket reader (the thread the device starts) put at
    SCHED_IDLE (see above). Where the system has no /proc or SCHED_IDLE (macOS), gloo stays as it was."""
    before = thread_ids()
    device = dist.ProcessGroupGloo.create_device(hostname=host)
    if hasattr(os, "SCHED_IDLE"):
        for thread in thread_ids() - before:
            with contextlib.suppress(OSError):  # the thread ended meanwhile
                os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
    return device


def gpu_identity(device: torch.device, host: str) -> str | None:
    """Which GPU `device` is, the same for every process that sees it (its UUID; else `host` and its index
    there); None for a CPU."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return f"uuid {uuid}" if uuid else f"{host} {device.index}"


def every_rank_has_its_own_gpu(store: StageStore, rank: int, world: int, gpu: str | None) -> bool:
    """Whether each of the `world` ranks trains on a GPU and no two on one (`gpu`: this rank's, None for a
    CPU), the same answer on every rank: each tells the others its GPU through the stage's store."""
    store.set(f"gpu/{rank}", gpu or "")
    gpus = {store.get(f"gpu/{other}") for other in range(world)}
    return b"" not in gpus and len(gpus) == world


class Collective:
    """One task's membership of the stage's process group: average a tensor over the ranks, broadcast rank
    0's, agree on a flag. Every call is collective: each rank makes the same calls in the same order, and
    a call that waits past `timeout_s` (a rank gone) raises instead of waiting forever."""

    def __init__(self, rank: int, world: int, host: str, store: StageStore, timeout_s: float, device: torch.device):
        """`store`: where the ranks tell each other their links' addresses (the collective closes it);
        `host`: the address this rank's gloo links listen on."""
        if device.type == "cuda" and device.index is None:  # NCCL binds a rank to one GPU: "cuda" names none
            device = torch.device("cuda", torch.cuda.current_device())
        self.rank, self.world, self.device = rank, world, device
        # the seconds this rank spent in the stage's all-reduces and broadcasts, waiting there for slower ranks
        # included: what synchronous training costs a worker (its summary's `collective_s`)
        self.seconds = 0.0
        # gloo's own group object; else NCCL's, as the default group. NCCL needs a GPU of its own for every
        # rank: not two on one (more workers than a machine's GPUs, `cuda:N` for all), none on a CPU. Gloo
        # reduces CUDA tensors too, through the host.
        self.gloo = not every_rank_has_its_own_gpu(store, rank, world, gpu_identity(device, host))
        self.store: StageStore | None = store
        self.group: Any = self._group(store, host, datetime.timedelta(seconds=timeout_s))

    def _group(self, store: StageStore, host: str, timeout: datetime.timedelta) -> Any:
        if not self.gloo:  # NCCL finds its peers through the store, on the GPUs' own links
            dist.init_process_group("nccl", store=store, rank=self.rank, world_size=self.world, timeout=timeout,
                                    device_id=self.device)
            return dist.group.WORLD
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # torch's stubs leave it out
        options._devices = [gloo_link_device(host)]  # gloo's links: this address only
        options._timeout = timeout
        return dist.ProcessGroupGloo(store, self.rank, self.world, options)

    def average_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replaces `tensor` by its mean over the ranks, in place."""
        if self.world > 1:
            self._all_reduce(tensor)
            tensor.div_(self.world)
        return tensor

    def broadcast_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Replaces `tensor` by rank 0's, in place."""
        if self.world > 1:
            with self._counted():
                if self.gloo:
                    self.group.broadcast(tensor, 0).wait()
                else:
                    dist.broadcast(tensor, 0)
        return tensor

    def any(self, flag: bool) -> bool:
        """True on every rank if `flag` is True on any."""
        votes = torch.tensor([1.0 if flag else 0.0], device=self.device)
        if self.world > 1:
            self._all_reduce(votes)
        return bool(votes.item() > 0)

    def highest(self, number: int) -> int:
        """The highest of the ranks' `number`s, on every rank."""
        numbers = torch.tensor([number], dtype=torch.int64, device=self.device)
        if self.world > 1:
            self._all_reduce(numbers, dist.ReduceOp.MAX)
        return int(numbers.item())

    def from_rank_zero(self, number: int) -> int:
        """Rank 0's `number`, on every rank."""
        numbers = torch.tensor([number], dtype=torch.int64, device=self.device)
        return int(self.broadcast_(numbers).item())

    def totals(self, numbers: list[int]) -> list[int]:
        """Each of `numbers` summed over the ranks, on every rank (one all-reduce)."""
        summed = torch.tensor(numbers, dtype=torch.int64, device=self.device)
        if self.world > 1:
            self._all_reduce(summed)
        return [int(total) for total in summed.tolist()]

    def _all_reduce(self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> None:
        with self._counted():
            if not self.gloo:
                dist.all_reduce(tensor, op)
            elif op == dist.ReduceOp.SUM:  # every update's: gloo's default, with no options to build
                self.group.allreduce([tensor]).wait()
            else:
                options = dist.AllreduceOptions()
                options.reduceOp = op
                self.group.allreduce([tensor], options).wait()

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """Adds the time the collective call inside takes to `seconds`."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - began

    def close(self) -> None:
        """Leaves the group (Spark reuses the task's Python process, which may join another)."""
        if not self.gloo and dist.is_initialized():
            dist.destroy_process_group()
        if self.store is not None:
            self.store.close()
        self.group = self.store = None
