"""Which numbered messages a receiver has taken from each sender: a repeat is never taken twice.

Every sender (a worker's client, an actor) draws a number when it starts,
numbers its messages in order and sends them in order over one connection,
so a receiver that saw message n from it has seen every earlier one that
arrived at all. A message numbered at
or below the last one taken is a repeat: a push sent again after a lost
reply, or a queue restored from Redis' persistence after the receiver had
already emptied it. Taking it again would apply one update twice. Number 0
means an unnumbered message (tests, tools), always taken.
"""

from __future__ import annotations


class SenderLedger:
    """The newest message number taken from each (sender, incarnation): the incarnation is the number a
    sender drew when it started, so a restarted one counts afresh."""

    def __init__(self) -> None:
        self.newest: dict[tuple[int, int], int] = {}
        self.last_taken: dict[int, tuple[int, int]] = {}  # sender -> (attempt, number) of its last message
        self.repeats = 0

    def take(self, sender: int, attempt: int, number: int) -> bool:
        """Records the message; False (and counted) when it repeats one already taken."""
        if number == 0:
            return True
        if number <= self.newest.get((sender, attempt), 0):
            self.repeats += 1
            return False
        self.newest[(sender, attempt)] = number
        self.last_taken[sender] = (attempt, number)
        return True

    def follows(self, sender: int, attempt: int, number: int) -> bool:
        """Whether the message is the one right after the sender's last one taken: none was lost between."""
        return self.last_taken.get(sender) == (attempt, number - 1)

    def state(self) -> list[list[int]]:
        """The newest number taken from each (sender, incarnation), as [sender, attempt, number] rows: what a
        snapshot keeps with the state it describes, so that a receiver restored from it refuses what the
        snapshot already holds."""
        return [[sender, attempt, number] for (sender, attempt), number in sorted(self.newest.items())]

    def load_state(self, rows: list[list[int]], repeats: int = 0) -> None:
        """Goes on from `state`'s rows (the repeats counted before, too)."""
        self.newest = {(int(sender), int(attempt)): int(number) for sender, attempt, number in rows}
        self.last_taken = {}
        self.repeats = repeats
