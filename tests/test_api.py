"""The Python API: `ddq.train(...)` returns a Run, `ddq.load(...)` an agent that plays a Gymnasium env."""

import time

import gymnasium as gym
import numpy as np
import pytest

import ddq
from ddq.benchmarks.procfs import processes_mentioning


def play(agent: ddq.Agent, episodes: int) -> list[float]:
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=100 + episode)
        total, done = 0.0, False
        while not done:
            action, _ = agent.predict(observation)
            observation, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return returns


@pytest.mark.slow
def test_train_reaches_475_then_load_plays_a_gymnasium_env(tmp_path, capfd):
    run = ddq.train(env="CartPole-v1", mode="serial", target_return=475, total_steps=30_000, seed=3,
                    run_dir=tmp_path / "run")
    assert isinstance(run, ddq.Run) and run.reached_target and run.stop_reason == "target return reached"
    assert run.env_steps <= 30_000 and run.final_eval_return >= 475 and run.checkpoint.is_file()
    assert "%|" not in capfd.readouterr().err  # no progress bar unless asked

    agent = ddq.load(run.run_dir)
    assert agent.env_id == "CartPole-v1"
    assert np.mean(play(agent, 5)) >= 400  # an untrained network balances for about 10-40 steps
    observations = np.stack([gym.make("CartPole-v1").reset(seed=s)[0] for s in range(3)])
    actions = agent.act(observations)  # a vector env's batch: an action each
    assert actions.shape == (3,) and [agent.act(o) for o in observations] == actions.tolist()
    assert ddq.load(run.checkpoint).act(observations[0]) == agent.act(observations[0])


def test_a_bad_setting_is_one_clear_error_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="unknown setting 'learning_rate'"):
        ddq.train(env="CartPole-v1", mode="serial", learning_rate=0.1, run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match="batch_size must be positive"):
        ddq.train(env="CartPole-v1", mode="serial", batch_size=0, run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match=r"total_steps must be positive, got 0 \(given as total_steps=\)$"):
        ddq.train(env="CartPole-v1", mode="serial", total_steps=0, run_dir=tmp_path / "run")  # a keyword, not a flag
    with pytest.raises(ValueError, match=r"^env= 'CartPol-v1': .*did you mean CartPole-v1"):  # the checks' too
        ddq.train(env="CartPol-v1", mode="serial", run_dir=tmp_path / "run")
    with pytest.raises(ValueError, match=r"^model= 'nosuch': unknown model"):
        ddq.train(env="CartPole-v1", mode="serial", model="nosuch", run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(FileNotFoundError, match="holds no ddq checkpoint"):
        ddq.load(tmp_path)


@pytest.mark.slow
def test_train_in_downpour_mode_returns_the_run_and_a_second_call_starts_spark_anew(tmp_path):
    run = ddq.train(env="CartPole-v1", mode="downpour", workers=2, total_steps=3_000, eval_every=3_000,
                    eval_episodes=2, dashboard=False, celery=False, run_dir=tmp_path / "api-first-call")
    assert run.stop_reason == "step budget spent" and run.env_steps >= 3_000
    assert sorted(worker["worker"] for worker in run.summary["workers"]) == [0, 1]
    assert run.agent().act(np.zeros(4, np.float32)) in (0, 1)
    # a second run in this process, on a master of another size: a JVM of its own (pyspark keeps a process's
    # first gateway for later contexts), and none of the two left running once it ended
    again = ddq.train(env="CartPole-v1", mode="downpour", workers=1, total_steps=500, eval_every=500,
                      eval_episodes=1, dashboard=False, celery=False, animate=False, run_dir=tmp_path / "api-second-call")
    assert again.stop_reason == "step budget spent" and [w["worker"] for w in again.summary["workers"]] == [0]
    deadline = time.monotonic() + 20  # each exits once its standard input closes, within a second or two
    while (jvms := [pid for name in ("api-first-call", "api-second-call")
                    for pid in processes_mentioning(f"spark.app.name=ddq-{name}-")]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jvms == []


def test_resume_continues_a_run_from_python_and_its_refusals_name_keywords(tmp_path):
    """`ddq.train(resume=...)` is `ddq train --resume`; a refusal names the call's keywords, not flags."""
    run_dir = tmp_path / "run"
    first = ddq.train(env="CartPole-v1", mode="serial", total_steps=1_000, eval_every=1_000, run_dir=run_dir)
    assert 1_000 <= first.env_steps < 1_100  # a vector step of its envs past the budget
    with pytest.raises(ValueError, match=r"^resume= .*: the run has spent its budget .*a larger total_steps=$"):
        ddq.train(resume=run_dir)
    with pytest.raises(ValueError, match=r"already holds a run: continue it with resume= .*another run_dir=$"):
        ddq.train(env="CartPole-v1", mode="serial", run_dir=run_dir)
    # neither best.pt (its step count is its evaluation's) nor another folder: refused before anything moves
    points = (run_dir / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"^resume= .*best\.pt: a run continues from its folder's checkpoint\.pt"):
        ddq.train(resume=run_dir / "best.pt", total_steps=2_000)
    with pytest.raises(ValueError, match=r"^run_dir= .*elsewhere: a resumed run goes on in its own folder"):
        ddq.train(resume=run_dir, run_dir=tmp_path / "elsewhere", total_steps=2_000)
    (tmp_path / "file.toml").write_text(f'run_dir = "{tmp_path / "elsewhere"}"\n')  # a file's, as a keyword's
    with pytest.raises(ValueError, match=r"^run_dir in .*file\.toml .*elsewhere: a resumed run goes on in its own"):
        ddq.train(resume=run_dir, config=tmp_path / "file.toml", total_steps=2_000)
    assert (run_dir / "metrics.jsonl").read_bytes() == points and not (tmp_path / "elsewhere").exists()
    second = ddq.train(resume=run_dir / "checkpoint.pt", run_dir=f"{run_dir}/", total_steps=2_000)  # the same
    assert second.run_dir == run_dir and 2_000 <= second.env_steps < 2_100 and second.stop_reason == "step budget spent"


def test_a_folder_being_prepared_for_a_run_is_refused_to_another_in_the_same_process(tmp_path):
    """Two calls in one process (threads, a notebook) are two runs: the second is refused, and its refusal
    leaves the first one's claim standing (it had released it)."""
    from ddq.api import prepare
    from ddq.config.sources import PYTHON_CALL
    from ddq.run_folder import release

    values = {"env": "CartPole-v1", "mode": "serial", "run_dir": str(tmp_path / "run")}
    prepare(values, given_in=PYTHON_CALL)
    try:
        for _ in range(2):
            with pytest.raises(ValueError, match=r"^run_dir= .*/run: another run is training in this folder now; "
                                                 r"wait for it to end or choose another run_dir=$"):
                prepare(values, given_in=PYTHON_CALL)
        with pytest.raises(ValueError, match=r"^resume= .*/run: another run is training in this folder now; wait "
                                             r"for it to end to resume it$"):  # not "no checkpoint": not yet
            prepare({}, resume=str(tmp_path / "run"), given_in=PYTHON_CALL)
    finally:
        release(tmp_path / "run")
    prepare(values, given_in=PYTHON_CALL)  # once the first is done with it
    release(tmp_path / "run")
