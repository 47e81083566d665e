"""Serial training end to end: outputs (metrics, event files, checkpoints), resume, evaluate, plot, and learning."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import assert_best_is_the_best_evaluation, assert_events_match_metrics, run_ddq, summary_of
from ddq.cli import main
from ddq.run_folder import read_metrics

TAGS = {"train/episode_return", "eval/mean_return", "train/loss", "train/epsilon", "speed/env_steps_per_s",
        "speed/updates_per_s"}  # what serial training's event files plot, at least
SHORT = ["--mode", "serial", "--env", "CartPole-v1", "--algo", "dqn", "--no-progress", "--learning-starts", "500", "--eval-every", "1000",
         "--eval-episodes", "2", "--checkpoint-every", "1500", "--log-every", "500"]


def test_help_lists_every_subcommand():
    result = run_ddq("--help")
    assert result.returncode == 0
    for command in ("train", "evaluate", "plot"):
        assert command in result.stdout
    # the processes ddq starts itself are listed apart, after the user's commands
    commands, plumbing = result.stdout.split("processes ddq starts itself")
    listed = {line.split()[0] for line in commands.splitlines() if line.startswith("    ") and line.split()}
    assert {"train", "evaluate", "dashboard", "bench"} <= listed and not listed & {"param-server", "learner", "barista"}
    assert all(f"\n  {name}" in plumbing for name in ("param-server", "learner", "barista serve"))


def test_train_help_is_short_and_help_all_lists_every_setting_grouped_with_defaults():
    brief, full = run_ddq("train", "--help"), run_ddq("train", "--help-all")
    assert brief.returncode == full.returncode == 0
    assert "--lr LR" in brief.stdout and "--epsilon-steps" not in brief.stdout and "--help-all" in brief.stdout
    assert "--spark-master" in brief.stdout  # the one cluster setting a first run across hosts needs
    for group, section in (("run", "run"), ("environment", "agent"), ("network", "agent"), ("algorithm", "agent"),
                           ("optimizer", "agent.optim"), ("exploration", "agent"), ("evaluation", "run"),
                           ("cluster", "distributed"), ("parameter server", "distributed.server"),
                           ("actor-learner", "distributed"), ("services", "services")):
        assert f"\n{group} settings ([{section}] in a --config file):\n" in full.stdout
    assert "--epsilon-steps" in full.stdout and "(default: 0.99, or the env's preset)" in " ".join(full.stdout.split())  # gamma


def test_every_commands_help_opens_with_what_it_does():
    """`ddq package --help` began with its usage and "folder: where to write them": a command's `help` shows
    only in its parent's list. Every command's own --help now opens with a description."""
    from ddq.cli.command import build_parser, command_parsers

    listed = list(command_parsers(build_parser()))
    assert len(listed) > 20 and "package" in [words for words, _, _ in listed]
    assert [words for words, command, _ in listed if not (command.description or "").strip()] == []


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One short run (3,000 steps), checked for its outputs and then evaluated from its checkpoint: a run of
    its own for `ddq evaluate` would prove nothing more."""
    run_dir = tmp_path_factory.mktemp("short") / "run"
    return run_ddq("train", *SHORT, "--total-steps", "3000", "--run-dir", str(run_dir)), run_dir


def test_short_run_writes_metrics_checkpoint_summary_and_curve(short_run):
    result, run_dir = short_run
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    for key in ("wall_time_s", "env_steps", "updates", "final_eval_return", "reached_target",
                "time_to_target_s", "steps_to_target"):
        assert key in summary
    assert 3000 <= summary["env_steps"] < 3000 + 4
    # the CartPole preset trains one update per env step after the 500 learning-start steps
    assert abs(summary["updates"] - (summary["env_steps"] - 500)) <= 20
    assert summary["reached_target"] is False and summary["steps_to_target"] is None
    kinds = {point["kind"] for point in read_metrics(run_dir)}
    assert kinds == {"episode", "train", "eval"}
    assert_events_match_metrics(run_dir, TAGS)
    assert_best_is_the_best_evaluation(run_dir)
    assert summary["best_checkpoint"] == str(run_dir / "best.pt")
    assert (run_dir / "learning_curve.png").stat().st_size > 5000
    assert summary["animation"] == str(run_dir / "replay.gif") and _gif_frames(run_dir / "replay.gif") >= 9
    saved = torch.load(run_dir / "checkpoint.pt")  # plain torch.load, weights_only by default
    assert (run_dir / "replay.npz").exists()  # DQN's checkpoints keep its replay memory (PQN's keep none)
    assert saved["counters"]["env_steps"] == summary["env_steps"]
    assert saved["learner"]["updates"] == summary["updates"] == saved["learner"]["optimizer"]["steps"]
    assert set(saved["q_network"]) == {"2.weight", "2.bias", "4.weight", "4.bias", "6.weight", "6.bias"}


def test_resume_continues_counters_schedule_optimizer_and_replay(tmp_path, capsys):
    run_dir = tmp_path / "run"
    first = run_ddq("train", *SHORT, "--total-steps", "2000", "--run-dir", str(run_dir))
    assert first.returncode == 0, first.stderr
    before = summary_of(run_dir)
    # a resume that could not continue it is refused in one line, the folder untouched: in another mode (whose
    # weights live elsewhere: downpour had trained on from new ones) or with another network
    files = {path.name: path.stat().st_mtime_ns for path in run_dir.iterdir()}
    for change, refusal in (([], "the run has spent its budget (step budget spent: "),
                            (["--mode", "downpour"], "the run trained in serial mode"),
                            (["--hidden", "32"], "with hidden changed, the network is not the run's"),
                            # state the run saved that these settings cannot take: refused once it had started
                            (["--optimizer", "rmsprop"], "the run's optimizer (adam, keeping exp_avg, exp_avg_sq) "
                                                         "saved state this one (rmsprop, keeping square_avg)"),
                            (["--buffer-size", "5000"], "with buffer_size changed, the run's replay memory does not "
                                                        "fit; resume it with the run's, or without its memory "
                                                        "(--no-save-replay")):
        assert main(["train", "--resume", str(run_dir), *change]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ddq: error: --resume {run_dir}: {refusal}") and len(err.splitlines()) == 1, err
    assert {path.name: path.stat().st_mtime_ns for path in run_dir.iterdir()} == files
    second = run_ddq("train", "--resume", str(run_dir), "--total-steps", "4000")
    assert second.returncode == 0, second.stderr
    assert f"ddq: resuming the run in {run_dir} from its checkpoint at {before['env_steps']:,} env steps\n" \
        in second.stderr
    after = summary_of(run_dir)
    assert after["env_steps"] >= 4000
    # updates continued at the replay ratio from where they were, not from zero
    assert abs(after["updates"] - before["updates"] - (after["env_steps"] - before["env_steps"])) <= 20
    assert after["wall_time_s"] > before["wall_time_s"]
    resumed = [p for p in read_metrics(run_dir) if p["kind"] == "train" and p["env_steps"] > before["env_steps"]]
    # epsilon continues its 4,000-step decay from where it was (a restart would put it near 1)
    assert resumed and resumed[0]["epsilon"] == pytest.approx(1 - 0.96 * resumed[0]["env_steps"] / 4000)
    assert resumed[0]["loss"] is not None  # trained at once: the replay memory came back
    saved = torch.load(run_dir / "checkpoint.pt")
    assert saved["learner"]["optimizer"]["steps"] == after["updates"]
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2  # one per session, read as one
    assert_events_match_metrics(run_dir, TAGS)
    assert_best_is_the_best_evaluation(run_dir)  # over both sessions: a resumed run remembers its best
    assert not (run_dir / "metrics.lost.jsonl").exists() and "moved to" not in second.stderr  # a clean stop's
    # without its replay memory, a resume fills it again before learning (--learning-starts 500), as a fresh
    # run does: it had trained at once on the few dozen transitions it held
    third = run_ddq("train", "--resume", str(run_dir), "--total-steps", "6000", "--no-save-replay")
    assert third.returncode == 0, third.stderr
    points = [p for p in read_metrics(run_dir) if p["kind"] == "train" and p["env_steps"] > after["env_steps"]]
    assert [p["loss"] is None for p in points][:2] == [True, False], points  # logged every 500 env steps


def test_a_resume_after_a_killed_session_sets_aside_its_points_past_the_checkpoint(tmp_path, capsys):
    """A session killed between checkpoints recorded points the checkpoint does not hold: resumed, the
    curve had run on past them and back (env steps 487,778, then 374,977). They go to metrics.lost.jsonl,
    and TensorBoard hides their scalars. While the session runs, its folder is its own: a resume then is
    refused in one line, and moves nothing (two runs had written one folder); killed, it holds it no more."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "ddq", "train", *SHORT, "--total-steps", "10000000",
                                "--checkpoint-every", "4000", "--log-every", "200", "--run-dir", str(run_dir)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ((run_dir / "checkpoint.pt").exists() and any(  # points well past the newest checkpoint
                p["env_steps"] > torch.load(run_dir / "checkpoint.pt")["counters"]["env_steps"] + 1500
                for p in read_metrics(run_dir) if p["kind"] == "train")):
            assert process.poll() is None and time.monotonic() < deadline, "no points past a checkpoint"
            time.sleep(0.1)
        capsys.readouterr()
        refused = [main(["train", "--resume", str(run_dir), "--total-steps", "20000000"]),
                   main(["train", *SHORT, "--run-dir", str(run_dir)])]  # not "holds a run: --resume it"
        assert process.poll() is None, "the session ended before the runs beside it were tried"
    finally:
        process.kill()
        process.wait()
    taken = f"{run_dir}: another run is training in this folder now; wait for it to end"
    assert refused == [2, 2] and capsys.readouterr().err.splitlines() == [
        f"ddq: error: --resume {taken} to resume it", f"ddq: error: --run-dir {taken} or choose another --run-dir"]
    assert not (run_dir / "metrics.lost.jsonl").exists()
    saved_at = torch.load(run_dir / "checkpoint.pt")["counters"]["env_steps"]
    lost = [p for p in read_metrics(run_dir) if p.get("env_steps", 0) > saved_at]
    assert lost
    best = torch.load(run_dir / "best.pt")  # as if an evaluation past the checkpoint had written it, at 1,234
    best["counters"]["best_eval_return"] = 1234.0  # (more than CartPole's most, so none replaces it)
    torch.save(best, run_dir / "best.pt")
    resumed = run_ddq("train", "--resume", str(run_dir), "--total-steps", str(saved_at + 1000))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "ddq: best.pt keeps the weights of an evaluation past the checkpoint (a mean return of 1234" \
        in resumed.stderr  # the summary named best.pt beside the checkpoint's best, and a worse one replaced it
    assert summary_of(run_dir)["best_eval_return"] == 1234.0
    assert torch.load(run_dir / "best.pt")["counters"]["best_eval_return"] == 1234.0
    assert f"ddq: {len(lost):,} metrics points past the checkpoint's {saved_at:,} env steps" in resumed.stderr
    set_aside = [json.loads(line) for line in (run_dir / "metrics.lost.jsonl").read_text().splitlines()]
    assert set_aside == lost
    steps = [p["env_steps"] for p in read_metrics(run_dir) if p["kind"] == "train"]
    assert steps == sorted(steps) and steps[-1] > saved_at  # one curve, on from the checkpoint
    assert_events_match_metrics(run_dir, TAGS)  # TensorBoard shows what metrics.jsonl holds


def test_evaluate_prints_the_greedy_mean_return(short_run):
    """Of best.pt, which any checkpoint file stands for: its best evaluation's episodes give that mean again."""
    trained, run_dir = short_run
    assert trained.returncode == 0, trained.stderr
    summary = summary_of(run_dir)
    evaluations = [point for point in read_metrics(run_dir) if point["kind"] == "eval"]
    best = max(evaluations, key=lambda point: point["mean_return"])  # the first of equals, as best.pt's
    result = run_ddq("evaluate", str(run_dir / "best.pt"), "--episodes", "2", "--seed", str(best["seed"]), "--epsilon",
                     str(summary["config"]["run"]["eval_epsilon"]))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["returns"]) == 2 and report["mean_return"] == pytest.approx(sum(report["returns"]) / 2)
    assert report["mean_return"] == summary["best_eval_return"] >= 8  # a CartPole episode lasts at least 8 steps


def _gif_frames(path) -> int:
    from PIL import Image

    with Image.open(path) as gif:
        assert gif.format == "GIF"
        return int(gif.n_frames)


def test_evaluate_speaks_of_apples_for_snake_and_renders_an_episode(tmp_path):
    run_dir = tmp_path / "snake"
    result = run_ddq("train", "--mode", "serial", "--env", "ddq/Snake-v0", "--total-steps", "600",
                     "--learning-starts", "300", "--eval-every", "600", "--eval-episodes", "3", "--no-progress",
                     "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    assert summary["final_eval_mean_apples"] == summary["final_eval_rewarded_steps"]
    # how the 3 greedy games ended: a wall, the body, the step limit, or a full board
    assert sum(summary["final_eval_endings"].values()) == 3
    assert set(summary["final_eval_endings"]) <= {"hit a wall", "hit its body", "step limit", "filled the board"}
    assert_events_match_metrics(run_dir, {"eval/mean_return", "eval/mean_apples"}, score="apples")
    result = run_ddq("evaluate", str(run_dir), "--episodes", "4", "--render", str(tmp_path / "episode.gif"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["mean_apples"] == sum(report["apples"]) / 4 and len(report["apples"]) == 4
    assert sum(report["endings"].values()) == 4
    assert report["animation"] == str(tmp_path / "episode.gif") and _gif_frames(tmp_path / "episode.gif") >= 2
    from PIL import Image

    from ddq.core.animation import CAPTION_HEIGHT

    with Image.open(tmp_path / "episode.gif") as gif:  # the 12x12 board at 16 pixels a cell, and its caption
        assert gif.size == (12 * 16, 12 * 16 + CAPTION_HEIGHT)


def test_bad_input_gets_a_clear_error(tmp_path):
    result = run_ddq("evaluate", str(tmp_path / "missing.pt"))
    assert result.returncode == 2 and "no checkpoint" in result.stderr
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--batch-size", "0", "--run-dir", str(tmp_path / "x"))
    assert result.returncode == 2 and "batch_size must be positive" in result.stderr
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "metrics.jsonl").write_text('{"kind": "train"}\n')
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--run-dir", str(tmp_path / "used"))
    assert result.returncode == 2 and "already holds a run" in result.stderr
    assert (tmp_path / "used" / "metrics.jsonl").read_text() == '{"kind": "train"}\n'  # nothing lost
    # a run that failed as it started recorded nothing and saved no checkpoint: its folder takes a new run
    (tmp_path / "failed").mkdir()
    (tmp_path / "failed" / "metrics.jsonl").write_text("")
    (tmp_path / "failed" / "redis.log").write_text("its Redis had no TLS\n")
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--total-steps", "500", "--no-progress",
                     "--run-dir", str(tmp_path / "failed"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "failed" / "checkpoint.pt").exists() and (tmp_path / "failed" / "redis.log").exists()


@pytest.mark.slow
def test_cartpole_reaches_475_within_the_step_budget(tmp_path):
    run_dir = tmp_path / "cartpole"
    result = run_ddq("train", "--mode", "serial", "--env", "CartPole-v1", "--seed", "11", "--target-return", "475",
                     "--total-steps", "60000", "--no-progress", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    assert summary["reached_target"] and summary["steps_to_target"] <= 60000
    evals = [p for p in read_metrics(run_dir) if p["kind"] == "eval"]
    assert evals[-1]["mean_return"] >= 475


@pytest.mark.slow
def test_snake_greedy_policy_eats_far_more_apples_than_a_random_one(tmp_path):
    """On a 6x6 board (the same game, smaller, so the suite stays short): the preset's greedy policy
    after 50k env steps against uniformly random moves. Measured: 1.1 apples at 40k against 0.19."""
    import numpy as np

    from ddq.gamesim.snake import SnakeVectorEnv

    games, size = 400, 6
    env = SnakeVectorEnv(games, size=size)
    env.reset(seed=9)
    rng = np.random.default_rng(9)
    done, apples = np.zeros(games, bool), np.zeros(games)
    while not done.all():
        _, reward, terminated, truncated, _ = env.step(rng.integers(0, 4, games))
        apples += ~done & (reward > 0)
        done |= terminated | truncated
    random_apples = apples.mean()

    run_dir = tmp_path / "snake"
    result = run_ddq("train", "--mode", "serial", "--env", "ddq/Snake-v0", "--snake-size", str(size), "--seed", "3",
                     "--total-steps", "50000", "--eval-every", "50000", "--eval-episodes", "50", "--no-progress",
                     "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    learned_apples = summary_of(run_dir)["final_eval_mean_apples"]
    assert random_apples < 0.3
    assert learned_apples >= 4 * random_apples, (learned_apples, random_apples)


def test_a_time_budget_ends_the_run_before_its_step_budget(tmp_path):
    run_dir = tmp_path / "run"
    result = run_ddq("train", *SHORT, "--total-steps", "10000000", "--time-budget-s", "4", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    # the budget counts from the command's start: a loaded machine may spend all of it starting up, so the
    # number of steps played is not asserted, only that the time budget, not the step budget, ended the run
    assert summary["env_steps"] < 10_000_000 and summary["stop_reason"] == "time budget spent"
    assert summary["final_eval_return"] is not None


def test_an_episode_budget_ends_the_run_once_that_many_training_episodes_ended(tmp_path):
    run_dir = tmp_path / "run"
    result = run_ddq("train", *SHORT, "--total-steps", "10000000", "--total-episodes", "30", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    assert summary["stop_reason"] == "episode budget spent" and summary["env_steps"] < 10_000_000
    # episodes end one env at a time; the vector step that ended the 30th may end a few more of its envs
    assert 30 <= summary["episodes"] < 30 + summary["config"]["agent"]["num_envs"]
    assert summary["episodes"] == sum(1 for point in read_metrics(run_dir) if point["kind"] == "episode")


def test_a_hangup_stops_the_run_cleanly_as_sigterm_does(tmp_path):
    """SIGHUP to the command's process group, as a closed terminal sends it: a summary and exit 129, where
    Python's default had ended the process with neither."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "ddq", "train", *SHORT, "--total-steps", "10000000",
                                "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + 120
        while not (metrics.exists() and '"kind": "train"' in metrics.read_text()):  # past the start: training
            assert process.poll() is None, process.communicate()  # (read only once it has exited)
            assert time.monotonic() < deadline, "no training point within 120 s"
            time.sleep(0.1)
        os.killpg(process.pid, signal.SIGHUP)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 129, err[-2000:]
    summary = summary_of(run_dir)
    assert summary["stopped_by"] == "SIGHUP" and summary["stop_reason"] == "stopped by the user"
    assert json.loads(out)["stopped_by"] == "SIGHUP" and summary["env_steps"] < 10_000_000


def test_ctrl_c_with_a_pipe_whose_reader_went_first_still_stops_the_run_cleanly(tmp_path):
    """`ddq train ... 2>&1 | tee log` and Ctrl-C, which ends tee too: the line ddq printed as it stopped had
    raised BrokenPipeError in the middle of its stop (exit 141, no summary, no curve; a resume then found no
    checkpoint). Its output now goes nowhere, and the run stops as it would on a terminal."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "ddq", "train", *SHORT, "--total-steps", "10000000",
                                "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + 120
        while not (metrics.exists() and '"kind": "train"' in metrics.read_text()):  # past the start: training
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no training point within 120 s"
            time.sleep(0.1)
        process.stdout.close()  # the reader goes
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 130
    finally:
        if process.poll() is None:
            process.kill()
    summary = summary_of(run_dir)
    assert summary["stopped_by"] == "SIGINT" and summary["stop_reason"] == "stopped by the user"
    assert (run_dir / "checkpoint.pt").exists() and (run_dir / "learning_curve.png").exists()
