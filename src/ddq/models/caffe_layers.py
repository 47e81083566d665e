"""Turns the Caffe layers of an imported Q-network into torch modules: shapes, fillers, lr multipliers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ddq.models.layers import ScaleBytes
from ddq.models.prototxt import Message, PrototxtError


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


def _pair(p: Message, name: str, default: int) -> tuple[int, int]:
    """Caffe's square-or-rectangular spatial settings: `kernel_size: 3`, or `kernel_h`/`kernel_w`."""
    if p.has(f"{name}_h") or p.has(f"{name}_w"):
        return int(p.get(f"{name}_h", default)), int(p.get(f"{name}_w", default))
    plural = name if p.has(name) else f"{name}_size"
    values = [int(v) for v in p.all(plural)]
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
    p = layer.spec.get(param_name, Message())
    weight, bias = module.get_parameter("weight"), getattr(module, "bias", None)
    blobs = [weight] + ([bias] if bias is not None else [])
    _fill(weight, p.get("weight_filler"), layer, source)
    if bias is not None:
        _fill(bias, p.get("bias_filler"), layer, source)
    for blob, (lr_mult, decay_mult) in zip(blobs, _multipliers(layer)):
        blob.lr_mult, blob.decay_mult = lr_mult, decay_mult  # FlatParameters gathers these
    return module


def _convolution(layer: Layer, shape: tuple[int, ...], source: str) -> tuple[nn.Module, tuple[int, ...]]:
    p = layer.spec.get("convolution_param", Message())
    kernel, stride = _pair(p, "kernel", 1), _pair(p, "stride", 1)
    pad, dilation = _pair(p, "pad", 0), _pair(p, "dilation", 1)
    out_channels = int(p.get("num_output"))
    conv = nn.Conv2d(shape[0], out_channels, kernel, stride, pad, dilation, int(p.get("group", 1)),
                     bias=bool(p.get("bias_term", True)))
    size = [(shape[1 + i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in (0, 1)]
    return _learnable(conv, layer, "convolution_param", source), (out_channels, *size)


def _pooling(layer: Layer, shape: tuple[int, ...], source: str) -> tuple[nn.Module, tuple[int, ...]]:
    p = layer.spec.get("pooling_param", Message())
    method = str(p.get("pool", "MAX")).upper()
    if method not in ("MAX", "AVE", "0", "1"):
        raise PrototxtError(f"layer {layer.name!r}: {method} pooling is not supported (MAX, AVE)", layer.line, source)
    average = method in ("AVE", "1")
    if p.get("global_pooling", False):
        return (nn.AdaptiveAvgPool2d(1) if average else nn.AdaptiveMaxPool2d(1)), (shape[0], 1, 1)
    kernel, stride, pad = _pair(p, "kernel", 1), _pair(p, "stride", 1), _pair(p, "pad", 0)
    if any(2 * pad[i] > kernel[i] for i in (0, 1)):
        raise PrototxtError(f"layer {layer.name!r}: padding wider than half the kernel", layer.line, source)
    pool = (nn.AvgPool2d(kernel, stride, pad, ceil_mode=True, count_include_pad=True) if average
            else nn.MaxPool2d(kernel, stride, pad, ceil_mode=True))
    size = [pooled_size(shape[1 + i], kernel[i], stride[i], pad[i]) for i in (0, 1)]
    return pool, (shape[0], *size)


def _inner_product(layer: Layer, shape: tuple[int, ...], source: str) -> tuple[list[nn.Module], tuple[int, ...]]:
    p = layer.spec.get("inner_product_param", Message())
    if int(p.get("axis", 1)) != 1:
        raise PrototxtError(f"layer {layer.name!r}: only axis 1 is supported", layer.line, source)
    out = int(p.get("num_output"))
    linear = _learnable(nn.Linear(math.prod(shape), out, bias=bool(p.get("bias_term", True))),
                        layer, "inner_product_param", source)
    return ([nn.Flatten()] if len(shape) > 1 else []) + [linear], (out,)


def build_sequential(q_layers: list[Layer], input_shape: tuple[int, ...], source: str) -> nn.Sequential:
    """The imported chain as nn.Sequential, starting from bytes-to-floats like ddq's own builders."""
    modules: list[nn.Module] = [ScaleBytes()]
    shape = input_shape
    for layer in q_layers:
        if layer.kind == "Convolution":
            if len(shape) != 3:
                raise PrototxtError(f"layer {layer.name!r}: convolution needs (channels, height, width) input, "
                                    f"got {shape}", layer.line, source)
            module, shape = _convolution(layer, shape, source)
            modules.append(module)
        elif layer.kind == "Pooling":
            module, shape = _pooling(layer, shape, source)
            modules.append(module)
        elif layer.kind == "InnerProduct":
            added, shape = _inner_product(layer, shape, source)
            modules += added
        elif layer.kind == "ReLU":
            slope = float(layer.spec.get("relu_param", Message()).get("negative_slope", 0.0))
            modules.append(nn.LeakyReLU(slope) if slope else nn.ReLU())
        elif layer.kind == "Dropout":
            modules.append(nn.Dropout(float(layer.spec.get("dropout_param", Message()).get("dropout_ratio", 0.5))))
        elif layer.kind == "Flatten":
            modules.append(nn.Flatten())
            shape = (math.prod(shape),)
        if min(shape) < 1:
            raise PrototxtError(f"layer {layer.name!r} leaves an empty output {shape}", layer.line, source)
    return nn.Sequential(*modules)
