"""An env's spec: its facts (frame layout, actions, board moves, the score's name), read once per process."""

import dataclasses
import random

import numpy as np
import pytest

from ddq.bookkeeping import progress_values
from ddq.core.agent import env_spec
from ddq.core.settings import build_config
from ddq.gamesim import spec as spec_module
from ddq.gamesim.envs import EnvOptions, board_action_moves
from ddq.gamesim.spec import EnvSpec, Score, read_env_spec, score_of


@pytest.fixture
def probes(monkeypatch):
    """A fresh spec cache, and the envs built to probe specs (one entry per construction)."""
    monkeypatch.setattr(spec_module, "_SPECS", {})
    built: list[str] = []
    make = spec_module.make_vector_env

    def counting(env_id, num_envs, options=None):
        built.append(env_id)
        return make(env_id, num_envs, options)

    monkeypatch.setattr(spec_module, "make_vector_env", counting)
    return built


def test_cartpoles_spec_says_its_frame_actions_and_return(probes):
    spec = read_env_spec("CartPole-v1")
    assert spec == EnvSpec("CartPole-v1", (4,), np.dtype(np.float32), 2, Score("return", "per episode", False))
    assert spec.action_moves is None and spec.board_palette is None
    with pytest.raises(ValueError, match=r"^board_symmetries: CartPole-v1 declares no board symmetries \(Snake "):
        spec.board_moves("board_symmetries")


def test_snakes_spec_says_its_board_moves_palette_and_apples(probes):
    spec = read_env_spec("ddq/Snake-v0", EnvOptions(snake_size=6))
    assert (spec.frame_shape, spec.frame_dtype, spec.num_actions) == ((8, 8), np.dtype(np.uint8), 4)  # walls round
    assert spec.score == Score("apples", "per episode", rewarded_steps=True) == score_of("ddq/Snake-v0")
    assert spec.board_moves("board_symmetries") == board_action_moves("ddq/Snake-v0")
    assert dict(spec.board_palette or ())["0"].startswith("#")
    assert read_env_spec("ddq/Snake-v0").frame_shape == (12, 12)  # other options, another spec
    assert progress_values(1.0, 0.5, (1_000, 2.0, 3.0), spec.score)["greedy"] == "3.0 apples@1,000"
    assert progress_values(1.0, 0.5, (1_000, 2.0, 3.0), read_env_spec("CartPole-v1").score)["greedy"] == "2.0@1,000"


def test_a_spec_is_read_once_per_process_for_each_env_and_options(probes):
    agent = build_config({"env": "CartPole-v1"}).agent
    first = env_spec(agent)
    assert env_spec(agent) is first and read_env_spec("CartPole-v1", agent.env_options) is first
    assert env_spec(dataclasses.replace(agent, seed=7)) is first  # settings that do not shape the env
    assert probes == ["CartPole-v1"]
    read_env_spec("CartPole-v1", EnvOptions(atari_noop_max=3))  # other options: read again, once
    read_env_spec("CartPole-v1", EnvOptions(atari_noop_max=3))
    assert probes == ["CartPole-v1", "CartPole-v1"]


def test_reading_a_spec_draws_no_number_from_the_global_generators(probes, monkeypatch):
    inner = spec_module.make_vector_env

    def drawing(env_id, num_envs, options=None):  # an env that seeds itself from the global generators
        random.random(), np.random.random()
        return inner(env_id, num_envs, options)

    monkeypatch.setattr(spec_module, "make_vector_env", drawing)
    random.seed(3), np.random.seed(3)
    read_env_spec("CartPole-v1")
    after = random.random(), np.random.random()
    random.seed(3), np.random.seed(3)
    assert after == (random.random(), np.random.random())


def test_an_env_without_discrete_actions_is_named_in_one_line(probes):
    with pytest.raises(ValueError, match=r"^DQN needs a discrete action space; Pendulum-v1 has Box"):
        read_env_spec("Pendulum-v1")
