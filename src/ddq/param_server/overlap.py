"""A worker's parameter-server traffic on a thread of its own, overlapping the next gradient's computation:
DistBelief's Downpour SGD with its n_push and n_fetch.

The worker hands each gradient over and goes on computing. The sending
thread pushes what has accumulated since its last push (the mean of at least
`push_every` gradients: while a round trip is on the wire, the gradients
computed meanwhile join the next push), and every `fetch_every` pushes it
fetches the newest weights into a copy of its own, which the worker takes at
its next `sync`, a memory copy. Each push carries the versions of the weights
its oldest gradient was computed from, so the shards' staleness rules see the
true age.

The overlap's staleness is bounded, as in Stale Synchronous Parallel (Ho et
al. 2013): a gradient is computed on weights that lack at most `max_lag` of
the worker's own earlier ones; past that, the worker waits for a push and a
fetch that include them. The default (64) lets a worker ride out a 2-6 ms
round trip at full rate while a cut link stops it within 64 gradients, not
playing on, on ever older weights. 0 waits for every push, as Downpour
without the overlap did.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable

import numpy as np
import torch

from ddq.config import TrainConfig
from ddq.core.learner import Learner
from ddq.models import FlatParameters
from ddq.param_server.client import ParameterClient

WAIT_S = 0.1


class OverlappedClient:
    """A `ParameterSource` for a learner whose shards are reached by `client_for(weights, target)`, a
    `ParameterClient` filling copies of the learner's weights and target; its traffic runs on a thread."""

    def __init__(self, learner: Learner, client_for: Callable[[FlatParameters, FlatParameters], ParameterClient],
                 push_every: int = 1, fetch_every: int = 1, max_lag: int = 64):
        self.learner, self.push_every, self.fetch_every = learner, push_every, fetch_every
        # a push and a fetch wait for push_every * fetch_every gradients, which the bound must let through
        self.max_lag = max(max_lag, push_every * fetch_every - 1)
        self.staged = FlatParameters(copy.deepcopy(learner.online))  # the sender fetches into these
        self.staged_target = FlatParameters(copy.deepcopy(learner.target))
        self.client = client_for(self.staged, self.staged_target)
        self.used_versions: list[int] = []  # of the weights the learner holds
        self.pending = torch.zeros(learner.flat.size)  # the gradients not yet pushed, summed
        self.merged, self.samples, self.loss = 0, 0, 0.0
        self.pending_versions: list[int] = []
        self.fresh = False  # the staged weights are newer than the learner's
        self.handed = self.pushed_through = 0  # gradients handed to the sender; of those, the ones pushed
        self.staged_covers = self.held_covers = 0  # of those, the ones the staged (held) weights include
        self.hurry = False  # the worker waits on the sender: push and fetch what is pending now
        self.waited = 0  # times the worker waited for weights with its own gradients in them
        self.error: BaseException | None = None
        self.ready = threading.Condition()  # guards the pending gradient
        self.staging = threading.Lock()  # held while the sender fetches into the staged copies
        self.stopping = self.closed = False
        self.thread: threading.Thread | None = None

    @property
    def version(self) -> int:
        return max(sum(self.used_versions), 0)

    @property
    def waits(self) -> int:
        return self.client.waits + self.waited

    @property
    def pushes(self) -> int:
        return self.client.pushes

    def sync(self) -> bool:
        """Takes the weights (and target) the sender fetched last, if newer; waits on the network only when
        the worker's gradients are more than `max_lag` ahead of the weights it holds (or on the first call,
        which fetches them itself)."""
        self._raise_sender_error()
        if self.thread is None:
            self.client.sync()
            self._take_staged()
            self.thread = threading.Thread(target=self._send, name="parameter-traffic", daemon=True)
            self.thread.start()
            return True
        if self.handed - self.held_covers > self.max_lag:
            self._wait_for_cover(self.handed - self.max_lag)
            self.staging.acquire()
        elif not self.fresh or not self.staging.acquire(blocking=False):
            return False  # nothing new, or the sender is filling the copies right now: next time
        try:
            self._take_staged()
        finally:
            self.staging.release()
        return True

    def _wait_for_cover(self, gradients: int) -> None:
        """Until the staged weights include the first `gradients` this worker handed over."""
        self.waited += 1
        with self.ready:
            self.hurry = True
            self.ready.notify_all()
            while self.staged_covers < gradients and self.error is None:
                self.ready.wait(WAIT_S)
            self.hurry = False
        self._raise_sender_error()

    def _take_staged(self) -> None:
        self.learner.flat.data.copy_(self.staged.data)
        self.learner.target_flat.data.copy_(self.staged_target.data)
        self.used_versions = list(self.client.versions)
        self.held_covers, self.fresh = self.staged_covers, False

    def push(self, grad: torch.Tensor | np.ndarray, samples: int = 0, loss: float = 0.0) -> None:
        """Adds `grad` (computed from the weights of the last `sync`) to the next push; never waits."""
        self._raise_sender_error()
        if self.thread is None:
            raise RuntimeError("sync the weights before pushing a gradient computed from them")
        with self.ready:
            if self.merged == 0:
                self.pending.copy_(torch.as_tensor(grad))
                self.pending_versions = list(self.used_versions)
            else:
                self.pending.add_(torch.as_tensor(grad))
            self.merged, self.samples, self.loss = self.merged + 1, self.samples + samples, self.loss + loss
            self.handed += 1
            if self.merged >= self.push_every:
                self.ready.notify_all()

    def _due(self) -> bool:
        """Whether the sender has work: push_every gradients, what is left at the end, or a waiting worker's
        push and fetch."""
        return (self.merged >= self.push_every or self.stopping
                or self.hurry and (self.merged > 0 or self.staged_covers < self.pushed_through))

    def _send(self) -> None:
        gradient = torch.zeros_like(self.pending)
        try:
            while True:
                with self.ready:
                    while not self._due():
                        self.ready.wait(WAIT_S)
                    if self.stopping and self.merged == 0:
                        return  # nothing left to send
                    hurried, taken = self.hurry, None
                    if self.merged:
                        torch.div(self.pending, self.merged, out=gradient)  # the mean: one bigger-batch gradient
                        taken = (self.samples, self.loss / self.merged, self.pending_versions, self.handed)
                        self.merged, self.samples, self.loss = 0, 0, 0.0
                if taken is not None:
                    self.client.push(gradient.numpy(), samples=taken[0], loss=taken[1], versions=taken[2])
                    self.pushed_through = taken[3]
                if not self.stopping and (hurried or taken is not None and self.client.pushes % self.fetch_every == 0):
                    self._fetch()
        except BaseException as error:  # the worker raises it at its next push or sync
            self.error = error

    def _fetch(self) -> None:
        with self.staging:
            self.fresh = self.client.sync() or self.fresh
            self.staged_covers = self.pushed_through
        with self.ready:
            self.ready.notify_all()

    def _raise_sender_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the parameter server's traffic failed: {self.error}") from self.error

    def close(self) -> None:
        """Sends what is pending, then ends the thread and the connection (once: a second call does nothing)."""
        if self.closed:
            return
        self.closed = True
        with self.ready:
            self.stopping = True
            self.ready.notify_all()
        if self.thread is not None:
            self.thread.join(30.0)
        self.client.close()


def remote_source(config: TrainConfig, redis_url: str, run: str, worker: int) -> Callable[[Learner], OverlappedClient]:
    """What a Barista is handed in downpour: builds the client that keeps its learner's weights and target
    in step with the run's shards, its traffic overlapping the Barista's computing."""
    server = config.distributed.server

    def connect(learner: Learner) -> OverlappedClient:
        def client_for(weights: FlatParameters, target: FlatParameters) -> ParameterClient:
            return ParameterClient(redis_url, run, weights, server.shards, worker, target=target,
                                   max_backlog=server.max_backlog)
        return OverlappedClient(learner, client_for, server.push_every, server.fetch_every, server.max_lag)
    return connect
