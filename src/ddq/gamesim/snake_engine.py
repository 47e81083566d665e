"""Vectorized Snake: B games stepped at once with NumPy, no Python loop over games.

Rules (from the original project's slides): an n x n walled grid, one apple at
a time on a uniformly random empty cell, +1 for an apple (the snake grows by
one), -1 and the episode ends when the head leaves the grid or hits the body,
0 otherwise. Actions are north/south/east/west; an action that would reverse
into the neck keeps the current direction. An episode is truncated after
`max_steps_without_apple` steps without eating; with `starving_dies`, the
snake starves instead: -1 and the episode ends, as when it hits something.

The body is stored as a per-cell countdown: the head cell holds the snake's
length, the tail cell holds 1, empty cells 0. A step without eating decrements
every body cell (the tail vanishes), so moving costs a handful of array
operations whatever the snake's length.

Every game owns a counter-based random stream (splitmix64), so game i of a
batch draws exactly the numbers a single game seeded the same way draws: the
single-game Gymnasium env and the batch agree step for step.
"""

from __future__ import annotations

import numpy as np
from gymnasium.utils import seeding

NORTH, SOUTH, EAST, WEST = 0, 1, 2, 3
ACTION_NAMES = ("north", "south", "east", "west")
ACTION_MOVES = ((-1, 0), (1, 0), (0, 1), (0, -1))  # (row, col) of north, south, east, west
_DELTAS = np.array(ACTION_MOVES, dtype=np.int64)

# Gray levels of the rendered board (the network sees these pixels). The body fades from NECK next to
# the head down to TAIL at its end, so one frame tells head, body, tail and apple apart and the
# direction of travel (from the neck to the head) can be read off it.
EMPTY, WALL, TAIL, NECK, HEAD, APPLE = 0, 64, 96, 160, 208, 255

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
INITIAL_LENGTH = 3
# How a game ended, by code (0: it has not): the engine notes it on the step the game ends.
ENDINGS = ("", "filled the board", "hit a wall", "hit its body", "step limit")
PLAYING, FILLED, HIT_WALL, HIT_BODY, STEP_LIMIT = range(len(ENDINGS))


def stream_state_from_seed(seed: int | None) -> np.uint64:
    """The random-stream state a game seeded with `seed` starts from.

    Derived through Gymnasium's own seeding so that `env.reset(seed=s)` and
    game i of a batch reset with seed s - i start from the same state.
    """
    generator, _ = seeding.np_random(seed)
    return np.uint64(generator.integers(0, 2**63))


class SnakeEngine:
    """State and rules of `num_games` Snake games on `size` x `size` grids."""

    def __init__(self, num_games: int, size: int = 10, max_steps_without_apple: int | None = None,
                 starving_dies: bool = False):
        if size < 4:
            raise ValueError(f"Snake needs a grid of at least 4x4, got {size}")
        self.num_games = num_games
        self.size = size
        self.max_steps_without_apple = max_steps_without_apple or size * size
        self.starving_dies = starving_dies
        cells = size * size
        self.body = np.zeros((num_games, cells), dtype=np.int16)
        self.head = np.zeros(num_games, dtype=np.int64)  # flat cell index
        self.direction = np.full(num_games, EAST, dtype=np.int64)
        self.length = np.zeros(num_games, dtype=np.int16)
        self.apple = np.zeros(num_games, dtype=np.int64)  # flat cell index, -1 when the board is full
        self.steps_since_apple = np.zeros(num_games, dtype=np.int64)
        self.ending = np.zeros(num_games, dtype=np.int8)  # ENDINGS' code of how each game ended, 0 while it plays
        self.stream = np.zeros(num_games, dtype=np.uint64)
        self._games = np.arange(num_games)
        self._board = np.full((num_games, size + 2, size + 2), WALL, dtype=np.uint8)

    # ----------------------------------------------------------------- random
    def _uniform(self, games: np.ndarray) -> np.ndarray:
        """One uniform [0, 1) draw from each listed game's own stream."""
        self.stream[games] += _GOLDEN
        z = self.stream[games]
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
        return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)

    def seed(self, games: np.ndarray, seeds: list[int | None]) -> None:
        """Restart the random streams of `games` from `seeds`."""
        self.stream[games] = [stream_state_from_seed(s) for s in seeds]

    # ----------------------------------------------------------------- rules
    def reset(self, games: np.ndarray) -> None:
        """Start new episodes in `games` (indices or a boolean mask)."""
        games = self._games[games]
        if games.size == 0:
            return
        n = self.size
        row, col = n // 2, n // 2
        self.body[games] = 0
        for age, c in enumerate(range(col - INITIAL_LENGTH + 1, col + 1), start=1):
            self.body[games, row * n + c] = age
        self.head[games] = row * n + col
        self.direction[games] = EAST
        self.length[games] = INITIAL_LENGTH
        self.steps_since_apple[games] = 0
        self.ending[games] = PLAYING
        self._place_apples(games)

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance every active game by one move.

        Returns (reward float32, terminated bool, truncated bool) per game;
        inactive games do not move, draw no random numbers and get zeros.
        """
        n = self.size
        active = np.ones(self.num_games, dtype=bool) if active is None else active
        actions = np.asarray(actions, dtype=np.int64)
        reverses = actions == (self.direction ^ 1)
        self.direction = np.where(active & ~reverses, actions, self.direction)

        row, col = np.divmod(self.head, n)
        delta = _DELTAS[self.direction]
        new_row, new_col = row + delta[:, 0], col + delta[:, 1]
        off_grid = (new_row < 0) | (new_row >= n) | (new_col < 0) | (new_col >= n)
        target = np.clip(new_row, 0, n - 1) * n + np.clip(new_col, 0, n - 1)

        eats = active & ~off_grid & (target == self.apple)
        # Without eating the tail (countdown 1) moves away this step, so the
        # head may enter the tail's cell.
        occupied = self.body[self._games, target] > np.where(eats, 0, 1)
        dies = active & (off_grid | occupied)
        moves = active & ~dies

        shrinks = (moves & ~eats).astype(np.int16)[:, None]
        self.body -= (self.body > 0) * shrinks
        self.length += eats
        self.body[self._games[moves], target[moves]] = self.length[moves]
        self.head = np.where(moves, target, self.head)
        self.steps_since_apple = np.where(eats, 0, self.steps_since_apple + active)

        won = np.zeros(self.num_games, dtype=bool)
        eaters = self._games[eats]
        if eaters.size:
            won[eaters] = ~self._place_apples(eaters)
        hungry = moves & ~won & (self.steps_since_apple >= self.max_steps_without_apple)
        starves = hungry if self.starving_dies else np.zeros_like(hungry)
        reward = eats.astype(np.float32) - (dies | starves).astype(np.float32)
        terminated = dies | won | starves
        # the four are exclusive (won and hungry games moved; dead ones did not): writes in place, where
        # np.select built a new array of every game's code each step
        self.ending[won] = FILLED
        self.ending[dies & off_grid] = HIT_WALL
        self.ending[dies & ~off_grid] = HIT_BODY
        self.ending[hungry] = STEP_LIMIT
        return reward, terminated, hungry & ~starves

    def _place_apples(self, games: np.ndarray) -> np.ndarray:
        """Put a new apple on a uniformly random empty cell; False where none is left."""
        empty = self.body[games] == 0
        free = empty.sum(axis=1)
        choice = np.minimum((self._uniform(games) * free).astype(np.int64), np.maximum(free - 1, 0))
        cell = np.argmax(np.cumsum(empty, axis=1) > choice[:, None], axis=1)
        has_room = free > 0
        self.apple[games] = np.where(has_room, cell, -1)
        return has_room

    # ----------------------------------------------------------------- views
    def render(self) -> np.ndarray:
        """The boards as grayscale images (num_games, size+2, size+2), walls included."""
        n = self.size
        board = self._board
        interior = board[:, 1:-1, 1:-1]
        # Countdown c runs from 1 (tail) to length - 1 (neck): scale it onto TAIL..NECK.
        span = np.maximum(self.length.astype(np.int32) - 2, 1)[:, None]
        body = self.body.astype(np.int32)
        levels = TAIL + (body - 1) * (NECK - TAIL) // span
        interior[...] = np.where(body > 0, np.minimum(levels, NECK), EMPTY).reshape(-1, n, n)
        hr, hc = np.divmod(self.head, n)
        board[self._games, hr + 1, hc + 1] = HEAD
        has_apple = self.apple >= 0
        ar, ac = np.divmod(self.apple[has_apple], n)
        board[self._games[has_apple], ar + 1, ac + 1] = APPLE
        return board.copy()

    def text(self, game: int = 0) -> str:
        """A text picture of one board: # wall, O head, o body, . tail, * apple."""
        symbols = {EMPTY: " ", WALL: "#", TAIL: ".", HEAD: "O", APPLE: "*"}
        board = self.render()[game]
        return "\n".join("".join(symbols.get(int(v), "o") for v in row) for row in board) + "\n"
