"""`ddq bench peers`: ddq serial beside Stable-Baselines3's tuned DQN on CartPole-v1, in one invocation.

For each seed, one ddq run and one Stable-Baselines3 run start together, each pinned to its own CPU core
(when there are two) with one torch thread, so both meet the same machine at the same moment. Both stop
at the same criterion: every 1,000 env steps, 10 greedy episodes played side by side; the first time
their mean reaches 475 the run has reached the target. Both report the time from their process's start
(the kernel's record of it) to that evaluation, and the env steps.

Stable-Baselines3's settings are rl-baselines3-zoo's for DQN on CartPole-v1 (hyperparams/dqn.yml):
256x256 MLP, Adam at 2.3e-3, batch 64, 128 gradient steps every 256 env steps, a hard target update
every 10 of them, epsilon from 1 to 0.04 over 16% of 50,000 steps.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ddq.processes import process_started_at

ENV_ID = "CartPole-v1"
TARGET = 475.0
EVAL_EVERY, EVAL_EPISODES = 1_000, 10
SB3_BUDGET = 50_000  # the zoo's n_timesteps: its epsilon schedule is a fraction of it
SB3_ZOO_SETTINGS: dict[str, Any] = dict(
    learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
    target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
    exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))
# ddq's side: the CartPole preset with a 64x64 MLP, ddq's fastest serial choice on a CPU (the preset keeps
# 256x256, which the distributed modes need); SB3's side: the zoo's tuned settings. --ddq-flags adds to it.
DDQ_SETTINGS = ["--hidden", "64", "64"]
INSTALL_HINT = "ddq bench peers needs Stable-Baselines3: pip install 'ddq[peers]' (or stable-baselines3)"


def has_stable_baselines3() -> bool:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def run_stable_baselines3(seed: int, result_path: str) -> None:
    """One Stable-Baselines3 run (in its own process: `python -m ddq.benchmarks.peers SEED FILE`)."""
    started = process_started_at()
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    result: dict[str, Any] = {"seed": seed, "steps_to_target": None, "time_to_target_s": None}

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.evaluations = 0

        def _on_step(self) -> bool:
            if self.num_timesteps % EVAL_EVERY:
                return True
            self.evaluations += 1
            eval_envs = make_vec_env(ENV_ID, n_envs=EVAL_EPISODES, seed=seed + 1_000_003 * self.evaluations)
            mean: Any = evaluate_policy(self.model, eval_envs, n_eval_episodes=EVAL_EPISODES, deterministic=True)[0]
            eval_envs.close()
            # Typed as float or list by SB3 (list only with return_episode_rewards); Any keeps mypy
            # quiet whether or not the optional extra is installed.
            if float(mean) >= TARGET:
                result.update(steps_to_target=self.num_timesteps, time_to_target_s=time.time() - started)
                return False
            return True

    model = DQN("MlpPolicy", ENV_ID, seed=seed, device="cpu", **SB3_ZOO_SETTINGS)
    model.learn(total_timesteps=SB3_BUDGET, callback=StopAtTarget())
    result.update(env_steps=int(model.num_timesteps), wall_time_s=time.time() - started)
    Path(result_path).write_text(json.dumps(result))


def _pinned(core: int | None) -> Any:
    if core is None:
        return None
    return lambda: os.sched_setaffinity(0, {core})


def run_pair(seed: int, folder: Path, ddq_flags: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """ddq and Stable-Baselines3 on `seed`, started together; their results (summary-like dicts)."""
    cores = sorted(os.sched_getaffinity(0))
    ddq_core, sb3_core = (cores[0], cores[1]) if len(cores) >= 2 else (None, None)
    run_dir, sb3_file = folder / f"ddq-{seed}", folder / f"sb3-{seed}.json"
    ddq = subprocess.Popen(
        [sys.executable, "-m", "ddq", "train", "--mode", "serial", "--env", ENV_ID, "--seed", str(seed),
         "--target-return", str(TARGET), "--eval-every", str(EVAL_EVERY), "--eval-episodes", str(EVAL_EPISODES),
         "--threads", "1", "--no-progress", "--run-dir", str(run_dir), *DDQ_SETTINGS, *ddq_flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_pinned(ddq_core))
    sb3 = subprocess.Popen([sys.executable, "-m", "ddq.benchmarks.peers", str(seed), str(sb3_file)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           preexec_fn=_pinned(sb3_core),
                           # SB3's logger otherwise leaves a dated folder in the system's /tmp per run.
                           env={**os.environ, "SB3_LOGDIR": str(folder / f"sb3-log-{seed}")})
    ddq_err, sb3_err = ddq.communicate()[1], sb3.communicate()[1]
    if ddq.returncode != 0:
        raise RuntimeError(f"ddq run of seed {seed} failed: {ddq_err.strip().splitlines()[-1:]}")
    if sb3.returncode != 0:
        raise RuntimeError(f"Stable-Baselines3 run of seed {seed} failed: {sb3_err.strip().splitlines()[-1:]}")
    return json.loads((run_dir / "summary.json").read_text()), json.loads(sb3_file.read_text())


def run_bench(seeds: list[int], ddq_flags: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    if not has_stable_baselines3():
        raise ValueError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="ddq-peers-") as tmp:
        pairs = []
        for seed in seeds:
            pairs.append(run_pair(seed, Path(tmp), ddq_flags))
            print(f"ddq: seed {seed} done", file=sys.stderr)
        return pairs


def _median(values: list[Any]) -> float | None:
    return float(statistics.median(values)) if values and None not in values else None


def _cell(value: float | None, digits: int = 1) -> str:
    return "not reached" if value is None else f"{value:,.{digits}f}"


def table(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    lines = ["| seed | ddq steps to 475 | ddq time to 475 (s) | SB3 steps to 475 | SB3 time to 475 (s) |",
             "|---|---|---|---|---|"]
    for ddq, sb3 in pairs:
        lines.append(f"| {ddq['seed']} | {_cell(ddq['steps_to_target'], 0)} | {_cell(ddq['time_to_target_s'])} | "
                     f"{_cell(sb3['steps_to_target'], 0)} | {_cell(sb3['time_to_target_s'])} |")
    medians = [_median([p[i][key] for p in pairs]) for i in (0, 1) for key in ("steps_to_target", "time_to_target_s")]
    lines.append(f"| **median** | {_cell(medians[0], 0)} | {_cell(medians[1])} | {_cell(medians[2], 0)} | "
                 f"{_cell(medians[3])} |")
    ratio = f"{medians[1] / medians[3]:.2f}" if medians[1] and medians[3] else "—"
    cores = "each pinned to its own core" if len(os.sched_getaffinity(0)) >= 2 else "sharing one core"
    return (f"{ENV_ID}: ddq serial ({' '.join(DDQ_SETTINGS)}) and Stable-Baselines3 DQN (rl-baselines3-zoo "
            f"settings) to a greedy mean of "
            f"{TARGET:g} over {EVAL_EPISODES} episodes, evaluated every {EVAL_EVERY:,} env steps; each seed's "
            f"pair ran at the same time, {cores}, one torch thread each; time counts from each process's "
            f"start\n\n" + "\n".join(lines) + f"\n\nddq's median time / Stable-Baselines3's: {ratio}")


if __name__ == "__main__":
    run_stable_baselines3(int(sys.argv[1]), sys.argv[2])
