"""Turns the Caffe layers of an imported Q-network into torch modules: shapes, fillers, lr multipliers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ddq.models.layers import ScaleBytes
from ddq.models.prototxt import Message, PrototxtError

# Every parameter of the network travels in each gradient as one float32 wire message, which Redis caps at
# 512 MB (134M parameters), and a learner holds several copies (online, target, gradient, optimizer moments).
# 100M in all leaves that room; Nature-DQN has 1.7M. Checked before anything is allocated.
MAX_PARAMETERS = 100_000_000
# A layer's output for one state, in values: 4M (a 1024x1024 image of 4 channels) is 512 MB for a
# minibatch of 32, and caps what padding or a wide layer makes the first forward pass allocate.
MAX_OUTPUT_VALUES = 4 * 2**20
MAX_FIELD = 2**31 - 1  # Caffe's integer fields are 32-bit


@dataclass
class Layer:
    """One layer of a Caffe net file, as the importer read it."""

    name: str
    kind: str  # canonical kind, or the file's spelling when ddq cannot map it
    bottoms: list[str]
    tops: list[str]
    line: int
    spec: Message
    known: bool = True


def whole(layer: Layer, p: Message, name: str, source: str, default: int | None = None, least: int = 1) -> int:
    """Field `name` of `p` as a whole number from `least`: missing (with no default) names the layer's line,
    anything else not allowed names the field's own line."""
    found = [f for f in p.fields if f.name == name]
    if not found:
        if default is None:
            raise PrototxtError(f"layer {layer.name!r} needs {name}: a whole number from {least}", layer.line, source)
        return default
    value, line = found[-1].value, found[-1].line
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_FIELD:
        raise PrototxtError(f"layer {layer.name!r}: {name}: {value!r} is not allowed; it must be a whole number "
                            f"from {least} to {MAX_FIELD}", line, source)
    return value


def block(layer: Layer, name: str, source: str) -> Message:
    """The layer's `name { ... }` settings (empty when absent); a scalar in its place names its line."""
    found = [f for f in layer.spec.fields if f.name == name]
    if not found:
        return Message(layer.line)
    if not isinstance(found[-1].value, Message):
        raise PrototxtError(f"layer {layer.name!r}: {name} must be a message {{ ... }}, got {found[-1].value!r}",
                            found[-1].line, source)
    return found[-1].value


@dataclass
class _Budget:
    """The parameters the layers built so far hold, against MAX_PARAMETERS."""

    source: str
    used: int = 0

    def take(self, layer: Layer, shape: tuple[int, ...], parameters: int) -> None:
        """Refuses the layer before torch allocates it: an empty or oversized output, or parameters past the
        network's budget."""
        if min(shape) < 1:
            raise PrototxtError(f"layer {layer.name!r} leaves an empty output {shape}", layer.line, self.source)
        if math.prod(shape) > MAX_OUTPUT_VALUES:
            raise PrototxtError(f"layer {layer.name!r} outputs {math.prod(shape):,} values a state {shape}; ddq "
                                f"allows at most {MAX_OUTPUT_VALUES:,}", layer.line, self.source)
        self.used += parameters
        if self.used > MAX_PARAMETERS:
            raise PrototxtError(f"layer {layer.name!r} has {parameters:,} parameters, {self.used:,} with the layers "
                                f"before it; ddq builds networks of at most {MAX_PARAMETERS:,} (a gradient must "
                                "fit one 512 MB Redis value)", layer.line, self.source)


def _pair(layer: Layer, p: Message, name: str, default: int, least: int, source: str) -> tuple[int, int]:
    """Caffe's square-or-rectangular spatial settings: `kernel_size: 3`, or `kernel_h`/`kernel_w`."""
    if p.has(f"{name}_h") or p.has(f"{name}_w"):
        return (whole(layer, p, f"{name}_h", source, default, least),
                whole(layer, p, f"{name}_w", source, default, least))
    plural = name if p.has(name) else f"{name}_size"
    values = [whole(layer, Message(f.line, [f]), plural, source, least=least) for f in p.fields if f.name == plural]
    if not values:
        return default, default
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


def pooled_size(size: int, kernel: int, stride: int, pad: int) -> int:
    """Caffe's pooling output size: ceil rounding, but never a window that starts in the padding."""
    out = math.ceil((size + 2 * pad - kernel) / stride) + 1
    if pad and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _fill(tensor: torch.Tensor, filler: Message | None, layer: Layer, source: str) -> None:
    """Caffe's fillers. Without one, torch's default initialisation stays (Caffe's default, zeros,
    would leave the network unable to learn)."""
    if filler is None:
        return
    kind = str(filler.get("type", "constant"))
    fan_in = tensor.numel() // tensor.shape[0]
    fan_out = tensor.numel() // tensor.shape[1] if tensor.dim() > 1 else tensor.numel()
    norm = str(filler.get("variance_norm", "FAN_IN"))
    n = {"FAN_IN": fan_in, "FAN_OUT": fan_out, "AVERAGE": (fan_in + fan_out) / 2}.get(norm, fan_in)
    with torch.no_grad():
        if kind == "constant":
            tensor.fill_(float(filler.get("value", 0.0)))
        elif kind == "gaussian":
            tensor.normal_(float(filler.get("mean", 0.0)), float(filler.get("std", 1.0)))
        elif kind == "uniform":
            tensor.uniform_(float(filler.get("min", 0.0)), float(filler.get("max", 1.0)))
        elif kind == "xavier":
            bound = math.sqrt(3.0 / n)
            tensor.uniform_(-bound, bound)
        elif kind == "msra":
            tensor.normal_(0.0, math.sqrt(2.0 / n))
        else:
            raise PrototxtError(f"layer {layer.name!r}: filler {kind!r} is not supported "
                                "(constant, gaussian, uniform, xavier, msra)", filler.line, source)


def _multipliers(layer: Layer) -> list[tuple[float, float]]:
    """(lr_mult, decay_mult) per blob: V1's `blobs_lr`/`weight_decay`, or the current `param { }`."""
    spec = layer.spec
    if spec.has("param"):
        return [(float(p.get("lr_mult", 1.0)), float(p.get("decay_mult", 1.0))) for p in spec.messages("param")]
    lrs, decays = spec.all("blobs_lr"), spec.all("weight_decay")
    return [(float(lrs[i]) if i < len(lrs) else 1.0, float(decays[i]) if i < len(decays) else 1.0)
            for i in range(max(len(lrs), len(decays)))]


def _learnable(module: nn.Module, layer: Layer, param_name: str, source: str) -> nn.Module:
    p = block(layer, param_name, source)
    weight, bias = module.get_parameter("weight"), getattr(module, "bias", None)
    blobs = [weight] + ([bias] if bias is not None else [])
    _fill(weight, p.get("weight_filler"), layer, source)
    if bias is not None:
        _fill(bias, p.get("bias_filler"), layer, source)
    for blob, (lr_mult, decay_mult) in zip(blobs, _multipliers(layer)):
        blob.lr_mult, blob.decay_mult = lr_mult, decay_mult  # FlatParameters gathers these
    return module


def _convolution(layer: Layer, shape: tuple[int, ...], budget: _Budget) -> tuple[nn.Module, tuple[int, ...]]:
    source = budget.source
    p = block(layer, "convolution_param", source)
    kernel, stride = _pair(layer, p, "kernel", 1, 1, source), _pair(layer, p, "stride", 1, 1, source)
    pad, dilation = _pair(layer, p, "pad", 0, 0, source), _pair(layer, p, "dilation", 1, 1, source)
    out_channels, group = whole(layer, p, "num_output", source), whole(layer, p, "group", source, 1)
    if shape[0] % group or out_channels % group:
        raise PrototxtError(f"layer {layer.name!r}: group {group} does not divide its {shape[0]} input and "
                            f"{out_channels} output channels", layer.line, source)
    size = [(shape[1 + i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in (0, 1)]
    bias = bool(p.get("bias_term", True))
    budget.take(layer, (out_channels, *size),
                out_channels * shape[0] // group * kernel[0] * kernel[1] + (out_channels if bias else 0))
    conv = nn.Conv2d(shape[0], out_channels, kernel, stride, pad, dilation, group, bias=bias)
    return _learnable(conv, layer, "convolution_param", source), (out_channels, *size)


def _pooling(layer: Layer, shape: tuple[int, ...], budget: _Budget) -> tuple[nn.Module, tuple[int, ...]]:
    source = budget.source
    p = block(layer, "pooling_param", source)
    method = str(p.get("pool", "MAX")).upper()
    if method not in ("MAX", "AVE", "0", "1"):
        raise PrototxtError(f"layer {layer.name!r}: {method} pooling is not supported (MAX, AVE)", layer.line, source)
    average = method in ("AVE", "1")
    if p.get("global_pooling", False):
        return (nn.AdaptiveAvgPool2d(1) if average else nn.AdaptiveMaxPool2d(1)), (shape[0], 1, 1)
    kernel, stride = _pair(layer, p, "kernel", 1, 1, source), _pair(layer, p, "stride", 1, 1, source)
    pad = _pair(layer, p, "pad", 0, 0, source)
    if any(2 * pad[i] > kernel[i] for i in (0, 1)):
        raise PrototxtError(f"layer {layer.name!r}: padding wider than half the kernel", layer.line, source)
    pool = (nn.AvgPool2d(kernel, stride, pad, ceil_mode=True, count_include_pad=True) if average
            else nn.MaxPool2d(kernel, stride, pad, ceil_mode=True))
    size = [pooled_size(shape[1 + i], kernel[i], stride[i], pad[i]) for i in (0, 1)]
    budget.take(layer, (shape[0], *size), 0)
    return pool, (shape[0], *size)


def _inner_product(layer: Layer, shape: tuple[int, ...], budget: _Budget) -> tuple[list[nn.Module], tuple[int, ...]]:
    source = budget.source
    p = block(layer, "inner_product_param", source)
    if whole(layer, p, "axis", source, 1, least=0) != 1:
        raise PrototxtError(f"layer {layer.name!r}: only axis 1 is supported", layer.line, source)
    out, bias = whole(layer, p, "num_output", source), bool(p.get("bias_term", True))
    budget.take(layer, (out,), math.prod(shape) * out + (out if bias else 0))
    linear = _learnable(nn.Linear(math.prod(shape), out, bias=bias), layer, "inner_product_param", source)
    return ([nn.Flatten()] if len(shape) > 1 else []) + [linear], (out,)


def build_sequential(q_layers: list[Layer], input_shape: tuple[int, ...], source: str) -> nn.Sequential:
    """The imported chain as nn.Sequential, starting from bytes-to-floats like ddq's own builders."""
    modules: list[nn.Module] = [ScaleBytes()]
    shape, budget = input_shape, _Budget(source)
    for layer in q_layers:
        try:
            added, shape = _modules(layer, shape, budget)
        except PrototxtError:
            raise
        except (TypeError, ValueError, ArithmeticError, AttributeError, RuntimeError) as error:
            # what the checks above do not foresee (torch refusing a setting) still names the layer and line
            raise PrototxtError(f"layer {layer.name!r} ({layer.kind}): {error}", layer.line, source) from error
        modules += added
        if min(shape) < 1:
            raise PrototxtError(f"layer {layer.name!r} leaves an empty output {shape}", layer.line, source)
    return nn.Sequential(*modules)


def _modules(layer: Layer, shape: tuple[int, ...], budget: _Budget) -> tuple[list[nn.Module], tuple[int, ...]]:
    """The torch modules of one layer and the per-sample shape it outputs."""
    if layer.kind == "Convolution":
        if len(shape) != 3:
            raise PrototxtError(f"layer {layer.name!r}: convolution needs (channels, height, width) input, "
                                f"got {shape}", layer.line, budget.source)
        module, shape = _convolution(layer, shape, budget)
        return [module], shape
    if layer.kind == "Pooling":
        module, shape = _pooling(layer, shape, budget)
        return [module], shape
    if layer.kind == "InnerProduct":
        return _inner_product(layer, shape, budget)
    if layer.kind == "ReLU":
        slope = float(block(layer, "relu_param", budget.source).get("negative_slope", 0.0))
        return [nn.LeakyReLU(slope) if slope else nn.ReLU()], shape
    if layer.kind == "Dropout":
        return [nn.Dropout(float(block(layer, "dropout_param", budget.source).get("dropout_ratio", 0.5)))], shape
    if layer.kind == "Flatten":
        return [nn.Flatten()], (math.prod(shape),)
    return [], shape
