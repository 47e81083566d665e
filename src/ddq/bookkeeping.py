"""What every mode keeps the same way: the run's counters, what it writes in its folder (`ddq.run_folder`), and
the periodic greedy evaluation that decides whether the target return was reached."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from ddq.config import TrainConfig, without_secrets
from ddq.core.checkpoint import BEST_NAME
from ddq.core.evaluate import Evaluation, evaluate
from ddq.gamesim.spec import Score, score_of
from ddq.run_folder import LOST_METRICS, RunLog


@dataclass
class RunCounters:
    """Where a run stands; saved in checkpoints, so a resumed run continues from here."""

    env_steps: int = 0
    episodes: int = 0
    evaluations: int = 0
    wall_time_s: float = 0.0
    steps_to_target: int | None = None
    time_to_target_s: float | None = None
    best_eval_return: float | None = None  # the best greedy evaluation's mean return: what best.pt holds
    # How the newest greedy evaluation's episodes ended, where the env says (Snake: {"hit its body": 31, ...})
    last_eval_endings: dict[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> RunCounters:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in known})


def resumed_counters(saved: dict[str, Any], run_dir: Path) -> RunCounters:
    """A resumed run's counters: its checkpoint's, with the best return that of the evaluation best.pt holds.
    A session killed past its checkpoint may have written best.pt from an evaluation whose point went to
    metrics.lost.jsonl, at a return the checkpoint never saw: the summary then named best.pt beside another
    return, and a worse evaluation replaced it. best.pt keeps those weights (the training that made them is
    lost; the policy was evaluated), and the counters its return."""
    from ddq.core.checkpoint import load_checkpoint

    counters = RunCounters.from_dict(saved["counters"])
    if not (run_dir / BEST_NAME).is_file():
        return counters
    try:
        held = load_checkpoint(run_dir / BEST_NAME)["counters"].get("best_eval_return")
    except (ValueError, KeyError, TypeError):
        return counters  # not a best.pt ddq wrote: left as it is, and the next best evaluation replaces it
    if isinstance(held, int | float) and (counters.best_eval_return is None or held > counters.best_eval_return):
        print(f"ddq: {BEST_NAME} keeps the weights of an evaluation past the checkpoint (a mean return of "
              f"{held:g}; its point is in {LOST_METRICS}): the run's best return is theirs", file=sys.stderr,
              flush=True)
        counters.best_eval_return = float(held)
    return counters


def open_run_log(config: TrainConfig, run_dir: Path, resumed_at: int | None = None) -> RunLog:
    """The run's metrics log, whose event files name the env's score where it counts rewarded steps.
    `resumed_at`: a resumed run's checkpoint's env steps (`RunLog`)."""
    score = score_of(config.agent.env)
    return RunLog(run_dir, score.name if score.rewarded_steps else None, resumed_at)


def run_summary(config: TrainConfig, counters: RunCounters, last_eval: tuple[int, float, float] | None, updates: int,
                checkpoint: Path, reason: str | None) -> dict[str, Any]:
    """The summary.json of a finished run, the same for every mode; `reason`: why it stopped. An env whose
    score counts rewarded steps also gets its final greedy evaluation's count by the score's name (Snake's
    `final_eval_mean_apples`). `best_checkpoint`: best.pt beside `checkpoint`, once an evaluation wrote it."""
    score = score_of(config.agent.env)
    named = {score.summary_field: last_eval[2] if last_eval else None} if score.rewarded_steps else {}
    return {
        "env": config.agent.env, "mode": config.run.mode, "seed": config.agent.seed, "stop_reason": reason,
        "wall_time_s": counters.wall_time_s, "env_steps": counters.env_steps,
        "updates": updates, "episodes": counters.episodes,
        "final_eval_return": last_eval[1] if last_eval else None,
        "final_eval_rewarded_steps": last_eval[2] if last_eval else None, **named,
        **({"final_eval_endings": counters.last_eval_endings} if counters.last_eval_endings else {}),
        "target_return": config.run.target_return,
        "reached_target": counters.steps_to_target is not None,
        "time_to_target_s": counters.time_to_target_s,
        "steps_to_target": counters.steps_to_target,
        "checkpoint": str(checkpoint), "best_eval_return": counters.best_eval_return,
        "best_checkpoint": str(checkpoint.with_name(BEST_NAME)) if counters.best_eval_return is not None else None,
        "config": dataclasses.asdict(without_secrets(config)),
    }


EVAL_SEED_OFFSET = 1_000_003  # evaluation episodes never share seeds with training episodes


def evaluation_seed(config: TrainConfig, steps: int, closing: bool = False) -> int:
    """The first episode's seed of the greedy evaluation of the weights at `steps` env steps (those trained
    on, where a learner publishes its marks). It follows the eval_every marks those steps passed, so the
    evaluation at a mark plays the same episodes in every mode, whoever plays it and when, and whichever
    earlier points a busy evaluator skipped (the count of evaluations played would shift with them): the
    first mark's episodes are set 0, the second's set 1, and so on. The `closing` evaluation of a run that
    stops past its last mark plays the next mark's set (as the count did where every mark was played),
    which a resumed run plays again at that mark, with newer weights."""
    passed = steps // config.run.eval_every
    episode_set = passed if closing else max(0, passed - 1)
    return config.agent.seed + EVAL_SEED_OFFSET * (1 + episode_set)


def play_evaluation(network: nn.Module, config: TrainConfig, seed: int, device: torch.device,
                    should_stop: Callable[[], bool] | None = None) -> Evaluation:
    """The run's greedy evaluation of `network` on the episodes that `seed` starts (`evaluation_seed`)."""
    agent = config.agent
    return evaluate(network, agent.env, config.run.eval_episodes, agent.frame_stack, agent.env_options,
                    seed=seed, epsilon=config.run.eval_epsilon, device=device, should_stop=should_stop)


class Noted(NamedTuple):
    """What one evaluation's result meant to the run."""

    last_eval: tuple[int, float, float]  # (env steps, mean return, mean rewarded steps)
    reached: bool  # the target return
    best: bool  # the best mean return so far (strictly: of equals, the first stays): its weights go to best.pt


def note_evaluation(result: Evaluation, config: TrainConfig, log: RunLog, counters: RunCounters, env_steps: int,
                    updates: int, origin: float, **extra: Any) -> Noted:
    """Counts and logs one evaluation's result (with `extra` values in its metrics point), notes the first
    time it reached the target and the best mean return so far (in the counters, so a resumed run keeps it)."""
    counters.evaluations += 1
    log.write("eval", env_steps=env_steps, updates=updates, wall_time_s=counters.wall_time_s,
              mean_return=result.mean_return, returns=result.returns, mean_rewarded_steps=result.mean_rewarded_steps,
              **({"endings": result.endings} if result.endings else {}), seed=result.seed, **extra)
    counters.last_eval_endings = result.endings or None
    reached = config.run.target_return is not None and result.mean_return >= config.run.target_return
    if reached and counters.steps_to_target is None:
        counters.steps_to_target = env_steps
        counters.time_to_target_s = time.time() - origin
    best = counters.best_eval_return is None or result.mean_return > counters.best_eval_return
    if best:
        counters.best_eval_return = result.mean_return
    return Noted((env_steps, result.mean_return, result.mean_rewarded_steps), reached, best)


def note_training(log: RunLog, counters: RunCounters, env_steps: int, updates: int, epsilon: float,
                  env_steps_per_s: float | None, updates_per_s: float | None, **values: Any) -> None:
    """Logs one training point (at each log_every mark of env steps), the same in every mode: where the run
    stands, its throughput, and `values` (loss, mean max-Q, staleness, ...)."""
    log.write("train", env_steps=env_steps, updates=updates, wall_time_s=counters.wall_time_s, epsilon=epsilon,
              episodes=counters.episodes, env_steps_per_s=env_steps_per_s, updates_per_s=updates_per_s, **values)


def progress_values(recent_return: float | None, epsilon: float,
                    last_eval: tuple[int, float, float] | None, score: Score | None = None) -> dict[str, str]:
    """What a progress bar shows beside the steps: the recent training return, epsilon, and the newest
    greedy evaluation with the env step it was taken at (its `score` by name where that counts rewarded
    steps: Snake's apples per episode)."""
    values = {"return": f"{recent_return:.1f}" if recent_return is not None else "-", "eps": f"{epsilon:.2f}"}
    if last_eval:
        values["greedy"] = f"{last_eval[1]:.1f}@{last_eval[0]:,}"
        if score is not None and score.rewarded_steps:
            values["greedy"] = f"{last_eval[2]:.1f} {score.name}@{last_eval[0]:,}"
    return values


@dataclass
class RunRecord:
    """What a distributed run's driver writes down as it goes: its log, counters, clock (`origin`: the run's
    start, less the earlier sessions of a resumed run) and newest greedy evaluation."""

    config: TrainConfig
    log: RunLog
    counters: RunCounters
    origin: float
    last_eval: tuple[int, float, float] | None = None  # (env steps, mean return, mean rewarded steps)

    def note(self, result: Evaluation, env_steps: int, updates: int, **extra: Any) -> Noted:
        """Counts and logs one evaluation."""
        noted = note_evaluation(result, self.config, self.log, self.counters, env_steps, updates, self.origin,
                                **extra)
        self.last_eval = noted.last_eval
        return noted

    def note_training(self, env_steps: int, updates: int, epsilon: float, env_steps_per_s: float | None,
                      updates_per_s: float | None, **values: Any) -> None:
        note_training(self.log, self.counters, env_steps, updates, epsilon, env_steps_per_s, updates_per_s, **values)
