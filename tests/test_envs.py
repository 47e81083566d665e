"""Gymnasium envs by id, with the standard preprocessing."""

import numpy as np
import pytest

from ddq.gamesim.envs import make_env, make_vector_env


def test_cartpole_vector_env():
    envs = make_vector_env("CartPole-v1", 3)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, 4)
    envs.close()


def test_atari_gets_84x84_gray_frames_with_frame_skip():
    env = make_env("ALE/Pong-v5")
    obs, info = env.reset(seed=0)
    assert obs.shape == (84, 84) and obs.dtype == np.uint8
    assert env.unwrapped._frameskip == 1  # the preprocessing wrapper skips (and max-pools) frames itself
    _, _, _, _, after = env.step(0)
    assert after["frame_number"] - info["frame_number"] == 4
    env.close()


def test_lunar_lander():
    pytest.importorskip("Box2D")
    env = make_env("LunarLander-v3")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (8,) and env.action_space.n == 4
    env.close()


def test_unknown_env_is_a_clear_error():
    import gymnasium as gym

    with pytest.raises(gym.error.Error):
        make_env("NoSuchEnv-v9")


def test_slow_simulator_adds_its_latency_to_every_env_step():
    import time

    from ddq.gamesim.envs import EnvOptions, make_vector_env

    envs = make_vector_env("CartPole-v1", 3, EnvOptions(step_latency_ms=5))
    envs.reset(seed=0)
    start = time.perf_counter()
    for _ in range(4):
        envs.step(np.zeros(3, dtype=int))
    assert time.perf_counter() - start >= 4 * 3 * 0.005
    assert envs.single_observation_space.shape == (4,)
