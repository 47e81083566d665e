"""A learner's weights going out: to the workers (shard 0's keys, the parameter server's wire format, so to
a worker the learner is a parameter server) and to the driver's evaluations, on a thread of their own so
the training loop never waits on the network. Actor-learner's learner and data-parallel's rank 0 publish
through it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import torch

from ddq.transport.learner_channel import LearnerChannel
from ddq.transport.redis_client import Connection, StoreError
from ddq.transport.wire import WEIGHTS, Header, pack_header

log = logging.getLogger("ddq.publisher")
WAIT_S = 0.25


def weights_messages(layout: bytes, version: int, weights: torch.Tensor, target_version: int = 0,
                     target: torch.Tensor | None = None) -> list[bytes]:
    """Flat weights (and the target's, when given) as parameter-server weights messages."""
    messages = [pack_header(Header(WEIGHTS, layout, version, weights.numel()))
                + weights.detach().cpu().numpy().tobytes()]
    if target is not None:
        messages.append(pack_header(Header(WEIGHTS, layout, target_version, target.numel()))
                        + target.detach().cpu().numpy().tobytes())
    return messages


class WeightsPublisher:
    """Publishes the newest weights handed over (a newer hand-over replaces an older one not yet sent) and
    every evaluation point, in order. `failed` is set once Redis refused: the learner then stops.
    `plays_trained`: the publisher's learner played what it trained on (`publish_evaluation_point`)."""

    def __init__(self, client: Connection, run: str, plays_trained: bool = False):
        self.client, self.run, self.channel = client, run, LearnerChannel(client, run)
        self.plays_trained = plays_trained
        self.outbox: tuple[int, list[bytes], int] | None = None  # version, messages, trained steps
        self.eval_outbox: list[tuple[bytes, int]] = []  # weights of eval_every marks, with their trained steps
        self.ready = threading.Condition()
        self.sending = threading.RLock()  # the training loop and this thread both send weights
        self.trained_written = -1  # the largest count of env steps trained on that was written
        self.sent_version = -1  # of the newest weights sent: an older hand-over never overwrites them
        self.publications = 0
        self.stopping = threading.Event()
        self.failed = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="publish", daemon=True)

    def hand_over(self, version: int, messages: list[bytes], trained: int) -> None:
        with self.ready:
            if self.outbox is not None and len(self.outbox[1]) > len(messages):
                messages = [*messages, self.outbox[1][1]]  # a target not yet published stays due
            self.outbox = (version, messages, trained)
            self.ready.notify()

    def hand_over_point(self, message: bytes, trained: int) -> None:
        with self.ready:
            self.eval_outbox.append((message, trained))
            self.ready.notify()

    def send(self, client: Connection, version: int, messages: list[bytes], trained: int) -> None:
        """Publishes weights with the env steps they were trained on (the actors' epsilon follows that count)."""
        try:
            with self.sending:
                if version < self.sent_version:
                    return  # the training loop sent newer weights while this hand-over waited
                channel = self.channel if client is self.client else LearnerChannel(client, self.run)
                self.with_trained(trained, lambda steps: channel.publish_weights(version, messages, steps))
                self.sent_version = version
                self.publications += 1
        except StoreError as error:
            log.error("could not publish the weights (%s)", error)
            self.failed.set()

    def with_trained(self, trained: int, write: Callable[[int | None], None]) -> None:
        """Runs `write`, which writes the env steps trained on as the count it is given unless that is None:
        `trained`, unless a larger count was written. The count only ever rises, and the publishing thread and
        housekeeping both write it (the one that counted first may write last). Under `sending`, so two writes
        never cross on their way to Redis."""
        with self.sending:
            rises = trained > self.trained_written
            write(trained if rises else None)
            if rises:
                self.trained_written = trained

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Sends what was handed over, then ends the thread."""
        self.stopping.set()
        with self.ready:
            self.ready.notify()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self.ready:
                while self.outbox is None and not self.eval_outbox and not self.stopping.is_set():
                    self.ready.wait(WAIT_S)
                weights, self.outbox = self.outbox, None
                points, self.eval_outbox = self.eval_outbox, []
            if weights is None and not points:
                return
            if weights is not None:
                self.send(self.client, *weights)
            try:
                for message, trained in points:
                    self.channel.publish_evaluation_point(message, trained, self.plays_trained)
            except StoreError as error:
                log.error("could not publish an evaluation point (%s)", error)
                self.failed.set()
