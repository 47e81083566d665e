"""DQN in one file, to read top to bottom (the way CleanRL's dqn.py reads), built from ddq's core parts.

This is what `ddq train --mode serial --algo dqn` does, without the run folder, the
checkpoints, the flat-parameter plumbing the distributed modes share, or the
progress bar. The targets and the loss are ddq's own functions
(`ddq.core.dqn`), so they are exactly those of every ddq mode; a test checks
that `targets_and_loss` below gives serial mode's loss and gradient on the
same batch. The defaults are ddq's CartPole DQN preset (but eval_every, 5,000 here).

    python examples/dqn.py --env CartPole-v1 --total-steps 30000
"""

from __future__ import annotations

import argparse
import copy
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import ddq  # noqa: F401  (registers ddq/Snake-v0 with Gymnasium)
from ddq.core.dqn import LinearSchedule, UpdateSchedule, double_dqn_targets, epsilon_greedy, td_loss
from ddq.core.evaluate import evaluate
from ddq.core.replay import Batch, ReplayMemory
from ddq.gamesim.envs import make_vector_env
from ddq.gamesim.spec import frame_layout
from ddq.models import build_q_network


@dataclass
class Args:
    env: str = "CartPole-v1"
    seed: int = 0
    total_steps: int = 60_000  # env steps, over every env
    num_envs: int = 4  # envs stepped together
    hidden: tuple[int, ...] = (256, 256)  # the MLP's hidden widths
    buffer_size: int = 50_000
    batch_size: int = 64
    gamma: float = 0.99
    lr: float = 1.5e-3  # Adam
    max_grad_norm: float = 10.0
    learning_starts: int = 1_000  # env steps of pure exploration
    train_frequency: int = 16  # env steps between training rounds ...
    replay_ratio: float = 1.0  # ... of replay_ratio updates per env step
    target_update: int = 100  # updates between target-network refreshes
    epsilon_end: float = 0.04
    epsilon_steps: int = 4_000  # env steps over which epsilon falls from 1
    eval_every: int = 5_000
    target_return: float | None = 475.0  # stop once 10 greedy episodes average this


def targets_and_loss(q_net: nn.Module, target_net: nn.Module, batch: Batch, gamma: float) -> tuple[torch.Tensor,
                                                                                                   torch.Tensor]:
    """Double DQN: y = r + gamma * Q_target(s', argmax_a Q(s', a)), no bootstrap past a termination (a time
    limit is not one); the loss is the Huber loss between Q(s, a) and y."""
    states, next_states = torch.from_numpy(batch.states), torch.from_numpy(batch.next_states)
    actions, rewards = torch.from_numpy(batch.actions), torch.from_numpy(batch.rewards)
    terminated = torch.from_numpy(batch.terminated)
    with torch.no_grad():
        targets = double_dqn_targets(rewards, terminated, q_net(next_states), target_net(next_states), gamma)
    return targets, td_loss(q_net(states), actions, targets)


def main(args: Args) -> None:
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    envs = make_vector_env(args.env, args.num_envs)
    frame_shape, dtype = frame_layout(envs.single_observation_space)
    q_net = build_q_network("mlp", frame_shape, int(envs.single_action_space.n), list(args.hidden))
    target_net = copy.deepcopy(q_net)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=args.lr)
    replay = ReplayMemory(args.buffer_size, args.num_envs, frame_shape, dtype, seed=args.seed)
    epsilon = LinearSchedule(1.0, args.epsilon_end, args.epsilon_steps)
    schedule = UpdateSchedule(args.replay_ratio, args.train_frequency, args.learning_starts)

    observations, _ = envs.reset(seed=args.seed)
    replay.start(observations)
    resetting = np.zeros(args.num_envs, dtype=bool)  # a stream that ended last step is reset by the next
    env_steps = updates = 0
    next_eval, started = args.eval_every, time.time()
    while env_steps < args.total_steps:
        # ALGO LOGIC: act epsilon-greedily, record the transitions (an autoreset step is none)
        actions = epsilon_greedy(q_net, torch.from_numpy(observations), epsilon(env_steps), rng)
        observations, rewards, terminated, truncated, _ = envs.step(actions)
        continues = ~resetting
        replay.add(observations, actions, rewards, terminated, continues)
        resetting = continues & (terminated | truncated)
        env_steps += int(continues.sum())

        # ALGO LOGIC: train at the replay ratio (updates per env step), in rounds every train_frequency env steps
        for _ in range(schedule.due(int(continues.sum()), env_steps)):
            _, loss = targets_and_loss(q_net, target_net, replay.sample(args.batch_size), args.gamma)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(q_net.parameters(), args.max_grad_norm)
            optimizer.step()
            updates += 1
            if updates % args.target_update == 0:
                target_net.load_state_dict(q_net.state_dict())

        if env_steps >= next_eval:
            next_eval += args.eval_every
            greedy = evaluate(q_net, args.env, 10, seed=args.seed + 1_000_003).mean_return
            print(f"env steps {env_steps:,}  updates {updates:,}  greedy return {greedy:.1f}  "
                  f"{time.time() - started:.1f} s", flush=True)
            if args.target_return is not None and greedy >= args.target_return:
                break
    envs.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in vars(Args()).items():
        kind = type(value) if value is not None else float
        if isinstance(value, tuple):
            parser.add_argument("--" + name.replace("_", "-"), type=int, nargs="+", default=list(value))
        else:
            parser.add_argument("--" + name.replace("_", "-"), type=kind, default=value)
    main(Args(**vars(parser.parse_args())))
