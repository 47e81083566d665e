"""Caffe model definitions as torch Q-networks: the net (V1 `layers` and current `layer`) and the solver.

A DQN train net in Caffe holds more than the Q-network: data layers feeding
states, the target copy (the original's `P` layers, frozen with lr 0) and
the Q-learning loss built from Eltwise/Slice layers. The importer follows
the chain of network layers from the first input blob (the state) to the
Q-values, builds that as a torch module, and classifies every other layer:
a second chain mirroring the first is the target network, Eltwise/Slice/loss
layers are loss plumbing. Anything it cannot map is an error naming the
layer and its line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ddq.config.optimizer import OptimizerConfig
from ddq.models.caffe_layers import Layer, block, build_sequential, whole
from ddq.models.prototxt import Message, PrototxtError, parse, read_definition

NETWORK_KINDS = ("Convolution", "InnerProduct", "ReLU", "Pooling", "Dropout", "Flatten")
DATA_KINDS = ("MemoryData", "Input", "Data", "DummyData", "HDF5Data")
PLUMBING_KINDS = ("Eltwise", "Slice", "Concat", "Split", "Silence", "Reshape",
                  "EuclideanLoss", "SmoothL1Loss", "Power", "Scale")
# V1 enum spellings (INNER_PRODUCT) and current strings (InnerProduct) meet here.
_KINDS = {kind.upper(): kind for kind in NETWORK_KINDS + DATA_KINDS + PLUMBING_KINDS}


def _canonical(kind: str) -> str | None:
    return _KINDS.get(str(kind).replace("_", "").upper())


@dataclass
class ImportedNet:
    """The Q-network a Caffe net file describes, and what every other layer was recognised as."""

    name: str
    input_blob: str
    input_shape: tuple[int, ...]  # per-sample shape, e.g. (4, 16, 16)
    q_layers: list[Layer]
    roles: dict[str, str] = field(default_factory=dict)  # layer name -> input | q-network | target-network | loss
    source: str = "prototxt"

    @property
    def num_actions(self) -> int:
        outputs = [layer for layer in self.q_layers if layer.kind == "InnerProduct"]
        if not outputs:
            raise PrototxtError("the Q-network has no InnerProduct layer to give one value per action",
                                self.q_layers[-1].line if self.q_layers else None, self.source)
        return whole(outputs[-1], block(outputs[-1], "inner_product_param", self.source), "num_output", self.source)

    def build(self) -> nn.Sequential:
        """The Q-network as a torch module, taking uint8 frames or floats."""
        return build_sequential(self.q_layers, self.input_shape, self.source)


def _layers(net: Message, source: str) -> list[Layer]:
    layers = []
    for spec in net.messages("layers") + net.messages("layer"):
        kind = spec.get("type", "")
        for f in spec.fields:
            if f.name in ("name", "type", "bottom", "top") and not isinstance(f.value, (str, int)):
                raise PrototxtError(f"a layer's {f.name} must be a name, got a message", f.line, source)
        canonical = _canonical(kind)
        layers.append(Layer(spec.get("name", f"<unnamed, line {spec.line}>"), canonical or str(kind),
                            [str(b) for b in spec.all("bottom")], [str(t) for t in spec.all("top")], spec.line, spec,
                            canonical is not None))
    layers.sort(key=lambda layer: layer.line)  # a file may mix both spellings; Caffe runs them in order
    for layer in layers:
        if not layer.known:
            raise PrototxtError(f"layer {layer.name!r} has type {layer.kind}, which ddq cannot map to torch "
                                f"(it maps {', '.join(NETWORK_KINDS)}; data: {', '.join(DATA_KINDS)}; "
                                f"loss plumbing: {', '.join(PLUMBING_KINDS)})", layer.line, source)
    return layers


def _data_shapes(net: Message, layers: list[Layer], source: str) -> dict[str, tuple[int, ...]]:
    """Per-sample shapes of the blobs that data layers (or net-level `input`s) declare, in order."""
    shapes: dict[str, tuple[int, ...]] = {}
    net_input = Layer("input", "Input", [], [], net.line, net)  # the net-level `input`s, named in errors

    def dims(layer: Layer, message: Message, name: str = "dim") -> tuple[int, ...]:
        return tuple(whole(layer, Message(f.line, [f]), name, source) for f in message.fields if f.name == name)

    flat = dims(net_input, net, "input_dim")
    declared = [dims(net_input, s) for s in net.messages("input_shape")]
    for i, blob in enumerate(net.all("input")):
        shape = declared[i] if i < len(declared) else flat[4 * i:4 * i + 4]
        shapes[str(blob)] = shape[1:]
    for layer in layers:
        if layer.kind == "MemoryData" and layer.tops:
            p = block(layer, "memory_data_param", source)
            shapes[layer.tops[0]] = tuple(whole(layer, p, k, source, 1) for k in ("channels", "height", "width"))
        elif layer.kind in ("Input", "DummyData"):
            p = block(layer, "input_param" if layer.spec.has("input_param") else "dummy_data_param", source)
            for blob, declared_shape in zip(layer.tops, p.messages("shape")):
                shapes[blob] = dims(layer, declared_shape)[1:]
        elif layer.kind in ("Data", "HDF5Data"):
            raise PrototxtError(f"data layer {layer.name!r} reads a database whose shape the file does not state; "
                                "use MemoryData or Input with explicit dimensions", layer.line, source)
    if not shapes:
        raise PrototxtError("no input: the net declares no data layer and no `input`", None, source)
    return shapes


def _chain(layers: list[Layer], start: str) -> list[Layer]:
    """Network layers that carry blob `start` forward one after another (in-place layers included)."""
    chain, current = [], start
    for layer in layers:
        if layer.kind in NETWORK_KINDS and layer.bottoms == [current]:
            chain.append(layer)
            current = layer.tops[0] if layer.tops else current
    return chain


def _signature(layers: list[Layer]) -> list[tuple]:
    """What makes two chains the same network: kinds and each layer's parameters, not names or lrs."""
    def params(layer: Layer) -> str:
        blocks = [m for f in layer.spec.fields if f.name.endswith("_param") and isinstance(m := f.value, Message)]
        return repr([(f.name, f.value) for b in blocks for f in b.fields if not f.name.endswith("filler")])
    return [(layer.kind, params(layer)) for layer in layers]


def import_net(text: str, source: str = "prototxt") -> ImportedNet:
    """Reads a Caffe NetParameter in text format and picks out the Q-network."""
    net = parse(text, source)
    layers = _layers(net, source)
    shapes = _data_shapes(net, layers, source)
    input_blob = next(iter(shapes))
    q_layers = _chain(layers, input_blob)
    if not q_layers:
        raise PrototxtError(f"no network layer reads the input blob {input_blob!r}", None, source)
    roles = {layer.name: "input" for layer in layers if layer.kind in DATA_KINDS}
    roles.update({layer.name: "q-network" for layer in q_layers})
    for blob in list(shapes)[1:]:
        other = _chain(layers, blob)
        if other and _signature(other) == _signature(q_layers):
            roles.update({layer.name: "target-network" for layer in other})
    for layer in layers:
        if layer.name in roles:
            continue
        if layer.kind in PLUMBING_KINDS:
            roles[layer.name] = "loss"
        else:
            raise PrototxtError(f"layer {layer.name!r} ({layer.kind}) is neither on the Q-network's chain from "
                                f"{input_blob!r} nor part of a target copy of it; ddq imports sequential "
                                "Q-networks", layer.line, source)
    return ImportedNet(str(net.get("name", Path(source).stem)), input_blob, shapes[input_blob],
                       q_layers, roles, source)


def load_net(path: str | Path) -> ImportedNet:
    path = Path(path)
    return import_net(read_definition(path), str(path))


# ------------------------------------------------------------------ solver
# All six of Caffe's: V1's solver_type enum (NESTEROV) and the current type string (Nesterov) meet here.
_SOLVER_TYPES = {"SGD": "sgd", "NESTEROV": "nesterov", "ADAGRAD": "adagrad", "RMSPROP": "rmsprop",
                 "ADADELTA": "adadelta", "ADAM": "adam"}
# Caffe's one momentum field is the momentum of SGD, Nesterov and RMSprop, Adam's beta1 and AdaDelta's rho.
_MOMENTUM_IS = {"adam": "beta1", "adadelta": "rho"}
_IGNORED_SOLVER_KEYS = ("net", "train_net", "test_net", "test_iter", "test_interval", "display", "snapshot",
                        "snapshot_prefix", "solver_mode", "device_id", "random_seed", "average_loss",
                        "test_initialization", "iter_size", "debug_info", "snapshot_after_train",
                        "test_state", "test_compute_loss", "snapshot_diff", "snapshot_format", "layer_wise_reduce")


@dataclass
class ImportedSolver:
    optim: OptimizerConfig
    max_iter: int | None
    clip_gradients: float | None
    ignored: list[str]

    def as_settings(self) -> dict:
        """Config values (an [optim] table, plus gradient clipping) for ddq's configuration."""
        from dataclasses import asdict

        settings: dict = {"optim": asdict(self.optim)}
        if self.clip_gradients is not None:
            settings["max_grad_norm"] = self.clip_gradients
        return settings


def import_solver(text: str, source: str = "solver") -> ImportedSolver:
    """Maps a Caffe SolverParameter onto ddq's optimizer settings."""
    solver = parse(text, source)

    def line_of(key: str) -> int | None:
        return next((f.line for f in solver.fields if f.name == key), None)

    raw_type = str(solver.get("type", solver.get("solver_type", "SGD")))
    optimizer = _SOLVER_TYPES.get(raw_type.upper())
    if optimizer is None:
        raise PrototxtError(f"solver type {raw_type} has no ddq counterpart; ddq has "
                            + ", ".join(_SOLVER_TYPES), line_of("type") or line_of("solver_type"), source)
    policy = str(solver.get("lr_policy", "fixed"))
    if policy not in ("fixed", "step"):
        raise PrototxtError(f"lr_policy {policy!r} is not supported; ddq has fixed and step",
                            line_of("lr_policy"), source)
    if str(solver.get("regularization_type", "L2")) != "L2":
        raise PrototxtError("only L2 weight decay is supported", line_of("regularization_type"), source)

    def number(key: str, default: float, whole: bool = False) -> float:
        """A numeric setting, or an error naming its line (`base_lr: fast` is not one)."""
        value = solver.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or value != value \
                or abs(value) == float("inf"):
            raise PrototxtError(f"solver setting {key}: {value!r} is not a {'whole ' if whole else ''}number",
                                line_of(key), source)
        return value

    momentum: dict[str, Any] = {_MOMENTUM_IS.get(optimizer, "momentum"): number("momentum", 0.0)}
    try:  # the optimizer's own ranges (lr and stepsize positive, ...), said with the solver's file
        optim = OptimizerConfig(
            optimizer=optimizer, lr=number("base_lr", 0.01), **momentum,
            weight_decay=number("weight_decay", 0.0), rms_decay=number("rms_decay", 0.99),
            beta2=number("momentum2", 0.999), eps=number("delta", 1e-8), lr_policy=policy,
            lr_gamma=number("gamma", 0.1), lr_stepsize=int(number("stepsize", 100_000, whole=True)))
    except PrototxtError:
        raise
    except ValueError as error:
        raise PrototxtError(str(error), None, source) from error
    clip = number("clip_gradients", 0.0) if solver.has("clip_gradients") else None
    known = {"type", "solver_type", "lr_policy", "regularization_type", "momentum", "base_lr", "weight_decay",
             "rms_decay", "momentum2", "delta", "gamma", "stepsize", "max_iter", "clip_gradients"}
    ignored = sorted({f.name for f in solver.fields} - known)
    unknown = [name for name in ignored if name not in _IGNORED_SOLVER_KEYS]
    if unknown:
        raise PrototxtError(f"solver setting {unknown[0]!r} has no ddq counterpart", line_of(unknown[0]), source)
    max_iter = number("max_iter", 0, whole=True) if solver.has("max_iter") else None
    return ImportedSolver(optim, int(max_iter) if max_iter is not None else None,
                          float(clip) if clip is not None and float(clip) > 0 else None, ignored)


def load_solver(path: str | Path) -> ImportedSolver:
    path = Path(path)
    return import_solver(read_definition(path), str(path))

