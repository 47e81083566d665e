"""Snake's two Gymnasium faces on one engine: a single-game env and a batched vector env."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from ddq.gamesim.snake_engine import APPLE, EMPTY, ENDINGS, HEAD, NECK, TAIL, WALL, SnakeEngine

_RGB_SCALE = 16  # pixels per cell in rgb_array frames, so a person can see them
_ENDING_NAMES = np.array(ENDINGS)


def _board_colors() -> np.ndarray:
    """The RGB color of every gray level of the board: how people see it (animations, the dashboard).
    The body is a green that darkens towards the tail; other levels stay gray."""
    colors = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, axis=1)
    colors[[EMPTY, WALL, HEAD, APPLE]] = [(0x10, 0x15, 0x1c), (0x56, 0x60, 0x6e), (0x9b, 0xe3, 0x6e),
                                          (0xe8, 0x47, 0x3f)]
    for level in range(TAIL, NECK + 1):
        colors[level] = (0x2a + (level - TAIL) // 4, 0x7a + (level - TAIL) // 2, 0x45)
    return colors


BOARD_COLORS = _board_colors()


def board_palette() -> dict[str, str]:
    """BOARD_COLORS of the board's levels as {"gray level": "#rrggbb"}, as the dashboard's replay paints them."""
    levels = [EMPTY, WALL, HEAD, APPLE, *range(TAIL, NECK + 1)]
    return {str(level): "#" + "".join(f"{int(v):02x}" for v in BOARD_COLORS[level]) for level in levels}


def _spaces(size: int) -> tuple[spaces.Box, spaces.Discrete]:
    """A (height, width, 1) uint8 image, the layout image-based agents of other libraries expect
    (Stable-Baselines3's CnnPolicy, for one); ddq's replay stores it without the channel axis."""
    side = size + 2
    return spaces.Box(0, 255, (side, side, 1), dtype=np.uint8), spaces.Discrete(4)


class SnakeEnv(gym.Env):
    """One game of Snake; the observation is the board as a grayscale uint8 image (height, width, 1)."""

    metadata = {"render_modes": ["rgb_array", "ansi"], "render_fps": 10}

    def __init__(self, size: int = 10, max_steps_without_apple: int | None = None,
                 render_mode: str | None = None, starving_dies: bool = False):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.engine = SnakeEngine(1, size, max_steps_without_apple, starving_dies)
        self.observation_space, self.action_space = _spaces(size)
        self.render_mode = render_mode
        self._stream_started = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None or not self._stream_started:
            # Same derivation as SnakeEngine.seed, through self.np_random so
            # Gymnasium's seeding checks see a seeded env.
            self.engine.stream[0] = np.uint64(self.np_random.integers(0, 2**63))
            self._stream_started = True
        self.engine.reset(np.array([0]))
        return self.engine.render()[0, :, :, None], self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, terminated, truncated = self.engine.step(np.array([action]))
        return (self.engine.render()[0, :, :, None], float(reward[0]), bool(terminated[0]),
                bool(truncated[0]), self._info())

    def _info(self) -> dict[str, Any]:
        """The snake's length, and on the step its game ends how it ended (`ENDINGS`: "hit its body", ...)."""
        ending = int(self.engine.ending[0])
        return {"length": int(self.engine.length[0]), **({"ending": ENDINGS[ending]} if ending else {})}

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "ansi":
            return self.engine.text(0)
        if self.render_mode == "rgb_array":
            gray = self.engine.render()[0]
            big = gray.repeat(_RGB_SCALE, axis=0).repeat(_RGB_SCALE, axis=1)
            return BOARD_COLORS[big]
        return None


class SnakeVectorEnv(VectorEnv):
    """`num_envs` Snake games stepped together, with Gymnasium's next-step autoreset.

    As in Gymnasium's own vector envs, the step after an episode ends resets
    that game: its action is ignored and it returns the first observation of
    the new episode with reward 0 (that step is not a transition).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int, size: int = 10, max_steps_without_apple: int | None = None,
                 starving_dies: bool = False):
        self.num_envs = num_envs
        self.engine = SnakeEngine(num_envs, size, max_steps_without_apple, starving_dies)
        self.single_observation_space, self.single_action_space = _spaces(size)
        self.observation_space = spaces.Box(0, 255, (num_envs, size + 2, size + 2, 1), dtype=np.uint8)
        self.action_space = spaces.MultiDiscrete(np.full(num_envs, 4))
        self._needs_reset = np.zeros(num_envs, dtype=bool)
        self._stream_started = False

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None or not self._stream_started:
            seeds = seed if isinstance(seed, list) else [
                None if seed is None else seed + i for i in range(self.num_envs)]
            self.engine.seed(np.arange(self.num_envs), seeds)
            self._stream_started = True
        self.engine.reset(np.ones(self.num_envs, dtype=bool))
        self._needs_reset[:] = False
        return self.engine.render()[..., None], self._info()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        resetting = self._needs_reset.copy()
        reward, terminated, truncated = self.engine.step(actions, active=~resetting)
        self.engine.reset(resetting)
        self._needs_reset = terminated | truncated
        return self.engine.render()[..., None], reward, terminated, truncated, self._info()

    def _info(self) -> dict[str, Any]:
        """Each game's snake length, and how each game that ended this step ended (`ENDINGS`' name, "" for
        a game still playing)."""
        return {"length": self.engine.length.copy(), "ending": _ENDING_NAMES[self.engine.ending]}
