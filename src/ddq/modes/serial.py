"""Serial DQN: one process, no Redis, no Spark; the baseline every other mode is measured against.

Read top to bottom like CleanRL's dqn.py: act, store, train at the replay
ratio, evaluate greedily, checkpoint, stop at the step budget or the target.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ddq.bookkeeping import (
    RunCounters,
    evaluation_seed,
    note_evaluation,
    note_training,
    open_run_log,
    play_evaluation,
    progress_values,
    resumed_counters,
    run_summary,
)
from ddq.config import TrainConfig
from ddq.core import checkpoint as ckpt
from ddq.core.agent import build_agent, env_spec, importance_beta
from ddq.core.dqn import next_mark
from ddq.core.symmetry import SymmetryAugmentation
from ddq.core.weights import LocalParameters
from ddq.lifecycle import StopReason, StopSignals, stop_reason
from ddq.run_folder import write_together


@dataclass
class Throughput:
    """Where the run stood at its previous training point (at first: where the session began), for the env
    steps and updates per second since."""

    wall_time_s: float
    env_steps: int
    updates: int

    def since(self, wall_time_s: float, env_steps: int, updates: int) -> dict[str, float | None]:
        seconds = wall_time_s - self.wall_time_s
        rates = {"env_steps_per_s": (env_steps - self.env_steps) / seconds if seconds > 0 else None,
                 "updates_per_s": (updates - self.updates) / seconds if seconds > 0 else None}
        self.wall_time_s, self.env_steps, self.updates = wall_time_s, env_steps, updates
        return rates


class SerialTrainer:
    """Wires an actor, a replay memory and a learner in one process."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, started_at: float | None = None,
                 resume: dict[str, Any] | None = None):
        self.config = config
        self.run_dir = Path(run_dir)
        self.started_at = started_at if started_at is not None else time.time()
        agent = build_agent(config.agent, config.agent.seed, config.run.total_steps)
        self.device, self.learner, self.replay, self.actor = agent.device, agent.learner, agent.replay, agent.actor
        self.rng, self.agent = agent.rng, agent
        self.weights = LocalParameters(self.learner)  # the learner's own optimizer applies each gradient
        self.epsilon = agent.epsilon  # driven by this process's env steps
        self.log = open_run_log(config, self.run_dir, resume["counters"]["env_steps"] if resume else None)
        self.counters = RunCounters()
        self.stopped_because: StopReason | None = None
        self.stopped_by: str | None = None  # the signal that stopped the run, if one did
        self.exit_code = 0
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.last_eval: tuple[int, float, float] | None = None  # (env steps, mean return, mean rewarded steps)
        if resume is not None:
            self._restore(resume)
        # the run's clock: from the command's start, less the earlier sessions of a resumed run
        self.origin = self.started_at - self.counters.wall_time_s
        self.throughput = Throughput(self.counters.wall_time_s, self.counters.env_steps, self.learner.updates)
        self._window: dict[str, list[float]] = {"loss": [], "mean_max_q": [], "grad_norm": []}

    # ------------------------------------------------------------------ loop
    def run(self) -> dict[str, Any]:
        """Train until the step budget is spent or the target return is reached."""
        with self.log:  # closed also when a second Ctrl-C aborts or an error ends the run: no event is lost
            return self._run()

    def _run(self) -> dict[str, Any]:
        c = self.config
        self.actor.reset(seed=c.agent.seed + self.counters.env_steps)
        self.actor.env_steps = self.counters.env_steps
        marks = {name: self._next_mark(getattr(c.run, name))
                 for name in ("log_every", "eval_every", "checkpoint_every")}
        reached = False
        with StopSignals() as signals, tqdm(total=c.run.total_steps, initial=self.actor.env_steps, unit="step",
                                            disable=not c.run.progress, mininterval=1.0, dynamic_ncols=True) as bar:
            while (reason := stop_reason(self.actor.env_steps, c.run.total_steps, reached, c.run.time_budget_s,
                                         self.started_at, user_stopped=signals.received is not None,
                                         episodes=self.counters.episodes, total_episodes=c.run.total_episodes)) is None:
                before = self.actor.env_steps
                self._act()
                self._train(self.actor.env_steps - before)
                self.counters.wall_time_s = time.time() - self.origin
                bar.update(min(self.actor.env_steps, c.run.total_steps) - bar.n)  # past the total, tqdm drops the %
                steps = self.actor.env_steps
                if steps >= marks["log_every"]:
                    marks["log_every"] = self._next_mark(c.run.log_every)
                    self._log_training()
                    bar.set_postfix(self._bar_values(), refresh=False)
                if steps >= marks["eval_every"]:
                    marks["eval_every"] = self._next_mark(c.run.eval_every)
                    reached = self._evaluate_and_check(closing=False)
                    bar.set_postfix(self._bar_values(), refresh=False)  # the bar shows the newest greedy score
                if steps >= marks["checkpoint_every"]:
                    marks["checkpoint_every"] = self._next_mark(c.run.checkpoint_every)
                    self.save()
        self.stopped_because, self.stopped_by = reason, signals.received
        self.exit_code = signals.exit_code()
        return self._finish()

    def _next_mark(self, every: int) -> int:
        return next_mark(self.counters.env_steps, every)

    def _act(self) -> None:
        epsilon = self.epsilon(self.actor.env_steps)
        for episode in self.actor.step(self.learner.online, epsilon):
            self.counters.episodes += 1
            self.recent_returns.append(episode.episode_return)
            self.log.write("episode", env_steps=self.actor.env_steps, episode_return=episode.episode_return,
                           length=episode.length, truncated=episode.truncated)
        self.counters.env_steps = self.actor.env_steps

    def _train(self, new_steps: int) -> None:
        """What the agent's rule says is due (`TrainingAgent.train`), applied by the learner's own optimizer."""
        done = self.agent.train(self.weights, new_steps, importance_beta(self.config.agent, self.counters.env_steps,
                                                                         self.config.run.total_steps))
        for stats in done:
            for key in self._window:
                if (value := getattr(stats, key)) is not None:  # mean max-Q, gradient norm: measured 1 in 8
                    self._window[key].append(value)

    # --------------------------------------------------------------- logging
    def _log_training(self) -> None:
        means = {k: float(np.mean(v)) if v else None for k, v in self._window.items()}
        for values in self._window.values():
            values.clear()
        steps, updates = self.actor.env_steps, self.learner.updates
        note_training(self.log, self.counters, steps, updates, self.epsilon(steps),
                      **self.throughput.since(self.counters.wall_time_s, steps, updates),
                      recent_return=self._recent_return(), **means)

    def _recent_return(self) -> float | None:
        return float(np.mean(self.recent_returns)) if self.recent_returns else None

    def _bar_values(self) -> dict[str, str]:
        return progress_values(self._recent_return(), self.epsilon(self.actor.env_steps), self.last_eval,
                               env_spec(self.config.agent).score)

    def _evaluate_and_check(self, closing: bool) -> bool:
        """The run's greedy evaluation at an eval_every mark (or, `closing`, where it stopped), logged with its
        episodes' seed, and its weights kept in best.pt when it is the best so far; True once it reached the
        target."""
        result = play_evaluation(self.learner.online, self.config,
                                 evaluation_seed(self.config, self.actor.env_steps, closing), self.device)
        noted = note_evaluation(result, self.config, self.log, self.counters, self.actor.env_steps,
                                self.learner.updates, self.origin)
        if noted.best:
            ckpt.save_checkpoint(self.run_dir / ckpt.BEST_NAME, self.config, self.learner, self.counters.as_dict(), {})
        self.last_eval = noted.last_eval
        return noted.reached

    # ----------------------------------------------------------- checkpoints
    def save(self) -> Path:
        """The checkpoint and the replay memory, written together: a full disk that stops either leaves
        both as they were, and the checkpoint (renamed last) names the replay memory it goes with."""
        keep_replay = self.config.run.save_replay and self.agent.replays
        checkpoint = ckpt.checkpoint_writer(self.config, self.learner, self.counters.as_dict(), self._rng_states(),
                                            self.replay.written if keep_replay else None)
        replay = [(self.run_dir / ckpt.REPLAY_NAME, self.replay.writer())] if keep_replay else []
        return write_together([*replay, (self.run_dir / ckpt.CHECKPOINT_NAME, checkpoint)])[-1]

    def _rng_states(self) -> dict[str, Any]:
        states = {"actor": self.rng.bit_generator.state, "replay": self.replay.rng.bit_generator.state,
                  "torch": torch.get_rng_state()}
        if isinstance(self.learner.augmentation, SymmetryAugmentation):
            states["augmentation"] = self.learner.augmentation.rng.bit_generator.state
        return states

    def _restore(self, saved: dict[str, Any]) -> None:
        self.learner.load_state_dict(saved["learner"])
        self.counters = resumed_counters(saved, self.run_dir)
        self.rng.bit_generator.state = saved["rng"]["actor"]
        self.replay.rng.bit_generator.state = saved["rng"]["replay"]
        torch.set_rng_state(saved["rng"]["torch"])
        if isinstance(self.learner.augmentation, SymmetryAugmentation) and "augmentation" in saved["rng"]:
            self.learner.augmentation.rng.bit_generator.state = saved["rng"]["augmentation"]
        if self.agent.replays and not self._restore_replay(saved):
            # an empty memory fills again before learning, as a fresh run's does: trained at once, a few dozen
            # transitions were drawn over and over at the run's low epsilon
            self.agent.schedule.learning_starts += int(saved["counters"].get("env_steps", 0))

    def _restore_replay(self, saved: dict[str, Any]) -> bool:
        """Loads the replay memory saved with the checkpoint; whether there was one to load."""
        replay_file = self.run_dir / ckpt.REPLAY_NAME
        if not (self.config.run.save_replay and replay_file.exists()):
            return False
        with np.load(replay_file) as held:
            written = int(held["written"])
        wanted = saved.get("replay_written", written)
        if written != wanted:  # stopped between the two renames: a newer memory beside an older checkpoint
            print(f"ddq: {replay_file} holds {written} transitions, not the {wanted} its checkpoint was saved "
                  f"with (the run was stopped between writing them): the resumed run starts with an empty "
                  f"replay memory", file=sys.stderr, flush=True)
            return False
        self.replay.load(str(replay_file))
        return True

    def _finish(self) -> dict[str, Any]:
        if self.last_eval is None or self.last_eval[0] != self.actor.env_steps:
            self._evaluate_and_check(closing=True)
        self.counters.wall_time_s = time.time() - self.origin  # after the last evaluation: never below time_to_target_s
        checkpoint_path = self.save()
        self.counters.env_steps = self.actor.env_steps
        reason = self.stopped_because.value if self.stopped_because else None
        summary = run_summary(self.config, self.counters, self.last_eval, self.learner.updates, checkpoint_path,
                              reason)
        summary["stopped_by"] = self.stopped_by
        self.log.write_summary(summary)
        self.actor.envs.close()
        return summary
