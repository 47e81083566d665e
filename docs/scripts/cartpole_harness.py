"""A harness apart from `ddq bench peers`: time to a greedy CartPole 475, seed by seed, ddq's
defaults (`ddq train --mode serial --env CartPole-v1 --target-return 475 --seed S`, ddq's own clock: from the
command's start, evaluations included) against SB3's DQN with rl-baselines3-zoo's CartPole settings (clock
from the model's creation, evaluations left out). Greedy: 10 episodes every 1,000 env steps."""
import json, subprocess, tempfile, time
import torch, gymnasium as gym
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback

torch.set_num_threads(1)
ZOO = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1_000, gamma=0.99,
           target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
           exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))


def greedy_mean(model, seed):
    env = gym.make("CartPole-v1"); total = 0.0
    for episode in range(10):
        obs, _ = env.reset(seed=10_000 + seed * 100 + episode); done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(action); total += r; done = term or trunc
    return total / 10


class Until475(BaseCallback):
    def __init__(self, seed):
        super().__init__(); self.seed = seed; self.paused = 0.0; self.reached = None
    def _on_step(self):
        if self.num_timesteps % 1000 == 0:
            t = time.perf_counter(); mean = greedy_mean(self.model, self.seed); self.paused += time.perf_counter() - t
            if mean >= 475:
                self.reached = self.num_timesteps; return False
        return True


def sb3(seed):
    start = time.perf_counter()
    model = DQN("MlpPolicy", gym.make("CartPole-v1"), seed=seed, device="cpu", **ZOO)
    callback = Until475(seed)
    # the zoo's own budget for CartPole (n_timesteps 5e4): SB3's exploration is a fraction of it, so a larger
    # budget would stretch its exploration past the zoo's settings
    model.learn(total_timesteps=50_000, callback=callback)
    return callback.reached, time.perf_counter() - start - callback.paused


def ddq(seed):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["ddq", "train", "--mode", "serial", "--env", "CartPole-v1",
                        "--target-return", "475", "--seed", str(seed), "--no-progress", "--run-dir", tmp + "/run"],
                       check=True, capture_output=True)
        s = json.load(open(tmp + "/run/summary.json"))
        return s["steps_to_target"], s["time_to_target_s"]


for seed in range(10):
    d, s = ddq(seed), sb3(seed)
    print(json.dumps({"seed": seed, "ddq_steps": d[0], "ddq_s": d[1], "sb3_steps": s[0], "sb3_s": s[1]}), flush=True)
