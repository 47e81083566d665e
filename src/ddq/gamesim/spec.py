"""An env's facts, read once per process into a typed spec (Gymnasium's EnvSpec and spaces are the model).

Everything ddq needs to know of an env outside `gamesim/` is here: the frame
the replay memory stores, the number of actions, the moves board symmetries
turn, the palette a replay is painted with, and what its score is called.
Other packages ask the spec, never the env's id.

Each process reads its own spec, once, from the env id and env options its
settings carry (the settings document does not carry the spec): every process
that needs one builds envs or a network anyway, the document and checkpoints
keep their format, and a spec read where the env runs cannot disagree with
the installed env. Readers of a run that build no env (the dashboard, plots)
take only the declared score (`score_of`).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from ddq.gamesim import SNAKE_ID
from ddq.gamesim.envs import EnvOptions, board_action_moves, make_vector_env
from ddq.gamesim.snake import board_palette
from ddq.gamesim.snake_engine import ACTION_MOVES, APPLE, HEAD, NECK, TAIL, WALL


@dataclass(frozen=True)
class Score:
    """What an env's score is called, for people (the summary, the progress bar, the dashboard, plots).

    `rewarded_steps`: the score counts an episode's positively rewarded steps (Snake's apples eaten) and is
    reported by `name` beside the return; otherwise the return is the score."""

    name: str = "return"
    unit: str = "per episode"
    rewarded_steps: bool = False

    @property
    def summary_field(self) -> str:
        """The field of a run's summary.json that holds its final greedy score (`bookkeeping.run_summary`)."""
        return f"final_eval_mean_{self.name}" if self.rewarded_steps else "final_eval_return"


RETURN = Score()
_SCORES = {SNAKE_ID: Score("apples", "per episode", rewarded_steps=True)}

BOARD_GAME = "Snake"  # ddq's own board game, as messages name it (it declares board symmetries)
# The gray levels of its board as the board-planes network ("snake-conv") splits them: one plane per mark
# (walls, apple, head), and the body's levels (low, high) as a body plane and its order.
BOARD_PLANES: tuple[tuple[int, ...], tuple[int, int]] = ((WALL, APPLE, HEAD), (TAIL, NECK))
# What the heading view (the board as the snake sees it) reads: the head's and the neck's levels (the
# heading runs from the neck to the head), the level of what lies beyond the board, and each action's move.
BOARD_HEADING: tuple[int, int, int, tuple[tuple[int, int], ...]] = (HEAD, NECK, WALL, ACTION_MOVES)


def score_of(env_id: str) -> Score:
    """An env's score as declared, without building the env: for readers of a run that may lack its
    env's extras (the dashboard, plots)."""
    return _SCORES.get(env_id, RETURN)


def frame_layout(space: Any) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of one frame of a Gymnasium observation space; DQN needs both known (a Box).

    A one-channel image (height, width, 1) is stored as (height, width): stacked frames are the
    channels the network sees."""
    if space.shape is None or space.dtype is None:
        raise ValueError(f"DQN needs observations of a known shape and dtype; got {space}")
    shape = tuple(space.shape)
    return (shape[:2] if len(shape) == 3 and shape[2] == 1 else shape), np.dtype(space.dtype)


@dataclass(frozen=True)
class EnvSpec:
    """One env's facts as ddq uses them, read once per process by `read_env_spec`."""

    env_id: str
    frame_shape: tuple[int, ...]  # one frame as the replay memory stores it (`frame_layout`)
    frame_dtype: np.dtype
    num_actions: int  # of a discrete action space (the only kind DQN plays)
    score: Score = RETURN
    # The (row, col) move of each action on a board whose rules stay the same turned or mirrored (what
    # board symmetries turn); None: the env declares no symmetries.
    action_moves: tuple[tuple[int, int], ...] | None = None
    # A board env's gray levels as a replay paints them ({"level": "#rrggbb"} as pairs): its greedy episodes
    # are recorded for the dashboard; None: no board to replay.
    board_palette: tuple[tuple[str, str], ...] | None = None

    def board_moves(self, setting: str, hint: str = "") -> tuple[tuple[int, int], ...]:
        """The action moves board symmetries turn; a ValueError naming `setting` where the env has none."""
        if self.action_moves is None:
            raise ValueError(f"{setting}: {self.env_id} declares no board symmetries{hint} ({BOARD_GAME} "
                             "does)")
        return self.action_moves


_SPECS: dict[tuple[str, tuple[Any, ...]], EnvSpec] = {}  # this process's specs by env id and env options


def read_env_spec(env_id: str, options: EnvOptions | None = None) -> EnvSpec:
    """The spec of `env_id` with `options`: probed from one env the first time this process asks, then
    from the cache. Probing consumes no random numbers of Python's or NumPy's global generators (their
    states are put back), so a run draws the same numbers whether its spec was read before or not."""
    options = options or EnvOptions()
    key = (env_id, dataclasses.astuple(options))
    if key not in _SPECS:
        _SPECS[key] = _probe(env_id, options)
    return _SPECS[key]


def _probe(env_id: str, options: EnvOptions) -> EnvSpec:
    python_state, numpy_state = random.getstate(), np.random.get_state()
    probe = make_vector_env(env_id, 1, options)
    try:
        space, actions = probe.single_observation_space, probe.single_action_space
        if not hasattr(actions, "n"):
            raise ValueError(f"DQN needs a discrete action space; {env_id} has {actions}")
        frame_shape, dtype = frame_layout(space)
        palette = tuple(board_palette().items()) if env_id == SNAKE_ID else None
        return EnvSpec(env_id, frame_shape, dtype, int(actions.n), score_of(env_id), board_action_moves(env_id),
                       palette)
    finally:
        probe.close()
        random.setstate(python_state)
        np.random.set_state(numpy_state)
