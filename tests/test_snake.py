"""Snake rules, its Gymnasium face, and the vectorized engine agreeing with single games."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import ddq  # noqa: F401
from ddq.gamesim.snake import SnakeEnv, SnakeVectorEnv
from ddq.gamesim.snake_engine import (
    APPLE,
    EAST,
    ENDINGS,
    FILLED,
    HEAD,
    HIT_BODY,
    HIT_WALL,
    NECK,
    NORTH,
    PLAYING,
    SOUTH,
    STEP_LIMIT,
    TAIL,
    WALL,
    WEST,
    SnakeEngine,
)


def place(engine: SnakeEngine, cells: list[tuple[int, int]], direction: int, apple: tuple[int, int], game=0):
    """Put a snake on the board: cells from head to tail, as (row, col)."""
    n = engine.size
    engine.body[game] = 0
    for age, (r, c) in enumerate(reversed(cells), start=1):
        engine.body[game, r * n + c] = age
    engine.head[game] = cells[0][0] * n + cells[0][1]
    engine.length[game] = len(cells)
    engine.direction[game] = direction
    engine.apple[game] = apple[0] * n + apple[1]
    engine.steps_since_apple[game] = 0


def fresh(size=6, max_steps=None):
    engine = SnakeEngine(1, size, max_steps)
    engine.seed(np.array([0]), [1])
    engine.reset(np.array([0]))
    return engine


def step(engine, action):
    reward, terminated, truncated = engine.step(np.array([action]))
    return float(reward[0]), bool(terminated[0]), bool(truncated[0])


def test_reset_puts_a_length_three_snake_and_one_apple_on_an_empty_cell():
    engine = fresh()
    board = engine.render()[0]
    assert engine.length[0] == 3
    assert (board == HEAD).sum() == 1 and (board == APPLE).sum() == 1
    assert (board == NECK).sum() == 1 and (board == TAIL).sum() == 1
    assert (board[0] == WALL).all() and (board[:, -1] == WALL).all()


def test_one_frame_tells_head_neck_body_tail_and_apple_apart():
    engine = fresh(size=6)
    snake = [(2, 3), (2, 2), (2, 1), (3, 1), (4, 1)]  # head at (2, 3), moving east; tail at (4, 1)
    place(engine, snake, EAST, apple=(0, 0))
    board = engine.render()[0, 1:-1, 1:-1]
    levels = [int(board[r, c]) for r, c in snake]
    # Head, then the body fading from the neck to the tail: (160 - 96) / 3 per cell.
    assert levels == [HEAD, NECK, 96 + 2 * 64 // 3, 96 + 64 // 3, TAIL]
    assert board[0, 0] == APPLE and len(set(levels) | {APPLE, WALL, 0}) == 8
    # The direction of travel is the step from the neck (the brightest body cell) to the head.
    neck = np.argwhere(board == NECK)[0]
    assert tuple(np.argwhere(board == HEAD)[0] - neck) == (0, 1)


def test_moving_keeps_length_and_earns_nothing():
    engine = fresh()
    place(engine, [(2, 2), (2, 1), (2, 0)], EAST, apple=(5, 5))
    assert step(engine, EAST) == (0.0, False, False)
    assert engine.head[0] == 2 * 6 + 3
    assert (engine.body[0] > 0).sum() == 3
    assert engine.body[0, 2 * 6 + 0] == 0  # the tail moved away


def test_eating_an_apple_rewards_one_and_grows_the_snake():
    engine = fresh()
    place(engine, [(2, 2), (2, 1), (2, 0)], EAST, apple=(2, 3))
    reward, terminated, _ = step(engine, EAST)
    assert reward == 1.0 and not terminated
    assert engine.length[0] == 4 and (engine.body[0] > 0).sum() == 4
    assert engine.body[0, 2 * 6 + 0] == 1  # the tail stayed: the snake grew
    assert engine.apple[0] >= 0 and engine.body[0, engine.apple[0]] == 0  # new apple on an empty cell


def test_hitting_a_wall_costs_one_and_ends_the_episode():
    engine = fresh()
    place(engine, [(0, 2), (1, 2), (2, 2)], NORTH, apple=(5, 5))
    assert engine.ending[0] == PLAYING
    assert step(engine, NORTH) == (-1.0, True, False)
    assert ENDINGS[engine.ending[0]] == "hit a wall" and engine.ending[0] == HIT_WALL
    engine.reset(np.array([0]))
    assert engine.ending[0] == PLAYING  # a new game has not ended


def test_hitting_its_own_body_costs_one_and_ends_the_episode():
    engine = fresh()
    # A hook: moving south from the head runs into the body.
    place(engine, [(2, 2), (2, 3), (3, 3), (3, 2), (3, 1)], WEST, apple=(5, 5))
    assert step(engine, SOUTH) == (-1.0, True, False)
    assert engine.ending[0] == HIT_BODY


def test_the_head_may_follow_the_tail_into_its_cell():
    engine = fresh()
    # A 2x2 ring: the head's next cell is the tail, which moves away this step.
    place(engine, [(2, 2), (2, 3), (3, 3), (3, 2)], WEST, apple=(5, 5))
    assert step(engine, SOUTH) == (0.0, False, False)


def test_reversing_into_the_neck_keeps_the_current_direction():
    engine = fresh()
    place(engine, [(2, 2), (2, 1), (2, 0)], EAST, apple=(5, 5))
    assert step(engine, WEST) == (0.0, False, False)
    assert engine.head[0] == 2 * 6 + 3 and engine.direction[0] == EAST


def test_an_episode_is_truncated_after_too_many_steps_without_an_apple():
    engine = fresh(size=6, max_steps=3)
    place(engine, [(2, 2), (2, 1), (2, 0)], SOUTH, apple=(0, 5))
    results = [step(engine, a) for a in (SOUTH, EAST, NORTH)]
    assert results[:2] == [(0.0, False, False)] * 2
    assert results[2] == (0.0, False, True)
    assert engine.ending[0] == STEP_LIMIT


def test_a_snake_that_starves_dies_when_asked_to():
    engine = SnakeEngine(1, 6, 3, starving_dies=True)
    engine.seed(np.array([0]), [1])
    engine.reset(np.array([0]))
    place(engine, [(2, 2), (2, 1), (2, 0)], SOUTH, apple=(0, 5))
    results = [step(engine, a) for a in (SOUTH, EAST, NORTH)]
    assert results == [(0.0, False, False), (0.0, False, False), (-1.0, True, False)]
    assert engine.ending[0] == STEP_LIMIT  # starving is the step limit's end too


def test_filling_the_board_wins_the_game():
    engine = fresh(size=4)
    n = 4
    snake = [(0, 1), (0, 2), (0, 3), (1, 3), (1, 2), (1, 1), (1, 0), (2, 0), (2, 1), (2, 2), (2, 3),
             (3, 3), (3, 2), (3, 1), (3, 0)]
    place(engine, snake, WEST, apple=(0, 0))
    reward, terminated, truncated = step(engine, WEST)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert engine.apple[0] == -1 and (engine.body[0] > 0).sum() == n * n
    assert engine.ending[0] == FILLED


def test_the_envs_say_the_snakes_length_and_how_a_game_ended():
    single = SnakeEnv(size=6)
    _, info = single.reset(seed=3)
    assert info == {"length": 3}
    for _ in range(10):  # east from the middle of a 6x6 board: the wall within 3 moves
        _, _, terminated, _, info = single.step(EAST)
        if terminated:
            break
    assert info == {"length": 3, "ending": "hit a wall"}
    games = SnakeVectorEnv(2, size=6)
    _, info = games.reset(seed=3)
    assert list(info["length"]) == [3, 3] and list(info["ending"]) == ["", ""]
    for _ in range(3):  # east: the wall on the third move
        _, _, terminated, _, info = games.step(np.array([EAST, EAST]))
    assert terminated.all() and list(info["ending"]) == ["hit a wall", "hit a wall"]
    _, _, _, _, info = games.step(np.array([EAST, EAST]))  # the autoreset step starts new games
    assert list(info["ending"]) == ["", ""] and list(info["length"]) == [3, 3]


def test_apples_land_uniformly_on_empty_cells():
    engine = SnakeEngine(4000, 4)
    engine.seed(np.arange(4000), list(range(4000)))
    engine.reset(np.arange(4000))
    counts = np.bincount(engine.apple, minlength=16)
    occupied = np.flatnonzero(engine.body[0] > 0)
    assert counts[occupied].sum() == 0
    free = np.delete(counts, occupied)
    expected = 4000 / free.size
    chi2 = ((free - expected) ** 2 / expected).sum()
    assert chi2 < 40, (free, chi2)  # 12 degrees of freedom: 40 is far in the tail


def test_gymnasium_env_passes_the_env_checker_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode in ("rgb_array", "ansi"):
            check_env(gym.make("ddq/Snake-v0", render_mode=mode).unwrapped)


def test_render_modes_show_the_board():
    env = gym.make("ddq/Snake-v0", render_mode="ansi")
    env.reset(seed=3)
    text = env.render()
    assert text.count("O") == 1 and text.count("*") == 1 and text.count("o") == 1 and text.count(".") == 1
    rgb = gym.make("ddq/Snake-v0", render_mode="rgb_array")
    obs, _ = rgb.reset(seed=3)
    frame = rgb.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.shape[0] > obs.shape[0]


def test_vectorized_engine_agrees_step_for_step_with_single_games():
    games, seed = 8, 123
    vector = SnakeVectorEnv(games, size=6, max_steps_without_apple=20)
    singles = [SnakeEnv(size=6, max_steps_without_apple=20) for _ in range(games)]
    vec_obs, _ = vector.reset(seed=seed)
    single_obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    np.testing.assert_array_equal(vec_obs, np.stack(single_obs))
    rng = np.random.default_rng(0)
    pending_reset = np.zeros(games, dtype=bool)
    endings = 0
    for _ in range(600):
        actions = rng.integers(0, 4, size=games)
        vec_obs, vec_r, vec_term, vec_trunc, _ = vector.step(actions)
        for i, env in enumerate(singles):
            if pending_reset[i]:  # next-step autoreset: the single game resets without a new seed
                obs, r, term, trunc = env.reset()[0], 0.0, False, False
            else:
                obs, r, term, trunc, _ = env.step(actions[i])
            np.testing.assert_array_equal(vec_obs[i], obs)
            assert (vec_r[i], vec_term[i], vec_trunc[i]) == (r, term, trunc)
            pending_reset[i] = term or trunc
        endings += int(pending_reset.sum())
    assert endings > 20  # the comparison went through many episode ends


def test_rewards_follow_apples_eaten_in_a_random_batch():
    vector = SnakeVectorEnv(64, size=5)
    vector.reset(seed=0)
    rng = np.random.default_rng(1)
    total_apples = total_deaths = 0
    for _ in range(300):
        _, r, term, _, _ = vector.step(rng.integers(0, 4, size=64))
        total_apples += int((r > 0).sum())
        total_deaths += int((r < 0).sum())
        assert set(np.unique(r)) <= {-1.0, 0.0, 1.0}
        assert np.all(term[r < 0])
    assert total_apples > 0 and total_deaths > 0


@pytest.mark.parametrize("size", [3, 2])
def test_too_small_a_grid_is_refused(size):
    with pytest.raises(ValueError, match="at least 4x4"):
        SnakeEngine(1, size)


def test_snake_is_a_gymnasium_image_env_other_libraries_can_train_on():
    """The conventions image-based agents check (Stable-Baselines3's is_image_space, for one): a Box of
    uint8 in [0, 255] with a channel axis; Gymnasium's own checker passes, and its vector envs work."""
    env = gym.make("ddq/Snake-v0")
    space = env.observation_space
    assert space.shape == (12, 12, 1) and space.dtype == np.uint8 and space.low.min() == 0 and space.high.max() == 255
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert space.contains(obs)
    vector = gym.make_vec("ddq/Snake-v0", num_envs=3, vectorization_mode="sync")
    observations, _ = vector.reset(seed=1)
    assert observations.shape == (3, 12, 12, 1) and vector.single_observation_space == space
    vector.close()
    env.close()
