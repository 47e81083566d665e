"""`ddq bench grad`: the original's cost-versus-image-size table, re-measured with ddq's gradient path.

For the DeepQ network at each input size, and for ddq's default MLP on CartPole's shapes (4 inputs,
256x256, 2 actions, as CartPole's DQN preset): parameters, message size, time to
serialize a gradient message and to load a weights message into the network, and time per
minibatch gradient (batch 32: Q(s) forward and backward plus the target network's forward on s',
the original's plain DQN target). ddq's gradient (Learner over flat parameters, then the message as
the parameter server's client sends it) is timed against a bare PyTorch step of the same arithmetic
in the same run, alternately; the difference is ddq's overhead. `--device cuda` times both on a GPU
(synchronising after each block of steps).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ddq.core.learner import Learner
from ddq.core.optimizers import OptimizerConfig
from ddq.core.replay import Batch
from ddq.core.replay_training import replay_gradient
from ddq.models.networks import deepq, mlp
from ddq.transport.wire import GRADIENT, WEIGHTS, Expect, Header, MessageBuffer, decode, layout_bytes, pack_header

BATCH, FRAMES, ACTIONS, GAMMA = 32, 4, 4, 0.99

# The original's first trial (results_cost-vs-image-size-trials.txt, Caffe on a 2015 2-core laptop):
# size: (message MB, serialize ms, load ms, gradient ms)
ORIGINAL = {
    16: (0.91, 2.03, 0.76, 81.565), 24: (1.57, 2.87, 1.35, 160.422), 32: (2.49, 4.03, 2.13, 253.853),
    40: (3.67, 4.79, 2.71, 382.495), 48: (5.11, 5.74, 3.51, 551.081), 56: (6.81, 7.34, 4.12, 745.911),
    64: (8.78, 7.95, 4.98, 980.766), 72: (11.01, 9.93, 6.05, 1231.228), 80: (13.5, 11.35, 7.14, 1516.303),
    88: (16.25, 13.29, 8.31, 1821.476), 96: (19.26, 15.53, 9.6, 2170.815), 104: (22.54, 17.35, 11.39, 2528.723),
    112: (26.08, 20.01, 12.43, 2908.716), 120: (29.88, 22.6, 14.16, 3332.237), 128: (33.94, 25.43, 16.13, 4044.292),
}


MLP_INPUTS, MLP_ACTIONS = 4, 2  # CartPole's, with its DQN preset's 256x256 hidden layers
CPU = torch.device("cpu")
BLOCK_S = 0.02  # seconds of steps per timed sample in the bare-against-ddq comparison


@dataclass
class GradRow:
    size: int  # DeepQ input side; 0 for the MLP
    params: int
    serialize_ms: float
    load_ms: float
    bare_ms: float  # bare PyTorch, 1 thread
    ddq_ms: float  # ddq's gradient + message, 1 thread
    ddq_2threads_ms: float
    ddq_bf16_ms: float

    @property
    def overhead(self) -> float:
        return self.ddq_ms / self.bare_ms - 1.0


def _timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds `fn` takes, its GPU work included."""
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _network(size: int) -> torch.nn.Module:
    """DeepQ at `size`x`size`, or (size 0) the default MLP on CartPole's shapes."""
    return mlp(MLP_INPUTS, MLP_ACTIONS) if size == 0 else deepq(FRAMES, size, size, ACTIONS)


def _batch(size: int, rng: np.random.Generator) -> Batch:
    if size == 0:
        def states() -> np.ndarray:
            return rng.standard_normal((BATCH, MLP_INPUTS), dtype=np.float32)
    else:
        def states() -> np.ndarray:
            return rng.integers(0, 256, (BATCH, FRAMES, size, size), dtype=np.uint8)
    actions = MLP_ACTIONS if size == 0 else ACTIONS
    return Batch(states=states(), actions=rng.integers(0, actions, BATCH), rewards=rng.random(BATCH, dtype=np.float32),
                 next_states=states(), terminated=np.zeros(BATCH, dtype=bool))


def _bare_step(size: int, batch: Batch, device: torch.device) -> Callable[[], None]:
    """The same computation as plain PyTorch: two modules, no flat buffers, no message."""
    online, target = _network(size).to(device), _network(size).to(device)
    states, next_states, actions, rewards, terminated = (
        torch.from_numpy(batch.states), torch.from_numpy(batch.next_states), torch.from_numpy(batch.actions),
        torch.from_numpy(batch.rewards), torch.from_numpy(batch.terminated))

    def step() -> None:
        s, s2, a, r, done = (t.to(device, non_blocking=True) for t in (states, next_states, actions, rewards,
                                                                        terminated))
        with torch.no_grad():
            targets = r + GAMMA * (1.0 - done.float()) * target(s2).max(dim=1).values
        chosen = online(s).gather(1, a.unsqueeze(1)).squeeze(1)
        online.zero_grad()
        F.smooth_l1_loss(chosen, targets).backward()
    return step


def _ddq_step(size: int, batch: Batch, precision: str,
              device: torch.device) -> tuple[Callable[[], object], Learner]:
    """What a worker does per gradient: the learner's gradient, then the gradient message as the parameter
    server's client sends it (a packed header and a view of the flat gradient, which the socket write copies).
    On a GPU that message waits for the gradient on the host each step; the bare step has no such wait, so
    there ddq's overhead includes one synchronisation per gradient."""
    learner = Learner(_network(size), OptimizerConfig(optimizer="sgd"), GAMMA, target_update=10**9,
                      max_grad_norm=None, device=device, double_dqn=False, precision=precision)
    layout = layout_bytes(learner.flat.layout_hash())

    def step() -> tuple[bytes, memoryview]:
        stats = replay_gradient(learner, batch)
        header = pack_header(Header(GRADIENT, layout, 0, learner.flat.size, samples=BATCH, loss=stats.loss))
        return header, learner.flat.grad.cpu().numpy().data.cast("B")
    return step, learner


def _repeated(fn: Callable[[], object], times: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(times):
            fn()
    return run


def _warm_time(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds a warmed-up call of `fn` takes: one timed call, or the median of three when it is short."""
    once = _timed(fn, device)
    return once if once >= BLOCK_S else statistics.median(_timed(fn, device) for _ in range(3))


def _medians_ms(steps: list[Callable[[], object]], repeats: int, device: torch.device = CPU) -> list[float]:
    """Median ms per call of each step, measured alternately, so drifting machine load hits all alike. Each
    sample times a block of calls lasting about BLOCK_S (sized after a warm-up call of each), so a
    millisecond step is not lost in timer and scheduler noise; on a GPU each block ends synchronised."""
    for fn in steps:
        fn()
    slowest = max(_warm_time(fn, device) for fn in steps)
    calls = max(1, round(BLOCK_S / max(slowest, 1e-6)))
    blocks = [_repeated(fn, calls) for fn in steps]
    samples: list[list[float]] = [[] for _ in steps]
    for _ in range(repeats):
        for run_block, times in zip(blocks, samples):
            times.append(_timed(run_block, device) / calls)
    return [statistics.median(times) * 1e3 for times in samples]


def measure(size: int, repeats: int = 5, seed: int = 0, device: str = "cpu") -> GradRow:
    """One row: DeepQ at `size`x`size` (0: the default MLP) on `device`."""
    dev = torch.device(device)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    batch = _batch(size, rng)
    torch.set_num_threads(1)
    ddq_step, learner = _ddq_step(size, batch, "fp32", dev)
    bare_ms, ddq_ms = _medians_ms([_bare_step(size, batch, dev), ddq_step], repeats, dev)
    bf16_step, _ = _ddq_step(size, batch, "bf16", dev)
    [bf16_ms] = _medians_ms([bf16_step], repeats, dev)
    torch.set_num_threads(2)
    [two_ms] = _medians_ms([ddq_step], repeats, dev)
    torch.set_num_threads(1)

    n, layout = learner.flat.size, layout_bytes(learner.flat.layout_hash())
    buffer = MessageBuffer(n)
    weights = bytes(buffer.pack(Header(WEIGHTS, layout, 1, n), learner.flat.data.cpu().numpy()))
    expect = Expect(WEIGHTS, layout, 0, n)
    serialize_ms, load_ms = _medians_ms(
        [lambda: buffer.pack(Header(GRADIENT, layout, 1, n), learner.flat.grad.cpu().numpy()),
         lambda: learner.flat.assign(decode(weights, expect)[1])], 30)
    return GradRow(size, n, serialize_ms, load_ms, bare_ms, ddq_ms, two_ms, bf16_ms)


def table(rows: list[GradRow], device: str = "cpu") -> str:
    lines = [
        "| input | parameters | message MB | serialize ms (orig.) | load ms (orig.) | bare PyTorch ms | "
        "ddq ms | ddq overhead | ddq 2 threads ms | ddq bf16 ms | original ms | ddq vs original |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        orig = ORIGINAL.get(r.size)
        beside = (lambda ours, theirs: f"{ours:.2f} ({theirs:g})") if orig else (lambda ours, _: f"{ours:.2f}")
        cells = [f"{r.size}x{r.size}" if r.size else "MLP 4-256-256-2", f"{r.params:,}", f"{4 * r.params / 1e6:.2f}",
                 beside(r.serialize_ms, orig and orig[1]), beside(r.load_ms, orig and orig[2]),
                 f"{r.bare_ms:.1f}", f"{r.ddq_ms:.1f}", f"{100 * r.overhead:+.1f}%", f"{r.ddq_2threads_ms:.1f}",
                 f"{r.ddq_bf16_ms:.1f}", f"{orig[3]:,.1f}" if orig else "—",
                 f"{orig[3] / r.ddq_ms:.1f}x" if orig else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return (f"DeepQ network (4 frames, 4 actions) and the default MLP (CartPole's shapes), batch 32, on {device}; "
            "times are medians, 1 torch thread unless stated\n\n" + "\n".join(lines))
