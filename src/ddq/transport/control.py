"""The run's control keys in Redis: the control key ("stop"), the stop reason beside it, and the driver's
word that the workers finished. What they mean (which reason is kept, what a hand-set key says) is
`ddq.lifecycle`'s; here are only the operations."""

from __future__ import annotations

from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import Connection

STOP = b"stop"  # the control key's value that ends a run


def is_stop(value: bytes | str | None) -> bool:
    """Whether a control key's raw value (as a pipeline read it) says stop."""
    return value is not None and (value.encode() if isinstance(value, str) else value) == STOP


class ControlKeys:
    """One run's control keys, through a connection."""

    def __init__(self, client: Connection, run: str):
        self.client, self.keys = client, RunKeys(run)

    def set_stop(self) -> None:
        self.client.set(self.keys.control, STOP)

    def says_stop(self) -> bool:
        return is_stop(self.client.get(self.keys.control))

    def keep_reason(self, reason: str) -> None:
        """Writes the stop reason unless one was written before (the first one given is kept)."""
        self.client.set(self.keys.stop_reason, reason, nx=True)

    def reason(self) -> str | None:
        """The stop reason written, or None."""
        raw = self.client.get(self.keys.stop_reason)
        if not raw:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def set_workers_finished(self) -> None:
        self.client.set(self.keys.workers_finished, "1")

    def workers_finished(self) -> bool:
        return bool(self.client.exists(self.keys.workers_finished))
