"""The peers' runs of `ddq bench peers`, each in its own process, all held to ddq's criterion.

`python -m ddq.benchmarks.peer_runs PEER ENV SEED TARGET EVAL_EVERY RESULT_FILE [CLEANRL_CHECKOUT]` runs
one: Stable-Baselines3's DQN with rl-baselines3-zoo's settings for the env, or CleanRL's `dqn.py` as its
repository has it, with its own defaults. Every `EVAL_EVERY` env steps the run stops learning to play
`EVAL_EPISODES` greedy episodes side by side (`greedy_mean`, the same for both peers, as ddq's own
evaluations are); the first time their mean reaches the target, the run writes its env steps and the
seconds since its process started (the kernel's record) and ends. Evaluations count in every clock.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ddq.processes import process_started_at

EVAL_EPISODES = 10
EVAL_SEED_STRIDE = 1_000_003  # each evaluation plays fresh episodes, seeded apart from training's

# rl-baselines3-zoo's tuned DQN settings (hyperparams/dqn.yml) and budgets (n_timesteps): the epsilon
# schedule is a fraction of the budget, so the budget is part of the settings.
SB3_ZOO: dict[str, tuple[int, dict[str, Any]]] = {
    "CartPole-v1": (50_000, dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))),
    "LunarLander-v3": (100_000, dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
        target_update_interval=250, train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
        exploration_final_eps=0.1, policy_kwargs=dict(net_arch=[256, 256]))),
}
CLEANRL_SCRIPT = "cleanrl/dqn.py"  # inside a checkout of CleanRL's repository (github.com/vwxyzjn/cleanrl)


SYNC_VECTOR_ENV = gym.vector.SyncVectorEnv


class ReachedTarget(Exception):
    """Ends a peer's training from inside its loop, once the criterion is met."""


def greedy_mean(act: Callable[[np.ndarray], np.ndarray], env_id: str, seed: int) -> float:
    """The mean return of `EVAL_EPISODES` episodes played side by side by `act` (observations to
    greedy actions), one episode per env: ddq's own evaluation rule."""
    envs = SYNC_VECTOR_ENV([lambda: gym.make(env_id)] * EVAL_EPISODES)  # never CleanRL's counted one
    obs, _ = envs.reset(seed=seed)
    returns, done = np.zeros(EVAL_EPISODES), np.zeros(EVAL_EPISODES, dtype=bool)
    while not done.all():
        obs, rewards, terminated, truncated, _ = envs.step(act(obs))
        returns += np.where(done, 0.0, rewards)
        done |= terminated | truncated  # the step after an episode's end only resets: counted as done
    envs.close()
    return float(returns.mean())


class TargetCheck:
    """Counts env steps; every `eval_every`, evaluates, and records and raises `ReachedTarget` once the
    greedy mean reaches `target`."""

    def __init__(self, env_id: str, seed: int, target: float, eval_every: int, result_path: str):
        self.env_id, self.seed, self.target, self.eval_every = env_id, seed, target, eval_every
        self.result_path, self.started = result_path, process_started_at()
        self.steps = self.evaluations = 0
        self.reached = False
        self.write(steps_to_target=None, time_to_target_s=None)

    def write(self, **values: Any) -> None:
        Path(self.result_path).write_text(json.dumps({"seed": self.seed, "env_steps": self.steps, **values}))

    def stepped(self, steps: int, act: Callable[[np.ndarray], np.ndarray]) -> None:
        before, self.steps = self.steps, self.steps + steps
        if self.steps // self.eval_every == before // self.eval_every:
            return
        self.evaluations += 1
        if greedy_mean(act, self.env_id, self.seed + EVAL_SEED_STRIDE * self.evaluations) >= self.target:
            self.reached = True
            self.write(steps_to_target=self.steps, time_to_target_s=time.time() - self.started)
            raise ReachedTarget

    def ran_out(self) -> None:
        self.write(steps_to_target=None, time_to_target_s=None, wall_time_s=time.time() - self.started)


def run_stable_baselines3(criterion: TargetCheck) -> None:
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    budget, settings = SB3_ZOO[criterion.env_id]

    class Check(BaseCallback):
        def _on_step(self) -> bool:
            model = self.model
            try:
                criterion.stepped(model.env.num_envs if model.env else 1,
                                  lambda obs: model.predict(obs, deterministic=True)[0])
            except ReachedTarget:
                return False
            return True

    torch.set_num_threads(1)
    model = DQN("MlpPolicy", criterion.env_id, seed=criterion.seed, device="cpu", **settings)
    model.learn(total_timesteps=budget, callback=Check())
    if not criterion.reached:
        criterion.ran_out()


def _per_env(info: dict[str, Any], env: int) -> dict[str, Any]:
    """Env `env`'s entries of a vector info (arrays by env, with `_key` masks)."""
    return {key: _per_env(value, env) if isinstance(value, dict) else value[env]
            for key, value in info.items() if not key.startswith("_") and info.get(f"_{key}", [True] * (env + 1))[env]}


def _as_gymnasium_029_infos(infos: dict[str, Any], num_envs: int) -> dict[str, Any]:
    """A SAME_STEP vector info as Gymnasium 0.29 gave it: `final_observation`, and `final_info` as an
    array of each env's own info dict (None where no episode ended)."""
    if "final_obs" in infos:
        infos["final_observation"] = infos["final_obs"]
    if "final_info" in infos:
        ended = infos.get("_final_info", np.ones(num_envs, dtype=bool))
        infos["final_info"] = np.array([_per_env(infos["final_info"], i) if ended[i] else None
                                        for i in range(num_envs)], dtype=object)
    return infos


def _scripts_q_network() -> Any:
    """CleanRL's `q_network`: a global of the script's module, whose loop is a caller of the env's step."""
    frame = sys._getframe(1)
    while frame is not None:
        if "q_network" in frame.f_globals and "args" in frame.f_globals:
            return frame.f_globals["q_network"]
        frame = frame.f_back  # type: ignore[assignment]
    raise RuntimeError(f"no q_network in the code stepping the env: is this CleanRL's {CLEANRL_SCRIPT}?")


def run_cleanrl(criterion: TargetCheck, checkout: str) -> None:
    """CleanRL's dqn.py with its defaults (CPU, one torch thread). It was written for Gymnasium 0.29,
    whose vector envs reset an ended episode in the same step and hand its last observation over as
    `final_observation`; its envs here do the same (Gymnasium 1's SAME_STEP autoreset), and count
    steps for the criterion, which evaluates the script's own `q_network`."""
    import torch

    torch.set_num_threads(1)
    script = Path(checkout) / CLEANRL_SCRIPT

    class CountedVectorEnv(SYNC_VECTOR_ENV):
        def __init__(self, env_fns: Any, **kwargs: Any):
            super().__init__(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, **kwargs)

        def step(self, actions: Any) -> Any:
            obs, rewards, terminations, truncations, infos = super().step(actions)
            infos = _as_gymnasium_029_infos(infos, self.num_envs)
            q_network = _scripts_q_network()

            def act(observations: np.ndarray) -> np.ndarray:
                with torch.no_grad():
                    return q_network(torch.as_tensor(observations, dtype=torch.float32)).argmax(1).numpy()

            criterion.stepped(self.num_envs, act)
            return obs, rewards, terminations, truncations, infos

    vector: Any = gym.vector
    vector.SyncVectorEnv = CountedVectorEnv  # what the script's `gym.vector.SyncVectorEnv` finds
    sys.path.insert(0, str(script.parent.parent))  # its cleanrl_utils
    sys.argv = [str(script), "--env-id", criterion.env_id, "--seed", str(criterion.seed), "--no-cuda"]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except ReachedTarget:
        return
    finally:
        vector.SyncVectorEnv = SYNC_VECTOR_ENV
    criterion.ran_out()


if __name__ == "__main__":
    peer, env_id, seed, target, eval_every, result_path, *rest = sys.argv[1:]
    check = TargetCheck(env_id, int(seed), float(target), int(eval_every), result_path)
    if peer == "sb3":
        run_stable_baselines3(check)
    else:
        run_cleanrl(check, rest[0])
