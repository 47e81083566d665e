"""PQN's minibatch update on CartPole's default network (4 -> 64 LN -> 64 LN -> 2, batch 32, Adam, clip 10):
ddq's Learner path against bare PyTorch, eager and torch.compile'd, one thread, alternating blocks."""
import statistics, sys, time
import torch
from torch import nn
from torch.nn import functional as F
from ddq.core.pqn import regression_gradient
from ddq.core.learner import Learner
from ddq.core.optimizers import OptimizerConfig
from ddq.models.networks import mlp

torch.set_num_threads(1)
torch.manual_seed(0)
BATCH = int(sys.argv[1]) if len(sys.argv) > 1 else 32
HIDDEN = [int(h) for h in sys.argv[2].split(",")] if len(sys.argv) > 2 else [64, 64]
IN, ACT = (4, 2) if len(sys.argv) <= 3 else (int(sys.argv[3]), int(sys.argv[4]))
states, actions, returns = torch.randn(BATCH, IN), torch.randint(0, ACT, (BATCH,)), torch.randn(BATCH)

learner = Learner(mlp(IN, ACT, HIDDEN, layer_norm=True), OptimizerConfig(optimizer="adam", lr=3e-3, eps=None), 0.99,
                  1000, 10.0, "cpu")
def ddq_step():
    regression_gradient(learner, states, actions, returns)
    learner.apply_gradient()

def bare(compiled):
    net = mlp(IN, ACT, HIDDEN, layer_norm=True)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    def loss_fn():
        return F.mse_loss(net(states).gather(1, actions[:, None]).squeeze(1), returns)
    fn = torch.compile(loss_fn) if compiled else loss_fn
    def step():
        opt.zero_grad()
        fn().backward()
        nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        opt.step()
    return step

steps = {"ddq": ddq_step, "bare eager": bare(False), "bare compiled": bare(True)}
for fn in steps.values():
    for _ in range(50):
        fn()  # warm-up, and compilation
samples = {k: [] for k in steps}
for _ in range(30):
    for name, fn in steps.items():
        start = time.perf_counter(); n = 0
        while time.perf_counter() - start < 0.05:
            fn(); n += 1
        samples[name].append((time.perf_counter() - start) / n * 1e6)
for name, s in samples.items():
    print(f"{name}: {statistics.median(s):.0f} us per update (quartiles {statistics.quantiles(s)[0]:.0f}-{statistics.quantiles(s)[2]:.0f})")
