"""Q-network builders (an MLP, the original DeepQ conv net, Nature-DQN) and model lookup by name or file."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from ddq.gamesim.spec import BOARD_GAME, BOARD_HEADING, BOARD_PLANES
from ddq.models.layers import BoardPlanes, ChannelNorm, DuelingHead, HeadingActions, HeadingView, ScaleBytes
from ddq.models.prototxt import read_definition


def _normed(layer_norm: bool, features: int, conv: bool = False) -> list[nn.Module]:
    """The normalisation PQN puts before a hidden layer's ReLU (none without `layer_norm`)."""
    if not layer_norm:
        return []
    return [ChannelNorm(features) if conv else nn.LayerNorm(features)]


def mlp(input_dim: int, num_actions: int, hidden: Sequence[int] = (256, 256),
        layer_norm: bool = False) -> nn.Sequential:
    """Fully connected Q-network for vector observations (CartPole) or small flattened images; with
    `layer_norm`, each hidden layer is normalised before its ReLU (PQN's stabiliser, in place of a target
    network)."""
    layers: list[nn.Module] = [ScaleBytes(), nn.Flatten()]
    width = input_dim
    for h in hidden:
        layers += [nn.Linear(width, h), *_normed(layer_norm, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_actions))
    return nn.Sequential(*layers)


def _pooled(size: int, times: int) -> int:
    # Caffe pools with ceil rounding; so does this network, to keep its shapes.
    for _ in range(times):
        size = math.ceil(size / 2)
    return size


def deepq(channels: int, height: int, width: int, num_actions: int) -> nn.Sequential:
    """The original ddq network: conv 32 7x7 - pool - conv 64 5x5 - pool - conv 64 3x3 - pool - fc 512.

    At 4x16x16 input and 4 actions it has the original's 228,132 parameters.
    """
    pool: dict[str, Any] = dict(kernel_size=2, stride=2, ceil_mode=True)
    flat = 64 * _pooled(height, 3) * _pooled(width, 3)
    return nn.Sequential(
        ScaleBytes(),
        nn.Conv2d(channels, 32, 7, padding=3), nn.ReLU(), nn.MaxPool2d(**pool),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(**pool),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(**pool),
        nn.Flatten(), nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, num_actions),
    )


def nature_dqn(channels: int, height: int, width: int, num_actions: int) -> nn.Sequential:
    """Mnih et al. (2015): conv 32 8x8/4 - conv 64 4x4/2 - conv 64 3x3/1 - fc 512, for 84x84 Atari."""
    def out(size: int) -> int:
        for kernel, stride in ((8, 4), (4, 2), (3, 1)):
            size = (size - kernel) // stride + 1
        return size

    return nn.Sequential(
        ScaleBytes(),
        nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * out(height) * out(width), 512), nn.ReLU(),
        nn.Linear(512, num_actions),
    )


SMALL_CONV = (16, 32, 128)  # the small conv net's two conv layers' channels and its hidden layer's units
# The board-planes nets by name: "snake-conv-wide" has twice the small conv net's channels and units
BOARD_NETS = {"snake-conv": SMALL_CONV, "snake-conv-wide": (32, 64, 256)}
# The same small net on the board as the snake sees it (`HeadingView`): turned so that it heads up, and also
# centred on its head; the value of each name is whether it is centred
HEADING_NETS = {"snake-conv-turned": False, "snake-conv-egocentric": True}


def small_conv(channels: int, height: int, width: int, num_actions: int, layer_norm: bool = False,
               inputs: nn.Module | None = None, widths: tuple[int, int, int] = SMALL_CONV) -> nn.Sequential:
    """A conv net sized for small boards (Snake's 12x12): conv 16 3x3 - conv 32 3x3/2 - fc 128 (`widths`).

    Two 3x3 layers see each cell with its neighbours (the head next to a wall, the neck, the apple);
    the stride halves the board before the fully connected layer, which sees it whole. About 10 ms
    per update at batch 64 on one CPU core: the fully connected layer dominates. With `layer_norm`
    (PQN), each hidden layer is normalised before its ReLU. `inputs`: what turns the frames into its
    `channels` of floats (default: bytes scaled to [0, 1]).
    """
    first, second, hidden = widths
    return nn.Sequential(
        inputs or ScaleBytes(),
        nn.Conv2d(channels, first, 3, padding=1), *_normed(layer_norm, first, conv=True), nn.ReLU(),
        nn.Conv2d(first, second, 3, stride=2, padding=1), *_normed(layer_norm, second, conv=True), nn.ReLU(),
        nn.Flatten(), nn.Linear(second * math.ceil(height / 2) * math.ceil(width / 2), hidden),
        *_normed(layer_norm, hidden), nn.ReLU(),
        nn.Linear(hidden, num_actions),
    )


def board_planes_conv(height: int, width: int, num_actions: int, layer_norm: bool = False,
                      widths: tuple[int, int, int] = SMALL_CONV) -> nn.Sequential:
    """The small conv net over Snake's board split into planes (walls, apple, head, body, the body's order):
    the first layer need not tell gray levels apart, and a long snake's order (a few levels a segment)
    is spread over [0, 1]. `widths`: its two conv layers' channels and its hidden layer's units."""
    planes = BoardPlanes(*BOARD_PLANES)
    return small_conv(planes.planes, height, width, num_actions, layer_norm, inputs=planes, widths=widths)


def heading_planes_conv(side: int, num_actions: int, layer_norm: bool, centred: bool) -> HeadingActions:
    """The board-planes conv net on the board as the snake sees it (`HeadingView`), its action values mapped
    back to the env's actions by the snake's heading (`HeadingActions`)."""
    head, neck, beyond, moves = BOARD_HEADING
    if num_actions != len(moves):
        raise ValueError(f"a heading view values {BOARD_GAME}'s {len(moves)} moves, but this env has "
                         f"{num_actions} actions")
    view = HeadingView(side, head, neck, beyond, moves, centred)
    layers = board_planes_conv(view.size, view.size, num_actions, layer_norm)
    return HeadingActions(view, *layers, moves=moves)


def minatar_dqn(channels: int, height: int, width: int, num_actions: int, layer_norm: bool = False) -> nn.Sequential:
    """Young and Tian (2019)'s MinAtar DQN: conv 16 3x3 (stride 1, no padding) - fc 128, for 10x10 games;
    with `layer_norm` (PQN), each hidden layer is normalised before its ReLU."""
    return nn.Sequential(
        ScaleBytes(),
        nn.Conv2d(channels, 16, 3), *_normed(layer_norm, 16, conv=True), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * (height - 2) * (width - 2), 128), *_normed(layer_norm, 128), nn.ReLU(),
        nn.Linear(128, num_actions),
    )


def with_dueling_head(network: nn.Module, source: str) -> nn.Module:
    """`network` with its last fully connected layer replaced by a `DuelingHead` of the same sizes."""
    last = network[-1] if isinstance(network, nn.Sequential) and len(network) else None
    if not isinstance(network, nn.Sequential) or not isinstance(last, nn.Linear):
        raise ValueError(f"dueling heads replace a network's last fully connected layer; {source} does not end "
                         "in one")
    network[-1] = DuelingHead(last.in_features, last.out_features)
    return network


BUILDERS = ("auto", "mlp", "small-conv", *BOARD_NETS, *HEADING_NETS, "minatar", "deepq", "nature")
ZOO = Path(__file__).with_name("zoo")  # the definitions ddq ships; the repository's models/ links here


def shipped_models() -> list[str]:
    """Names of the Caffe definitions ddq ships, usable as `--model NAME`."""
    return sorted(path.stem for path in ZOO.glob("*.prototxt"))


def model_definition(name: str) -> Path | None:
    """The prototxt file `name` refers to (a path, or a shipped name), or None for a builder name."""
    if name in BUILDERS:
        return None
    if (ZOO / f"{name}.prototxt").is_file():
        return ZOO / f"{name}.prototxt"
    if name.endswith(".prototxt") or Path(name).is_file():
        if not Path(name).is_file():
            raise FileNotFoundError(f"model file {name} does not exist")
        return Path(name)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(BUILDERS + tuple(shipped_models()))} "
                     "or give a .prototxt file")


def network_from_definition(text: str, source: str, state_shape: tuple[int, ...], num_actions: int) -> nn.Module:
    """The Q-network of a Caffe definition, checked against the states and actions it will meet."""
    from ddq.models.caffe import import_net

    imported = import_net(text, source)
    if tuple(imported.input_shape) != tuple(state_shape):
        raise ValueError(f"{source} takes states of shape {imported.input_shape}, but this env gives "
                         f"{tuple(state_shape)} (frames stacked first): pick a model, frame_stack or env size "
                         "that match")
    if imported.num_actions != num_actions:
        raise ValueError(f"{source} outputs {imported.num_actions} action values, but this env has "
                         f"{num_actions} actions")
    return imported.build()


def build_q_network(name: str, state_shape: tuple[int, ...], num_actions: int,
                    hidden: Sequence[int] = (256, 256), dueling: bool = False, layer_norm: bool = False) -> nn.Module:
    """A Q-network by name for states of `state_shape` (frames stacked first).

    `name` is a builder ("auto" picks the MLP for vector states, Nature-DQN
    for 84x84 frames and the original DeepQ net for other images), a shipped
    definition such as "deepq16", or a path to a Caffe .prototxt file.
    `dueling` gives it dueling heads (`DuelingHead`) in place of its last layer; `layer_norm` normalises
    the hidden layers of the MLP, the small conv net and MinAtar's (the others are built as defined).
    """
    network = _q_network(name, state_shape, num_actions, hidden, layer_norm)
    return with_dueling_head(network, f"model {name!r}") if dueling else network


def _q_network(name: str, state_shape: tuple[int, ...], num_actions: int, hidden: Sequence[int],
               layer_norm: bool) -> nn.Module:
    definition = model_definition(name)
    if definition is not None:
        return network_from_definition(read_definition(definition), str(definition), state_shape, num_actions)
    image = len(state_shape) == 3
    if name == "auto":
        name = ("nature" if state_shape[1:] == (84, 84) else "deepq") if image else "mlp"
    if name == "mlp":
        return mlp(math.prod(state_shape), num_actions, hidden, layer_norm)
    if len(state_shape) == 4:  # stacked frames with channels of their own (MinAtar's): the stack's channels, merged
        frames, channels, height, width = state_shape
        merged = _q_network(name, (frames * channels, height, width), num_actions, hidden, layer_norm)
        return nn.Sequential(nn.Flatten(1, 2), *merged.children())
    if not image:
        raise ValueError(f"model {name!r} needs image states (frames, height, width), got {state_shape}")
    channels, height, width = state_shape
    if name == "deepq":
        return deepq(channels, height, width, num_actions)
    if name == "small-conv":
        return small_conv(channels, height, width, num_actions, layer_norm)
    if name in BOARD_NETS or name in HEADING_NETS:
        if channels != 1 or height != width:
            raise ValueError(f"model {name!r} reads one {BOARD_GAME} board per state (one square channel), got "
                             f"{channels} channels of {height}x{width}")
        if name in HEADING_NETS:
            return heading_planes_conv(height, num_actions, layer_norm, HEADING_NETS[name])
        return board_planes_conv(height, width, num_actions, layer_norm, BOARD_NETS[name])
    if name == "minatar":
        return minatar_dqn(channels, height, width, num_actions, layer_norm)
    return nature_dqn(channels, height, width, num_actions)
