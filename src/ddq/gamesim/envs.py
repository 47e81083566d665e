"""Building vectorized training and evaluation envs from a Gymnasium id."""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import SyncVectorEnv, VectorEnv, VectorWrapper

from ddq.gamesim import SNAKE_ID
from ddq.gamesim.snake import SnakeVectorEnv
from ddq.gamesim.snake_engine import ACTION_MOVES


@dataclass
class EnvOptions:
    """What besides the id shapes an env."""

    snake_size: int = field(default=10, metadata={"help": "Snake grid side n (the board image is n+2 with walls)"})
    snake_max_steps_without_apple: int | None = field(
        default=None, metadata={"help": "truncate a Snake episode after this many steps without eating (default n*n)"})
    snake_starving_dies: bool = field(default=False, metadata={
        "help": "Snake: after snake_max_steps_without_apple steps without eating the snake dies (-1, episode "
                "over) instead of the episode being cut off"})
    atari_terminal_on_life_loss: bool = field(default=False, metadata={"help": "Atari: end episodes on a lost life"})
    atari_noop_max: int = field(default=30, metadata={"help": "Atari: most no-op actions at an episode's start"})
    step_latency_ms: float = field(default=0.0, metadata={
        "help": "extra time each env step takes (sleeping): a stand-in for an expensive simulator"})


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/") or "NoFrameskip" in env_id


def is_minatar(env_id: str) -> bool:
    return env_id.startswith("MinAtar/")


MINATAR_GAMES = ("Breakout", "SpaceInvaders", "Asterix", "Freeway", "Seaquest")
# MinAtar's Gymnasium ids by action set: -v1 gives each game's minimal set, -v0 all 6 actions, as the
# MinAtar paper and its repository's examples/dqn.py play them.
MINATAR_ACTION_SETS = {"minimal": "v1", "full": "v0"}


def minatar_id(game: str, action_set: str = "minimal") -> str:
    """The Gymnasium id of MinAtar's `game` played with `action_set` ("minimal" or "full")."""
    return f"MinAtar/{game}-{MINATAR_ACTION_SETS[action_set]}"


class MinAtarFrames(gym.ObservationWrapper):
    """A MinAtar game (Young and Tian 2019) as ddq takes it: its 10x10xC boolean frames channels-first,
    as the conv nets take them, and its pictures (`rgb_array`, floats in [0, 1]) as bytes."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, env: gym.Env):
        super().__init__(env)
        height, width, channels = env.observation_space.shape or (0, 0, 0)
        self.observation_space = gym.spaces.Box(0, 1, (channels, height, width), dtype=bool)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(observation.transpose(2, 0, 1))

    def render(self) -> np.ndarray | None:
        picture = self.env.render()
        return None if picture is None else (np.asarray(picture) * 255).astype(np.uint8)


# What MinAtar imports for its human display and its pictures: 1.9 s of a run's start (seaborn brings scipy.stats)
# in the driver and again in each worker, for what only a replay's pictures use.
MINATAR_DISPLAY_MODULES = ("matplotlib.pyplot", "seaborn")


class _ImportedOnFirstUse(types.ModuleType):
    """Stands in for the module of its name until one of its attributes is asked for, then imports it.
    (The standard library's LazyLoader would not do: the import statement reads a module's __spec__, which
    loads a lazy one.) What the import machinery and tools ask of a module (dunder names) it does not have."""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if sys.modules.get(self.__name__) is self:  # asked while MinAtar imports: the real one from here on
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attribute)


@contextlib.contextmanager
def _display_modules_deferred() -> Iterator[None]:
    """While MinAtar imports, its display modules are stand-ins; anything imported after gets the real ones."""
    stand_ins = {name: _ImportedOnFirstUse(name) for name in MINATAR_DISPLAY_MODULES if name not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


def _minatar(env_id: str, render_mode: str | None) -> gym.Env:
    """`MinAtar/Breakout-v1` (the minimal action set) or `-v0` (all 6 actions) and their kind: sticky actions
    0.1 (MinAtar's own)."""
    try:
        with _display_modules_deferred() if "minatar.gym" not in sys.modules else contextlib.nullcontext():
            import minatar.gym  # registers its ids with Gymnasium when asked
    except ImportError as error:
        raise RuntimeError(f"MinAtar games need the minatar extra ({error}): pip install 'ddq[minatar]'") from None
    if env_id not in gym.registry:
        minatar.gym.register_envs()
    return MinAtarFrames(gym.make(env_id, render_mode=render_mode, disable_env_checker=True))


def board_action_moves(env_id: str) -> tuple[tuple[int, int], ...] | None:
    """The move (row, col) of each action for a game whose rules stay the same on its board turned or
    mirrored (what symmetry augmentation needs); None for every other env."""
    return ACTION_MOVES if env_id == SNAKE_ID else None


def make_env(env_id: str, options: EnvOptions | None = None, render_mode: str | None = None) -> gym.Env:
    """One env, with the standard DQN preprocessing for Atari games.

    Atari: 84x84 gray frames, 4 emulator frames per action with a max over
    the last two, up to 30 no-op starts, optional terminal on life loss. The
    4-frame stack is built by the replay memory, which stores each frame once.
    """
    options = options or EnvOptions()
    if env_id == SNAKE_ID:
        return gym.make(env_id, size=options.snake_size, render_mode=render_mode,
                        max_steps_without_apple=options.snake_max_steps_without_apple,
                        starving_dies=options.snake_starving_dies)
    if is_minatar(env_id):
        return _minatar(env_id, render_mode)
    if is_atari(env_id):
        try:
            import ale_py  # the wheel carries the ROMs: nothing is downloaded

            gym.register_envs(ale_py)
            env = gym.make(env_id, frameskip=1, render_mode=render_mode)
            return gym.wrappers.AtariPreprocessing(
                env, noop_max=options.atari_noop_max, frame_skip=4, screen_size=84,
                terminal_on_life_loss=options.atari_terminal_on_life_loss, grayscale_obs=True)
        except (ImportError, gym.error.DependencyNotInstalled) as error:  # ale-py, or opencv for the resize
            raise RuntimeError(f"Atari games need the atari extra ({error}): pip install 'ddq[atari]'") from None
    try:
        return gym.make(env_id, render_mode=render_mode)
    except gym.error.DependencyNotInstalled as error:
        raise RuntimeError(f"{env_id} needs an optional dependency: {error}. "
                           "Install ddq with the matching extra, e.g. pip install 'ddq[box2d]'.") from error


def make_vector_env(env_id: str, num_envs: int, options: EnvOptions | None = None) -> VectorEnv:
    """`num_envs` copies of an env with next-step autoreset (Gymnasium's default)."""
    options = options or EnvOptions()
    if env_id == SNAKE_ID:
        envs: VectorEnv = SnakeVectorEnv(num_envs, options.snake_size, options.snake_max_steps_without_apple,
                                         options.snake_starving_dies)
    else:
        envs = SyncVectorEnv([lambda: make_env(env_id, options) for _ in range(num_envs)])
    return SlowSimulator(envs, options.step_latency_ms / 1000) if options.step_latency_ms > 0 else envs


class SlowSimulator(VectorWrapper):
    """Makes every env step cost `latency_s` more, as if the envs were simulated one after another.

    The time is slept, not computed, so many slow workers still leave the
    CPU to ddq itself: what limits their scaling is then ddq's own overhead.
    """

    def __init__(self, envs: VectorEnv, latency_s: float):
        super().__init__(envs)
        self.latency_s = latency_s

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        time.sleep(self.latency_s * self.num_envs)
        return self.env.step(actions)
