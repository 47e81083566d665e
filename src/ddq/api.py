"""ddq's Python API: `ddq.train(...)` runs training and returns a `Run`; `ddq.load(...)` returns an `Agent` that acts.

In the habit of Stable-Baselines3 (`agent.predict(obs)`) and Gymnasium (an
agent acts on what `env.reset()` and `env.step()` return). `ddq train` on the
command line is one more caller of the same program (`prepare`, then `execute`).

    run = ddq.train(env="CartPole-v1", mode="serial", target_return=475)
    agent = ddq.load(run.run_dir)
    action = agent.act(observation)
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ddq.config import REDIS_URL_ENV, TrainConfig, flat_settings, has_masked_secret, is_distributed, load_toml
from ddq.config.sources import COMMAND_LINE, PYTHON_CALL, from_file, spelled
from ddq.lifecycle import StopReason, StopSignals

if TYPE_CHECKING:
    import gymnasium as gym
    import torch

    from ddq.spark.jvm_boot import BootingJvm


class TrainingFailed(RuntimeError):
    """A run that could not go on (a process that kept dying, Redis gone, a failed Spark job). Its summary
    says what ended it; its newest checkpoint is in the run folder, to resume."""

    def __init__(self, summary: dict[str, Any]):
        super().__init__(str(summary.get("stop_reason")))
        self.summary = summary


@dataclass
class Run:
    """A finished (or stopped) training run: its folder and its summary (`summary.json`)."""

    run_dir: Path
    summary: dict[str, Any]

    @property
    def reached_target(self) -> bool:
        return bool(self.summary.get("reached_target"))

    @property
    def stop_reason(self) -> str | None:
        """What ended the run, in words (`ddq.lifecycle.StopReason`): "target return reached", "step budget
        spent", "stopped by the user", ..."""
        return self.summary.get("stop_reason")

    @property
    def env_steps(self) -> int:
        return int(self.summary.get("env_steps") or 0)

    @property
    def final_eval_return(self) -> float | None:
        return self.summary.get("final_eval_return")

    @property
    def checkpoint(self) -> Path:
        return Path(self.summary["checkpoint"])

    def agent(self, device: str = "cpu") -> Agent:
        """The trained agent (`load` of this run)."""
        return load(self.run_dir, device)


def train(env: str | None = None, mode: str | None = None, *, algo: str | None = None, seed: int | None = None,
          total_steps: int | None = None, target_return: float | None = None, time_budget_s: float | None = None,
          workers: int | None = None, num_envs: int | None = None, lr: float | None = None,
          device: str | None = None, config: str | Path | None = None, run_dir: str | Path | None = None,
          progress: bool | None = None, animate: bool = False, resume: str | Path | None = None,
          **settings: Any) -> Run:
    """Trains an agent and returns the run.

    `env`: a Gymnasium id ("CartPole-v1", "ddq/Snake-v0", "ALE/Pong-v5"); `mode`: serial, downpour, actor-learner or
    data-parallel (default: the one measured best here, as `ddq train` picks it). The settings changed most are
    typed keywords: `algo` (a name `ddq train --algo` takes, as its help lists them; default: the env's measured
    choice), `seed`, `total_steps` (the env-step budget), `target_return` (stop once a greedy evaluation averages
    this), `time_budget_s`, `workers` (distributed modes), `num_envs` (envs per actor), `lr` (the optimizer's
    learning rate) and `device` ("cpu", "cuda", "auto"); None leaves a setting to the preset or the file.
    `config`: a TOML file of settings; `settings`: any other
    setting of `ddq train --help-all` by name (`eval_every=1000`, `gamma=0.995`), applied, as the typed ones are,
    after the env's preset and the file. `run_dir`: where the run writes (default runs/<env>-<time>; it must not
    hold a run). `progress`: show a progress bar (default: only where `config` asks for one); `animate`: write
    replay.gif of one greedy episode. `resume`: a run folder (or its checkpoint) to continue, as `ddq train
    --resume` does: its settings, with a larger `total_steps` or any other given here over them. A Redis
    password comes from $DDQ_REDIS_URL, as for `ddq train`. Raises
    ValueError for a bad setting (before anything starts) and TrainingFailed for a run that could
    not go on. Ctrl-C stops a run cleanly: the returned run's stop_reason then says so."""
    typed = {"algo": algo, "seed": seed, "total_steps": total_steps, "target_return": target_return,
             "time_budget_s": time_budget_s, "workers": workers, "num_envs": num_envs, "lr": lr, "device": device}
    values = {**settings, **{name: value for name, value in typed.items() if value is not None}}
    values.update({k: str(v) for k, v in (("env", env), ("mode", mode), ("run_dir", run_dir)) if v is not None})
    if progress is not None:
        values["progress"] = progress
    config_file = None if config is None else str(config)
    quiet = progress is None and not (config_file and "progress" in flat_settings(load_toml(config_file)))
    prepared, saved, spark = prepare(values, config_file, resume=None if resume is None else str(resume),
                                     given_in=PYTHON_CALL)  # which claims the run's folder, until `execute` ends
    if quiet:
        prepared.run.progress = False  # a library call prints no bar unless asked
    summary, _ = execute(prepared, saved, animate=animate, spark=spark)
    if str(summary.get("stop_reason") or "").startswith(StopReason.FAILURE.value):
        raise TrainingFailed(summary)
    return Run(Path(str(prepared.run.run_dir)), summary)


def prepare(values: dict[str, Any], config_file: str | None = None, solver_file: str | None = None,
            resume: str | None = None, given_in: str = COMMAND_LINE,
            ) -> tuple[TrainConfig, dict[str, Any] | None, BootingJvm | None]:
    """The run's settings, checked before anything starts (a mistake costs one line), the checkpoint it
    resumes from, if any, and a local master's Spark JVM, booted while the settings were checked (for
    `execute`; it exits with this process if nothing takes it). `given_in`: whether `values` are flags or a
    Python call's keywords, which the lines name."""
    from ddq.core.settings import build_config
    from ddq.modes.launch import boot_spark
    from ddq.preflight import check_resume, check_run, claim_words, refuse_a_held_run, run_dir_asked
    from ddq.run_folder import FolderClaim, resumed_folder

    saved, why, redis_url_from = None, None, spelled("redis_url", given_in)  # where the lines say it came from
    if "redis_url" not in values and os.environ.get(REDIS_URL_ENV):  # keeps a password out of `ps`
        values, redis_url_from = {**values, "redis_url": os.environ[REDIS_URL_ENV]}, f"${REDIS_URL_ENV}"
    elif "redis_url" not in values and config_file:  # a file's, if it names one: not on a command line
        redis_url_from = from_file("redis_url", config_file)
    spark, held = None, FolderClaim()  # the run folder, once this call claimed it
    try:
        if resume:
            from ddq.core import checkpoint as ckpt  # torch: a new run's settings load none

            asked, asked_in = run_dir_asked(values, config_file, given_in)
            folder = resumed_folder(resume, asked, spelled("resume", given_in), asked_in or "")
            if folder.is_dir():  # a run training there now is named first (its checkpoint may be yet to come)
                held.take(folder, *claim_words(str(folder), resume, values, config_file, given_in))
            saved = ckpt.load_checkpoint(resume)
            config = build_config(values, config_file, base=ckpt.config_from_checkpoint(saved),
                                  solver_file=solver_file, given_in=given_in)
            config.run.run_dir = str(folder)
        else:
            values, why = with_measured_mode(values, config_file)
            config = build_config(values, config_file, solver_file=solver_file, given_in=given_in)
        if has_masked_secret(config.distributed.redis_url):
            raise ValueError(f"the run used a Redis with a password, which ddq never writes down: give its URL "
                             f"again to resume it (${REDIS_URL_ENV}, which keeps the password off the command line)")
        run_dir = config.run.run_dir = config.run.run_dir or default_run_dir(config.agent.env)
        named, instead = claim_words(run_dir, resume, values, config_file, given_in)
        if Path(run_dir).exists() and not Path(run_dir).is_dir():
            raise ValueError(f"{named} is a file, not a folder: give a folder for the run (made if missing)")
        if Path(run_dir).is_dir():  # a run training there now is named first (it holds a run, not one to resume)
            held.take(run_dir, named, instead)
        refuse_a_held_run(run_dir, resume, given_in)
        spark = boot_spark(config)
        check_run(config, redis_url_from, given_in)
        if saved is not None and resume:
            check_resume(saved, config, resume, given_in)
        if not held.tried:  # a new folder, made now (held until `execute` ends): a run may have filled it meanwhile
            held.take(run_dir, named, instead)
            refuse_a_held_run(run_dir, resume, given_in)
        say_how_it_starts(config, values, config_file, saved, why, redis_url_from, given_in)
    except BaseException:
        held.release()
        if spark is not None:
            spark.kill()
        raise
    return config, saved, spark


def say_how_it_starts(config: TrainConfig, values: dict[str, Any], config_file: str | None,
                      saved: dict[str, Any] | None, why: str | None, redis_url_from: str, given_in: str) -> None:
    """The run's first lines, once its settings hold: the mode and algorithm ddq chose and why, the
    checkpoint it resumes from, and warnings (settings the mode ignores, a Redis URL's risks)."""
    from ddq.preflight import password_in_flag_note, unchecked_server_note
    from ddq.spark.placement import unreachable_note

    if why is not None:
        print(f"ddq: no mode named, so {why}", file=sys.stderr)
    if saved is not None:
        print(f"ddq: resuming the run in {config.run.run_dir} from its checkpoint at "
              f"{saved['counters']['env_steps']:,} env steps", file=sys.stderr)
    if saved is None and (note := algorithm_note(values, config_file, config)):
        print(f"ddq: no algo named, so {note}", file=sys.stderr)
    if note := ignored_settings_note(values, config_file, config, given_in):
        print(f"ddq: warning: {note}", file=sys.stderr)
    if is_distributed(config.run.mode):
        for note in (unchecked_server_note(config.distributed.redis_url or "", redis_url_from),
                     password_in_flag_note(config.distributed.redis_url or "", redis_url_from),
                     unreachable_note(config)):
            if note is not None:
                print(f"ddq: warning: {note}", file=sys.stderr)


def algorithm_note(values: dict[str, Any], config_file: str | None, config: TrainConfig) -> str | None:
    """Why a run that names no algorithm trains with another than its env's measured choice (a setting only
    that one reads was named, or the choice does not train in the run's mode), for its first lines; else None."""
    from ddq.config.sources import preset_key
    from ddq.core.algorithms import default_algorithm, unread_by

    named = set(values) | set(flat_settings(load_toml(config_file)) if config_file else {})
    choice, algo = default_algorithm(preset_key(config.agent.env), "serial").name, config.agent.algo
    if "algo" in named or choice == algo:
        return None
    moved = unread_by(choice, named)  # what `default_algorithm` moved away from the choice for, if anything
    why = f"{next(iter(moved))} was named, which {choice} does not read" if moved else \
        f"{choice} does not train in {config.run.mode} mode"
    return f"{algo}: {why} ({choice} is {config.agent.env}'s measured choice; --algo names another)"


def ignored_settings_note(values: dict[str, Any], config_file: str | None, config: TrainConfig,
                          given_in: str = COMMAND_LINE) -> str | None:
    """The line that says which named settings the run's mode ignores (and where they came from), else None: a
    script that gives every mode the same flags still runs (refusing them had stopped it)."""
    from ddq.config.measured import unread_in
    from ddq.config.sources import where_given

    file_values = load_toml(config_file) if config_file else {}
    mode = config.run.mode
    unread = unread_in(mode, set(values) | set(flat_settings(file_values)), config.distributed.workers)
    if not unread:
        return None
    named = ", ".join(f"{name} ({where_given(name, values, file_values, config_file, given_in)})" for name in unread)
    if not is_distributed(mode):
        return f"serial mode trains in one process: it ignores {named}, which only distributed runs read"
    return f"{mode} mode ignores {named}, which only another mode reads (`ddq train --help-all` groups them)"


def with_measured_mode(values: dict[str, Any], config_file: str | None) -> tuple[dict[str, Any], str | None]:
    """`values`, with the mode measured best here when neither they nor the config file name one, and
    the reason for it (None when one was named): the run's first line."""
    from ddq.config.cores import usable_cores
    from ddq.config.measured import measured_mode
    from ddq.spark.context import launched_by_spark_submit

    in_file = flat_settings(load_toml(config_file)) if config_file else {}
    if "mode" in values or "mode" in in_file:
        return values, None
    named = set(values) | set(in_file)
    choice = measured_mode(named, values.get("spark_master", in_file.get("spark_master")), usable_cores(),
                           launched_by_spark_submit())
    return {**values, "mode": choice.mode}, choice.why


def execute(config: TrainConfig, saved: dict[str, Any] | None = None, started_at: float | None = None,
            animate: bool = True, spark: BootingJvm | None = None) -> tuple[dict[str, Any], int]:
    """Trains a prepared run; its summary (also in summary.json, with the learning curve and the animation)
    and the exit code it earned: 0 only for a run that finished, 1 when it failed, 128+N when signal N
    stopped it. `spark`: the JVM `prepare` booted."""
    from ddq.modes import run_training
    from ddq.run_folder import release, write_summary
    from ddq.services.plot import NothingToPlot, plot_run

    run_dir = str(config.run.run_dir)
    print(f"ddq: training {config.agent.env} ({config.run.mode}) into {run_dir}", file=sys.stderr)
    # the run's own window for signals (its loop's) closes as its processes stop: one after that, while Spark
    # stops or the curve and the animation are made, lets them finish too (a second aborts), where Python's
    # default would end the command with no summary
    with StopSignals() as late:
        try:
            summary, exit_code = run_training(config, run_dir, started_at, resume=saved, booted=spark)
            try:
                summary["learning_curve"] = str(plot_run(run_dir, env_id=config.agent.env))
            except NothingToPlot:  # a run that ended before its first episode (a failure at the start): no curve
                summary["learning_curve"] = None
            summary["animation"] = animate_run(summary) if animate else None
            write_summary(run_dir, summary)
        finally:
            release(run_dir)  # `prepare` claimed the folder
    return summary, exit_code or late.exit_code()


def default_run_dir(env_id: str) -> str:
    """runs/<env>-<time>, or with -2, -3, ... when a run started within the same second."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", env_id).strip("-")
    base = Path("runs") / f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate, number = base, 1
    while candidate.exists():
        number += 1
        candidate = base.with_name(f"{base.name}-{number}")
    return str(candidate)


def animate_run(summary: dict[str, Any]) -> str | None:
    """replay.gif beside the run's final checkpoint: one greedy episode, for a person to watch. An env that
    cannot draw here (no pictures, or its renderer's package missing) gets one line instead."""
    from gymnasium.error import DependencyNotInstalled

    from ddq.core.animation import animate_checkpoint

    checkpoint = Path(str(summary.get("checkpoint")))
    if not checkpoint.is_file():
        return None
    try:
        return str(animate_checkpoint(checkpoint, checkpoint.parent / "replay.gif"))
    except (ValueError, DependencyNotInstalled) as error:
        print(f"ddq: no replay.gif: {error}", file=sys.stderr)
        return None


class Agent:
    """A trained Q-network that acts greedily in the env it was trained on.

    `act` takes one observation (as `env.reset()` or `env.step()` return it) and gives one action, or a
    batch of observations (a vector env's) and gives an action each. With stacked frames the agent keeps
    the recent frames itself: call `reset()` (or pass `episode_start`) when an episode starts."""

    def __init__(self, network: torch.nn.Module, config: TrainConfig, frame_shape: tuple[int, ...],
                 dtype: np.dtype, device: torch.device):
        self.network, self.config, self.device = network.train(False), config, device  # inference mode
        self.frame_shape, self.dtype = frame_shape, dtype
        self._stacker: Any = None

    @property
    def env_id(self) -> str:
        return self.config.agent.env

    def make_env(self, render_mode: str | None = None) -> gym.Env:
        """The env the agent was trained on, with the same options."""
        from ddq.gamesim.envs import make_env

        return make_env(self.env_id, self.config.agent.env_options, render_mode=render_mode)

    def reset(self) -> None:
        """Forgets the frames of the episodes played so far (stacked frames start anew)."""
        self._stacker = None

    def q_values(self, observation: Any, episode_start: Any = None) -> np.ndarray:
        """Q(s, a) for each action: [actions] for one observation, [n, actions] for a batch of n."""
        import torch

        from ddq.core.replay import FrameStacker

        frames = np.asarray(observation, dtype=self.dtype)
        single = frames.shape == self.frame_shape or frames.shape == (*self.frame_shape, 1)
        frames = frames[None] if single else frames
        if frames.ndim < 2 or int(np.prod(frames.shape[1:])) != int(np.prod(self.frame_shape)):
            raise ValueError(f"an observation of shape {np.shape(observation)} is not one (or a batch) of the "
                             f"{self.frame_shape} frames {self.env_id} was trained on; play the env that "
                             "agent.make_env() returns")
        starts = np.ones(len(frames), bool) if episode_start is None else np.atleast_1d(np.asarray(episode_start, bool))
        if self._stacker is None or len(self._stacker.frames) != len(frames):
            self._stacker = FrameStacker(len(frames), self.frame_shape, self.dtype, self.config.agent.frame_stack)
            states = self._stacker.reset(frames)
        else:
            states = self._stacker.push(frames, starts if episode_start is not None else np.zeros(len(frames), bool))
        with torch.no_grad():
            values = self.network(torch.from_numpy(states).to(self.device)).float().cpu().numpy()
        return values[0] if single else values

    def act(self, observation: Any, episode_start: Any = None) -> Any:
        """The greedy action: an int for one observation, an array for a batch. `episode_start` (one bool, or
        one per observation): the observation starts an episode, so stacked frames start anew."""
        actions = np.argmax(self.q_values(observation, episode_start), axis=-1)
        return int(actions) if actions.ndim == 0 else actions

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[Any, None]:
        """Stable-Baselines3's signature: (action, None). A Q-network's policy is greedy: `deterministic` is
        accepted for compatibility and `state` is unused."""
        actions = np.argmax(self.q_values(observation, episode_start), axis=-1)
        return (int(actions) if actions.ndim == 0 else actions), None


def load(path: str | Path, device: str = "cpu") -> Agent:
    """The agent saved in a run folder (its checkpoint.pt) or in a checkpoint file."""
    from ddq.core import checkpoint as ckpt
    from ddq.core.agent import env_spec, resolve_device
    from ddq.core.replay import state_shape

    path = Path(path)
    file = path / ckpt.CHECKPOINT_NAME if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{path} holds no ddq checkpoint ({ckpt.CHECKPOINT_NAME})")
    saved = ckpt.load_checkpoint(file)
    config = ckpt.config_from_checkpoint(saved, str(file))
    spec = env_spec(config.agent)
    torch_device = resolve_device(device)
    network = ckpt.q_network_from_checkpoint(saved, state_shape(spec.frame_shape, config.agent.frame_stack),
                                             spec.num_actions, torch_device)
    return Agent(network, config, spec.frame_shape, spec.frame_dtype, torch_device)
