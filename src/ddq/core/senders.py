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

Key = tuple[int, int]  # (sender, incarnation)


class SenderLedger:
    """The newest message number taken from each (sender, incarnation): the incarnation is the number a
    sender drew when it started, so a restarted one counts afresh. It also keeps each one's exact account:
    messages taken, taken but dropped by the receiver (a gradient too stale, or newer than weights a restart
    rolled back), and refused as repeats."""

    def __init__(self) -> None:
        self.newest: dict[Key, int] = {}
        self.taken: dict[Key, int] = {}
        self.dropped: dict[Key, int] = {}
        self.refused: dict[Key, int] = {}
        self.last_taken: dict[int, tuple[int, int]] = {}  # sender -> (attempt, number) of its last message
        self.repeats = 0

    def take(self, sender: int, attempt: int, number: int) -> bool:
        """Records the message; False (and counted) when it repeats one already taken."""
        if number == 0:
            return True
        key = (sender, attempt)
        if number <= self.newest.get(key, 0):
            self.repeats += 1
            self.refused[key] = self.refused.get(key, 0) + 1
            return False
        self.newest[key] = number
        self.taken[key] = self.taken.get(key, 0) + 1
        self.last_taken[sender] = (attempt, number)
        return True

    def drop(self, sender: int, attempt: int, number: int) -> None:
        """Counts a message `take` took that the receiver then did not apply (a gradient too stale, or from
        the future of weights a restart rolled back)."""
        if number:
            self.dropped[(sender, attempt)] = self.dropped.get((sender, attempt), 0) + 1

    def follows(self, sender: int, attempt: int, number: int) -> bool:
        """Whether the message is the one right after the sender's last one taken: none was lost between."""
        return self.last_taken.get(sender) == (attempt, number - 1)

    def account(self) -> list[dict[str, int]]:
        """Per (sender, incarnation): `sent`, its newest number (it numbers from 1, in order, so every
        number up to it was sent), `applied`, `dropped` (taken, not applied), `repeats` (refused) and
        `lost` (numbers that never arrived: sent - applied - dropped)."""
        rows = []
        for (sender, attempt), newest in sorted(self.newest.items()):
            taken, dropped = self.taken.get((sender, attempt), 0), self.dropped.get((sender, attempt), 0)
            rows.append({"sender": sender, "incarnation": attempt, "sent": newest, "applied": taken - dropped,
                         "dropped": dropped, "repeats": self.refused.get((sender, attempt), 0),
                         "lost": newest - taken})
        return rows

    def state(self) -> list[list[int]]:
        """[sender, attempt, newest number, taken, dropped, refused] for each (sender, incarnation): what a
        snapshot keeps with the state it describes, so that a receiver restored from it refuses what the
        snapshot already holds, and its account goes on from there."""
        return [[sender, attempt, number, self.taken.get((sender, attempt), 0), self.dropped.get((sender, attempt), 0),
                 self.refused.get((sender, attempt), 0)] for (sender, attempt), number in sorted(self.newest.items())]

    def load_state(self, rows: list[list[int]], repeats: int = 0) -> None:
        """Goes on from `state`'s rows (the repeats counted before, too). Rows of three (a snapshot from
        before the account was kept) give a newest number only, as if every message up to it was applied."""
        self.newest, self.taken, self.dropped, self.refused = {}, {}, {}, {}
        for row in rows:
            sender, attempt, number, *counts = (int(value) for value in row)
            taken, dropped, refused = counts if len(counts) == 3 else (number, 0, 0)
            self.newest[(sender, attempt)] = number
            self.taken[(sender, attempt)], self.dropped[(sender, attempt)] = taken, dropped
            self.refused[(sender, attempt)] = refused
        self.last_taken = {}
        self.repeats = repeats
