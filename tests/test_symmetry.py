"""Symmetry augmentation: the board's 8 symmetries, the actions they turn, and real Snake transitions seen through them."""

from __future__ import annotations

import numpy as np
import pytest

from ddq.core.replay import Batch
from ddq.core.symmetry import BoardSymmetry, SymmetryAugmentation, board_symmetries
from ddq.gamesim.envs import board_action_moves
from ddq.gamesim.snake import SnakeEnv
from ddq.gamesim.snake_engine import ACTION_MOVES, HEAD, NECK

NORTH, SOUTH, EAST, WEST = 0, 1, 2, 3


def test_snake_actions_turn_with_the_board_as_worked_out_by_hand():
    symmetries = board_symmetries(ACTION_MOVES)
    assert len(symmetries) == 8 and len(set(symmetries)) == 8
    assert symmetries[0] == BoardSymmetry(0, False, (NORTH, SOUTH, EAST, WEST))
    # A quarter turn counter-clockwise: what went north now goes west, east goes north.
    assert symmetries[1].actions == (WEST, EAST, NORTH, SOUTH)
    assert symmetries[2].actions == (SOUTH, NORTH, WEST, EAST)  # half a turn
    assert symmetries[4].actions == (NORTH, SOUTH, WEST, EAST)  # mirrored left-right


def test_moves_that_are_no_action_are_refused():
    with pytest.raises(ValueError, match="not closed"):
        board_symmetries([(-1, 0), (0, 1)])  # north and east only: a half turn makes south


@pytest.mark.parametrize("index", range(8))
def test_a_cell_moved_by_an_action_is_the_transformed_cell_moved_by_the_turned_action(index):
    symmetry = board_symmetries(ACTION_MOVES)[index]
    rows, cols = np.indices((7, 7))
    for action, (drow, dcol) in enumerate(ACTION_MOVES):
        before = (rows == 3) & (cols == 2)
        after = (rows == 3 + drow) & (cols == 2 + dcol)
        seen_before, seen_after = symmetry.frames(before), symmetry.frames(after)
        (r0, c0), (r1, c1) = np.argwhere(seen_before)[0], np.argwhere(seen_after)[0]
        assert (r1 - r0, c1 - c0) == ACTION_MOVES[symmetry.actions[action]]


def _head(frame: np.ndarray) -> np.ndarray:
    return np.argwhere(frame == HEAD)[0]


def test_real_snake_transitions_seen_through_each_symmetry_move_the_head_by_the_turned_action():
    env = SnakeEnv(size=8)
    frame, _ = env.reset(seed=3)
    symmetries = board_symmetries(board_action_moves("ddq/Snake-v0"))
    checked = 0
    while checked < 20:
        board = frame[:, :, 0]
        head, neck = _head(board), np.argwhere(board == NECK)[0]
        # an action into an empty cell that is not back into the neck: the head moves by it
        safe = [a for a, (dr, dc) in enumerate(ACTION_MOVES)
                if board[head[0] + dr, head[1] + dc] in (0, 255) and (head[0] + dr, head[1] + dc) != tuple(neck)]
        action = safe[checked % len(safe)]
        next_frame, _, terminated, truncated, _ = env.step(action)
        for symmetry in symmetries:
            seen, seen_next = symmetry.frames(board), symmetry.frames(next_frame[:, :, 0])
            assert tuple(_head(seen_next) - _head(seen)) == ACTION_MOVES[symmetry.actions[action]]
        checked += 1
        frame = env.reset()[0] if terminated or truncated else next_frame


def test_augmentation_shows_states_and_next_states_through_one_symmetry_per_transition():
    rng = np.random.default_rng(0)
    states = rng.integers(0, 255, size=(400, 2, 5, 5), dtype=np.uint8)
    next_states = rng.integers(0, 255, size=(400, 2, 5, 5), dtype=np.uint8)
    batch = Batch(states, rng.integers(0, 4, 400), rng.random(400).astype(np.float32), next_states,
                  rng.random(400) < 0.1, discounts=np.full(400, 0.9, np.float32))
    symmetries = board_symmetries(ACTION_MOVES)
    seen = SymmetryAugmentation(symmetries, np.random.default_rng(1))(batch)
    used = set()
    for row in range(400):
        matches = [i for i, g in enumerate(symmetries) if np.array_equal(g.frames(states[row]), seen.states[row])]
        assert len(matches) == 1
        symmetry = symmetries[matches[0]]
        used.add(matches[0])
        assert np.array_equal(symmetry.frames(next_states[row]), seen.next_states[row])
        assert seen.actions[row] == symmetry.actions[batch.actions[row]]
    assert used == set(range(8))
    assert np.array_equal(seen.rewards, batch.rewards) and np.array_equal(seen.terminated, batch.terminated)
    assert np.array_equal(seen.discounts, batch.discounts)
    assert seen.states.dtype == np.uint8 and batch.states is states  # the replay's arrays are left as they were


def test_a_snake_agent_with_board_symmetries_trains_on_every_minibatch_through_them():
    from ddq.core.agent import build_agent
    from ddq.core.replay_training import train_from_replay
    from ddq.core.settings import build_config
    from ddq.core.weights import LocalParameters

    config = build_config({"mode": "serial", "env": "ddq/Snake-v0", "board_symmetries": True, "num_envs": 4,
                           "model": "mlp", "hidden": [16]})
    agent = build_agent(config.agent, seed=5, total_steps=config.run.total_steps)
    assert isinstance(agent.learner.augmentation, SymmetryAugmentation)
    agent.actor.reset(seed=5)
    for _ in range(30):
        agent.actor.step(agent.learner.online, epsilon=1.0)
    seen = []
    augment = agent.learner.augmentation

    def spy(batch: Batch) -> Batch:
        shown = augment(batch)
        seen.append((batch, shown))
        return shown

    agent.learner.augmentation = spy
    train_from_replay(agent.learner, agent.replay, LocalParameters(agent.learner), 3, batch_size=16)
    assert len(seen) == 3  # once per update
    assert any(not np.array_equal(batch.actions, shown.actions) for batch, shown in seen)
    plain = build_agent(build_config({"mode": "serial", "env": "ddq/Snake-v0"}).agent, seed=5, total_steps=1)
    assert plain.learner.augmentation is None


def test_a_regression_minibatch_shows_each_state_and_its_action_through_one_symmetry():
    rng = np.random.default_rng(2)
    states, actions = rng.integers(0, 255, size=(200, 1, 6, 6), dtype=np.uint8), rng.integers(0, 4, 200)
    symmetries = board_symmetries(ACTION_MOVES)
    seen_states, seen_actions = SymmetryAugmentation(symmetries, np.random.default_rng(3)).regression(states, actions)
    used = set()
    for row in range(200):
        (index,) = [i for i, g in enumerate(symmetries) if np.array_equal(g.frames(states[row]), seen_states[row])]
        used.add(index)
        assert seen_actions[row] == symmetries[index].actions[actions[row]]
    assert used == set(range(8))


def test_a_pqn_snake_agent_with_board_symmetries_regresses_on_turned_boards():
    from ddq.core.agent import build_agent
    from ddq.core.settings import build_config
    from ddq.core.weights import LocalParameters

    config = build_config({"mode": "serial", "env": "ddq/Snake-v0", "algo": "pqn", "board_symmetries": True,
                           "num_envs": 4, "rollout_steps": 8, "epochs": 2, "minibatches": 2, "model": "mlp",
                           "hidden": [16]})
    agent = build_agent(config.agent, seed=5, total_steps=config.run.total_steps)
    augment = agent.learner.augmentation
    assert isinstance(augment, SymmetryAugmentation)
    shown = []

    class Spy(SymmetryAugmentation):
        def regression(self, states: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            turned = super().regression(states, actions)
            shown.append((actions, turned[1]))
            return turned

    agent.learner.augmentation = Spy(augment.symmetries, augment.rng)
    agent.actor.reset(seed=5)
    stats = []
    while not stats:
        agent.actor.step(agent.learner.online, epsilon=1.0)
        stats = agent.train(LocalParameters(agent.learner), new_steps=4)
    assert len(shown) == len(stats) == 4  # 2 epochs of 2 minibatches, each through the symmetries
    assert any(not np.array_equal(before, after) for before, after in shown)
