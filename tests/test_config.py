"""Configuration precedence: defaults < env preset < TOML file < flags."""

import argparse
import dataclasses
import json

import pytest

from ddq.config import TrainConfig
from ddq.core.settings import build_config
from ddq.flags import add_config_flags


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    return vars(parser.parse_args(list(argv)))


def test_flags_parse_only_what_was_given():
    values = parse("--env", "CartPole-v1", "--lr", "0.01", "--hidden", "64", "32", "--no-progress",
                   "--max-grad-norm", "none")
    assert values == {"env": "CartPole-v1", "lr": 0.01, "hidden": [64, 32], "progress": False,
                      "max_grad_norm": None}


def test_a_whole_number_flag_takes_it_as_papers_write_it():
    assert parse("--total-steps", "1e6", "--buffer-size", "100_000") == {"total_steps": 1_000_000,
                                                                        "buffer_size": 100_000}
    with pytest.raises(SystemExit):  # argparse's one line: "invalid int value: '1.5'"
        parse("--total-steps", "1.5")


def test_precedence(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('env = "CartPole-v1"\nbatch_size = 128\ngamma = 0.9\n[optim]\nlr = 0.005\n')
    config = build_config({"gamma": 0.95}, str(path))
    assert config.agent.env == "CartPole-v1"
    assert config.agent.num_envs == 4  # from the CartPole preset, not the default 8
    assert config.agent.batch_size == 128  # the file beats the preset
    assert config.agent.optim.lr == 0.005 and config.agent.optim.optimizer == "adam"
    assert config.agent.gamma == 0.95  # the flag beats the file
    assert TrainConfig().agent.num_envs == 8


def test_an_env_trains_with_its_measured_algorithm_unless_told_or_unable(tmp_path):
    def agent(values, file_text=None):
        path = None
        if file_text is not None:
            path = tmp_path / "run.toml"
            path.write_text(file_text)
        a = build_config(values, str(path) if path else None).agent
        return a.algo, a.hidden, a.optim.lr, a.num_envs

    # CartPole: PQN on a 64x64 MLP at 3e-3, over the preset's other settings (4 envs)
    assert agent({"env": "CartPole-v1"}) == ("pqn", [64, 64], 3e-3, 4)
    assert agent({"env": "CartPole-v1", "mode": "serial"}) == ("pqn", [64, 64], 3e-3, 4)
    # DQN when named, on the flag line or in a file, and in actor-learner mode, which runs only DQN
    assert agent({"env": "CartPole-v1", "algo": "dqn"}) == ("dqn", [256, 256], 1.5e-3, 4)
    assert agent({"env": "CartPole-v1"}, "[agent]\nalgo = \"dqn\"\n") == ("dqn", [256, 256], 1.5e-3, 4)
    assert agent({"env": "CartPole-v1"}, "[run]\nmode = \"actor-learner\"\n")[0] == "dqn"
    # a setting named beats the algorithm's preset as it beats the env's
    assert agent({"env": "CartPole-v1", "hidden": [32]})[:2] == ("pqn", [32])
    # a setting only DQN reads asks for DQN, and so does a run's settings document from before PQN
    assert agent({"env": "CartPole-v1", "prioritized": True})[:2] == ("dqn", [256, 256])
    assert agent({"env": "CartPole-v1"}, "[agent]\nframe_stack = 4\n")[0] == "dqn"
    # LunarLander: PQN with PQN's own defaults; envs with no measured choice train with DQN
    assert agent({"env": "LunarLander-v3"}) == ("pqn", [256, 256], 1e-3, 8)
    assert build_config({"env": "LunarLander-v3"}).run.total_steps == 1_000_000  # PQN needs more env steps
    assert build_config({"env": "LunarLander-v3", "algo": "dqn"}).run.total_steps == 200_000
    assert agent({"env": "Acrobot-v1"})[0] == "dqn"
    assert agent({"env": "CartPole-v1", "algo": "pqn", "mode": "downpour"})[0] == "pqn"
    # and the run's first lines say why, when it is not the env's choice and no algorithm was named
    from ddq.api import algorithm_note

    def note(values):
        return algorithm_note(values, None, build_config(values))

    assert note({"env": "CartPole-v1", "batch_size": 64}) == (
        "dqn: batch_size was named, which pqn does not read (pqn is CartPole-v1's measured choice; --algo names another)")
    assert note({"env": "CartPole-v1", "mode": "actor-learner"}).startswith("dqn: pqn does not train in actor-learner")
    assert note({"env": "CartPole-v1"}) is None and note({"env": "CartPole-v1", "algo": "dqn"}) is None
    assert note({"env": "Acrobot-v1"}) is None  # DQN, the choice where none was measured


def test_unknown_settings_are_named(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("batchsize = 3\n")
    with pytest.raises(ValueError, match="unknown setting 'batchsize'"):
        build_config({}, str(path))
    path.write_text("[optim]\nmomentun = 0.9\n")
    with pytest.raises(ValueError, match="momentun"):
        build_config({}, str(path))


def test_invalid_values_are_refused():
    with pytest.raises(ValueError, match="batch_size must be positive"):
        build_config({"batch_size": 0})
    with pytest.raises(ValueError, match="unknown mode"):
        build_config({"mode": "magic"})


def test_exploration_that_would_rise_is_refused_once_every_source_is_merged(tmp_path):
    """CartPole's preset ends at 0.04: a file's start below it waits for the flags, which may lower the end."""
    path = tmp_path / "low.toml"
    path.write_text("epsilon_start = 0.02\n")
    config = build_config({"env": "CartPole-v1", "epsilon_end": 0.01}, str(path))
    assert (config.agent.epsilon_start, config.agent.epsilon_end) == (0.02, 0.01)
    with pytest.raises(ValueError, match=r"^epsilon_end 0.04 is above epsilon_start 0.02: .* \(in .*low.toml, line 1\)"):
        build_config({"env": "CartPole-v1"}, str(path))


@pytest.mark.parametrize("flags, optim", [
    (("--optimizer", "adadelta", "--rho", "0.95"), dict(optimizer="adadelta", rho=0.95, momentum=0.0)),
    (("--optimizer", "nesterov", "--momentum", "0.9"), dict(optimizer="nesterov", momentum=0.9)),
])
def test_flags_name_adadelta_and_nesterov_and_a_wrong_optimizer_is_one_line(flags, optim):
    config = build_config(parse(*flags))
    assert {name: getattr(config.agent.optim, name) for name in optim} == optim
    with pytest.raises(ValueError, match="unknown optimizer 'nesterov2'; choose one of sgd, nesterov, rmsprop, "
                                         r"adagrad, adadelta, adam \(given as --optimizer\)$"):
        build_config(parse("--optimizer", "nesterov2"))


def test_a_redis_password_is_masked_wherever_settings_are_written():
    from ddq.config import masked_url, settings_document

    assert masked_url("redis://:s3cret@host:6380/0") == "redis://***@host:6380/0"
    assert masked_url("rediss://user:s3cret@host/1") == "rediss://***@host/1"
    assert masked_url("unix:///tmp/r.sock?db=0&password=s3cret") == "unix:///tmp/r.sock?db=0&password=***"
    assert masked_url("unix:///tmp/r.sock?db=0") == "unix:///tmp/r.sock?db=0"
    assert masked_url("rediss://:s3cret@h/0?ssl_certfile=c.pem&ssl_keyfile=k.pem&ssl_password=keypass") == \
        "rediss://***@h/0?ssl_certfile=c.pem&ssl_keyfile=k.pem&ssl_password=***"  # a client key's passphrase
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0" and masked_url(None) is None
    config = build_config({"env": "CartPole-v1", "redis_url": "redis://:s3cret@host/0"})
    assert "s3cret" not in json.dumps(settings_document(config)) and config.distributed.redis_url.endswith("s3cret@host/0")
    from pathlib import Path

    from ddq.bookkeeping import RunCounters, run_summary

    assert "s3cret" not in json.dumps(run_summary(config, RunCounters(), None, 0, Path("c.pt"), None))


def test_settings_travel_as_one_versioned_document_without_presets_applied_again():
    from ddq.config import config_from_document, decode_settings, encode_settings, settings_document

    config = build_config({"env": "CartPole-v1", "lr": 0.5, "total_steps": 123})
    assert decode_settings(encode_settings(config), "test") == config
    document = settings_document(config)
    assert document["format"] == "ddq-settings" and document["version"] == 2
    with pytest.raises(ValueError, match="version 99"):
        config_from_document({**document, "version": 99}, "a newer ddq's file")
    with pytest.raises(ValueError, match="does not hold ddq settings"):
        decode_settings('{"lr": 1}', "a stray file")


def test_every_setting_has_a_group_and_help_and_a_unique_name():
    from ddq.flags import settings

    found = list(settings())
    assert [s.field.name for s in found if not s.group] == []
    assert [s.field.name for s in found if not s.field.metadata.get("help")] == []
    names = [s.field.name for s in found]
    assert len(names) == len(set(names))  # a flag or a key without its section names one setting


def test_the_core_receives_the_agent_section_and_toml_sections_name_where_settings_live(tmp_path):
    from ddq.config import AgentConfig, flat_settings

    path = tmp_path / "run.toml"
    path.write_text('[agent]\nenv = "CartPole-v1"\ngamma = 0.9\n[agent.optim]\nlr = 0.004\n'
                    '[run]\ntotal_steps = 5000\n[distributed]\nworkers = 3\n[distributed.server]\nshards = 2\n'
                    '[services]\ndashboard = false\n')
    config = build_config({}, str(path))
    assert isinstance(config.agent, AgentConfig) and config.agent.env == "CartPole-v1"
    assert config.agent.num_envs == 4  # the CartPole preset applies to an env named inside [agent]
    assert (config.agent.gamma, config.agent.optim.lr, config.run.total_steps) == (0.9, 0.004, 5000)
    assert (config.distributed.workers, config.distributed.server.shards, config.services.dashboard) == (3, 2, False)
    path.write_text("[run]\ngamma = 0.9\n")
    with pytest.raises(ValueError, match=r"gamma .* is not a setting of \[run\]; it belongs in \[agent\]"):
        build_config({}, str(path))
    assert flat_settings(dataclasses.asdict(config))["shards"] == 2


def test_settings_written_before_sections_are_still_read():
    from ddq.config import config_from_document

    old = {"format": "ddq-settings", "version": 1,
           "config": {"env": "CartPole-v1", "mode": "serial", "workers": 3, "optim": {"lr": 0.01}}}
    config = config_from_document(old, "an older run's config.json")
    assert (config.agent.env, config.run.mode, config.distributed.workers, config.agent.optim.lr) == (
        "CartPole-v1", "serial", 3, 0.01)


def test_every_preset_names_a_registered_env_or_family():
    """A preset keyed by an env id that no longer exists would stop applying silently."""
    import gymnasium as gym

    import ddq  # noqa: F401  (registers ddq's own envs)
    from ddq.config import PRESETS
    from ddq.core.algorithms import ALGORITHMS

    keys = set(PRESETS) | {key for kind in ALGORITHMS.values() for key in (*kind.presets, *kind.chosen_for)}
    assert {key for key in keys if key not in ("atari", "minatar") and key not in gym.registry} == set()


def test_a_run_naming_no_mode_runs_the_one_measured_fastest_for_its_machine(tmp_path):
    """Serial on one machine; data-parallel for a setting only distributed runs read and for a standalone
    cluster master (downpour if a setting only another wiring reads is named too, on other cluster masters
    and under spark-submit); a mode named anywhere (a flag, the file) stands, and the reason is one line."""
    from ddq.api import with_measured_mode
    from ddq.config.measured import measured_mode, unread_in

    assert measured_mode(set(), None, 2).mode == "serial"
    assert measured_mode({"env"}, "local[4]", 2).mode == "serial"
    assert "the 16 cores this run may use are more than measured" in measured_mode(set(), None, 16).why
    assert measured_mode(set(), "spark://10.0.0.1:7077", 2).mode == "data-parallel"
    assert measured_mode({"workers", "listen", "publish_every", "snapshot_every"}, "spark://m:7077", 2).mode \
        == "data-parallel"
    assert measured_mode({"workers"}, "yarn", 2).mode == "downpour"  # not compared on YARN or Kubernetes yet
    # a setting only one other wiring reads asks for that wiring (actor-learner's had given downpour, which
    # ignored --per-actor-epsilon and refused --sync)
    for other_wiring, mode in (("shards", "downpour"), ("fetch_every", "downpour"), ("sync", "actor-learner"),
                               ("send_every", "actor-learner"), ("per_actor_epsilon", "actor-learner")):
        choice = measured_mode({"workers", other_wiring}, "spark://10.0.0.1:7077", 2)
        assert choice.mode == mode and other_wiring in choice.why, other_wiring
    for distributed in ("workers", "listen", "redis_url", "publish_every", "snapshot_every"):
        choice = measured_mode({"env", distributed}, None, 2)
        assert choice.mode == "data-parallel" and distributed in choice.why, distributed
        assert measured_mode({distributed}, "local[2]", 2).mode == "data-parallel"
    for other_wiring, mode in (("shards", "downpour"), ("sync", "actor-learner"), ("send_every", "actor-learner")):
        assert measured_mode({"workers", other_wiring}, None, 2).mode == mode, other_wiring
    assert measured_mode({"workers"}, None, 2, submitted=True).mode == "downpour"  # spark-submit's master: unseen
    assert measured_mode({"workers"}, "spark://m:7077", 2, submitted=True).mode == "data-parallel"
    assert with_measured_mode({"mode": "data-parallel"}, None) == ({"mode": "data-parallel"}, None)
    (tmp_path / "run.toml").write_text('[run]\nmode = "actor-learner"\n')
    assert with_measured_mode({}, str(tmp_path / "run.toml")) == ({}, None)
    values, why = with_measured_mode({"env": "CartPole-v1"}, None)
    assert values["mode"] == "serial" and why.startswith("serial:") and "\n" not in why
    # what --mode serial says it ignores: a distributed run's settings, but the Redis URL an environment may
    # export, and one worker, which it is
    assert unread_in("serial", {"redis_url", "workers", "lr", "shards"}, 4) == ["shards", "workers"]
    assert unread_in("serial", {"redis_url", "workers", "lr"}, 1) == []
    # and what each distributed mode does not read: another mode's own settings
    named = {"workers", "shards", "send_every", "publish_every", "snapshot_every"}
    assert unread_in("downpour", named, 2) == ["publish_every", "send_every"]
    assert unread_in("data-parallel", named, 2) == ["send_every", "shards"]
    assert unread_in("actor-learner", named, 2) == ["shards"]


def test_a_serial_run_says_which_distributed_settings_it_ignores(tmp_path, capsys, monkeypatch):
    """`--mode serial --workers 4` had trained one process and said nothing; refusing it would stop a script
    that gives every mode the same flags. One worker, which serial is, goes unmentioned."""
    from ddq.api import prepare
    from ddq.run_folder import release

    monkeypatch.delenv("DDQ_REDIS_URL", raising=False)
    (tmp_path / "run.toml").write_text("shards = 2\n")
    values = {"mode": "serial", "env": "CartPole-v1", "workers": 4, "run_dir": str(tmp_path / "run")}
    prepare(values, str(tmp_path / "run.toml"))
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"ddq: warning: serial mode trains in one process: it ignores shards (in {tmp_path / 'run.toml'}, "
                     "line 1), workers (given as --workers), which only distributed runs read"], lines
    release(tmp_path / "run")  # `prepare` claimed the run's folder, which `execute` would release
    prepare({**values, "workers": 1})
    assert capsys.readouterr().err == ""
    release(tmp_path / "run")


def test_an_algorithm_built_on_another_reads_what_it_inherits(monkeypatch, capsys):
    """A third algorithm subclassing DQN (architecture.md's C51) inherits DQN's replay settings: neither refuses
    the other's, and a setting PQN would ignore is still named as DQN's (the first registered reader). The
    registry entry alone puts it in `--algo`'s help."""
    from ddq.cli import main
    from ddq.core import algorithms
    from ddq.core.algorithms.dqn import DQN

    sibling = type("Sibling", (DQN,), {"name": "sibling", "summary": "DQN's sibling", "chosen_for": frozenset()})
    monkeypatch.setitem(algorithms.ALGORITHMS, "sibling", sibling)
    assert algorithms.unread_by("sibling", {"n_step", "batch_size"}) == {}
    assert algorithms.unread_by("dqn", {"n_step", "batch_size"}) == {}
    assert algorithms.unread_by("pqn", {"n_step"}) == {"n_step": "dqn"}
    assert build_config({"env": "CartPole-v1", "algo": "dqn", "batch_size": 32}).agent.batch_size == 32
    assert build_config({"env": "CartPole-v1", "algo": "sibling", "n_step": 3}).agent.n_step == 3
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "or sibling (DQN's sibling)" in " ".join(capsys.readouterr().out.split())
