"""Network shapes and the flat parameter view."""

import numpy as np
import pytest
import torch
from torch import nn

from ddq.models import FlatParameters, build_q_network
from ddq.models.layers import DuelingHead


def count(net):
    return sum(p.numel() for p in net.parameters())


def test_deepq_has_the_original_parameter_count_at_16x16():
    assert count(build_q_network("deepq", (4, 16, 16), 4)) == 228_132


@pytest.mark.parametrize("size,params", [(32, 621_348), (64, 2_194_212)])
def test_deepq_matches_the_original_at_larger_inputs(size, params):
    assert count(build_q_network("deepq", (4, size, size), 4)) == params


def test_auto_picks_a_network_by_state_shape():
    vector = build_q_network("auto", (4,), 2)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in vector.modules())
    assert vector(torch.zeros(3, 4)).shape == (3, 2)
    nature = build_q_network("auto", (4, 84, 84), 6)
    assert nature(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape == (2, 6)
    snake = build_q_network("auto", (1, 12, 12), 4)
    assert snake(torch.zeros(3, 1, 12, 12, dtype=torch.uint8)).shape == (3, 4)


def test_image_networks_refuse_vector_states():
    with pytest.raises(ValueError, match="needs image states"):
        build_q_network("deepq", (4,), 2)


def test_flat_view_shares_memory_with_the_module():
    net = build_q_network("mlp", (4,), 2, hidden=(8,))
    flat = FlatParameters(net)
    assert flat.size == count(net)
    flat.data.fill_(0.5)
    assert all(torch.all(p == 0.5) for p in net.parameters())


def test_backward_writes_into_the_flat_gradient():
    torch.manual_seed(0)
    net = build_q_network("mlp", (4,), 2, hidden=(8,))
    reference = build_q_network("mlp", (4,), 2, hidden=(8,))
    reference.load_state_dict(net.state_dict())
    flat = FlatParameters(net)
    x = torch.randn(5, 4)
    net(x).square().sum().backward()
    reference(x).square().sum().backward()
    expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    torch.testing.assert_close(flat.grad, expected)
    flat.zero_grad()
    assert all(torch.all(p.grad == 0) for p in net.parameters())


def test_layout_hash_tells_layouts_apart():
    a = FlatParameters(build_q_network("mlp", (4,), 2, hidden=(8,)))
    b = FlatParameters(build_q_network("mlp", (4,), 2, hidden=(8,)))
    c = FlatParameters(build_q_network("mlp", (4,), 2, hidden=(9,)))
    assert a.layout_hash() == b.layout_hash() != c.layout_hash()


def test_dueling_head_adds_the_value_to_the_advantages_minus_their_mean():
    head = DuelingHead(2, 3)
    with torch.no_grad():
        head.value.weight.copy_(torch.tensor([[1.0, 0.0]]))
        head.value.bias.fill_(0.5)
        head.advantage.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
        head.advantage.bias.zero_()
    features = torch.tensor([[2.0, 5.0]])
    # V = 2 + 0.5 = 2.5; A = (2, 5, 0), mean 7/3; Q = V + A - mean A.
    expected = [2.5 + a - 7 / 3 for a in (2.0, 5.0, 0.0)]
    assert head(features)[0].tolist() == pytest.approx(expected)


@pytest.mark.parametrize("name,shape", [("mlp", (4,)), ("small-conv", (1, 12, 12)), ("snake-conv", (1, 12, 12)),
                                        ("snake-conv-wide", (1, 12, 12)), ("snake-conv-turned", (1, 12, 12)),
                                        ("snake-conv-egocentric", (1, 12, 12)), ("deepq16", (4, 16, 16))])
def test_every_network_takes_dueling_heads_in_place_of_its_last_layer(name, shape):
    plain = build_q_network(name, shape, 4)
    dueling = build_q_network(name, shape, 4, dueling=True)
    assert isinstance(dueling[-1], DuelingHead)
    assert dueling(torch.zeros(2, *shape)).shape == (2, 4)
    # One more output unit (the value) than the plain network's last layer.
    assert sum(p.numel() for p in dueling.parameters()) == sum(p.numel() for p in plain.parameters()) + 1 + \
        plain[-1].in_features


def test_channel_norm_normalises_each_board_position_over_its_channels():
    from ddq.models.layers import ChannelNorm

    x = torch.randn(3, 16, 5, 7) * 4 + 2
    y = ChannelNorm(16)(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y.mean(dim=1), torch.zeros(3, 5, 7), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(dim=1, unbiased=False), torch.ones(3, 5, 7), atol=1e-3, rtol=0)


@pytest.mark.parametrize("name, shape, norms", [("mlp", (4,), 2), ("small-conv", (1, 12, 12), 3),
                                               ("minatar", (4, 10, 10), 2)])
def test_pqn_networks_normalise_every_hidden_layer(name, shape, norms):
    plain = build_q_network(name, shape, 3, hidden=(8, 8))
    normed = build_q_network(name, shape, 3, hidden=(8, 8), layer_norm=True)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.modules())
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in normed.modules()) == norms
    assert normed(torch.zeros(2, *shape, dtype=torch.uint8)).shape == (2, 3)


def test_board_planes_split_a_snake_board_into_walls_apple_head_body_and_its_order():
    from ddq.gamesim.snake_engine import APPLE, HEAD, NECK, TAIL, WALL
    from ddq.models.layers import BoardPlanes

    board = _board_after((2, 2, 1), size=6, seed=0)  # east, east, south: the head, and a body behind it
    planes = BoardPlanes((WALL, APPLE, HEAD), (TAIL, NECK))(torch.from_numpy(board)[None, None])[0]
    assert planes.shape == (5, 8, 8)
    for plane, level in enumerate((WALL, APPLE, HEAD)):
        assert torch.equal(planes[plane], torch.from_numpy(board == level).float())
    body = (board >= TAIL) & (board <= NECK)
    assert torch.equal(planes[3], torch.from_numpy(body).float()) and body.sum() >= 2
    order = planes[4][torch.from_numpy(body)]
    assert order.min() > 0 and order.max() == 1.0  # the neck, next to the head
    assert planes[4][torch.from_numpy(~body)].abs().sum() == 0
    assert int(torch.argmax(planes[4]).item()) == int(np.argmax(np.where(body, board, 0)))  # the highest level


@pytest.mark.parametrize("name", ["snake-conv", "snake-conv-wide"])
def test_snake_conv_reads_one_board_per_state(name):
    assert build_q_network(name, (1, 12, 12), 4)(torch.zeros(3, 1, 12, 12, dtype=torch.uint8)).shape == (3, 4)
    with pytest.raises(ValueError, match="one Snake board per state"):
        build_q_network(name, (4, 12, 12), 4)


def _board_after(moves, size=10, seed=3):
    """The board (height, width) of a Snake game of `size` after `moves` (action indices) from its reset."""
    from ddq.gamesim.snake import SnakeEnv

    env = SnakeEnv(size=size)
    board = env.reset(seed=seed)[0][:, :, 0]
    for action in moves:
        board = env.step(action)[0][:, :, 0]
    return board


@pytest.mark.parametrize("name", ["snake-conv-turned", "snake-conv-egocentric"])
def test_a_heading_net_values_a_turned_board_as_the_board_itself(name):
    """The board as the snake sees it does not change when the board turns: a heading net's value of each
    move is the same on all four quarter turns (the moves turned with the board), and differs from the
    plain board net's, which is not built to be."""
    from ddq.core.symmetry import board_symmetries
    from ddq.gamesim.snake_engine import ACTION_MOVES

    torch.manual_seed(0)
    board = _board_after((2, 1, 1, 3, 3, 0))  # east, south twice, west twice, north: a bent body
    turns = board_symmetries(ACTION_MOVES)[:4]
    boards = torch.from_numpy(np.stack([turn.frames(board).copy() for turn in turns]))[:, None]
    for net_name, invariant in ((name, True), ("snake-conv", False)):
        values = build_q_network(net_name, (1, 12, 12), 4, dueling=True, layer_norm=True)(boards).detach()
        seen = torch.stack([values[t, list(turn.actions)] for t, turn in enumerate(turns)])
        assert torch.allclose(seen, seen[0].expand_as(seen), atol=1e-5) == invariant, net_name


def test_the_egocentric_view_puts_the_head_in_the_middle_and_what_is_ahead_above_it():
    from ddq.gamesim.snake_engine import ACTION_MOVES, HEAD, NECK, WALL
    from ddq.models.layers import HeadingView

    view = HeadingView(12, HEAD, NECK, WALL, ACTION_MOVES, centred=True)
    board = _board_after((2,) * 4)  # east from the middle (col 5 of 10) to the east wall's cell (col 9)
    seen, heading = view(torch.from_numpy(board)[None, None])
    middle = 9
    assert seen.shape == (1, 1, 19, 19) and ACTION_MOVES[int(heading)] == (0, 1)
    assert seen[0, 0, middle, middle] == HEAD and seen[0, 0, middle + 1, middle] == NECK  # the neck behind
    assert seen[0, 0, middle - 1, middle] == WALL  # the wall ahead
    assert (seen[0, 0, middle:middle + 2, middle - 1] != WALL).all()  # the board goes on to the left


# the snake along a wall, heading each way: north with the east wall on its right, south with it on its left,
# west with the north wall on its right, east with the south wall on its right
@pytest.mark.parametrize("moves", [(2, 2, 2, 2, 0), (2, 2, 2, 2, 1), (0, 0, 0, 0, 0, 3), (1, 1, 1, 1, 2)])
def test_the_move_a_heading_net_values_as_ahead_or_right_reaches_the_cell_its_view_shows_there(moves):
    """The view and the actions agree: the env action that `HeadingActions` maps to the view's "up" moves
    the head onto the board cell the centred view shows above the head, and its "right" onto the cell on
    the right (a table at odds with its view, one that swapped left and right, would still value turned boards
    alike)."""
    from ddq.gamesim.snake_engine import ACTION_MOVES, HEAD

    network = build_q_network("snake-conv-egocentric", (1, 12, 12), 4)
    board = _board_after(moves)
    seen, heading = network[0](torch.from_numpy(board)[None, None])
    head = np.argwhere(board == HEAD)[0]
    middle = 9
    assert seen[0, 0, middle, middle + 1] != seen[0, 0, middle, middle - 1]  # a wall on one side only
    for view_cell in ((-1, 0), (0, 1), (0, -1)):  # ahead, right, left
        view_action = ACTION_MOVES.index(view_cell)
        [env_action] = (network.view_action[int(heading)] == view_action).nonzero()[0].tolist()
        row, col = head + ACTION_MOVES[env_action]
        assert seen[0, 0, middle + view_cell[0], middle + view_cell[1]] == board[row, col], (view_cell, env_action)


def test_the_wide_board_net_has_twice_the_channels_and_units():
    network = build_q_network("snake-conv-wide", (1, 12, 12), 4)
    conv = [layer for layer in network if isinstance(layer, nn.Conv2d)]
    hidden = [layer for layer in network if isinstance(layer, nn.Linear)]
    assert [layer.out_channels for layer in conv] == [32, 64] and hidden[0].out_features == 256


def test_the_model_settings_help_names_every_network_ddq_builds():
    """`--model`'s help is written in the settings (below the models, which it cannot import): it must not
    fall behind the networks ddq builds by name."""
    import dataclasses
    import re

    from ddq.config import AgentConfig
    from ddq.models import BUILDERS

    helped = next(f for f in dataclasses.fields(AgentConfig) if f.name == "model").metadata["help"]
    named = set(re.findall(r"[a-z0-9-]+", helped.split(":", 1)[1]))
    assert [name for name in BUILDERS if name not in named] == []
