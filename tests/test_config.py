"""Configuration precedence: defaults < env preset < TOML file < flags."""

import argparse

import pytest

from ddq.config import TrainConfig, add_config_flags, build_config


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    return vars(parser.parse_args(list(argv)))


def test_flags_parse_only_what_was_given():
    values = parse("--env", "CartPole-v1", "--lr", "0.01", "--hidden", "64", "32", "--no-progress",
                   "--max-grad-norm", "none")
    assert values == {"env": "CartPole-v1", "lr": 0.01, "hidden": [64, 32], "progress": False,
                      "max_grad_norm": None}


def test_precedence(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('env = "CartPole-v1"\nbatch_size = 128\ngamma = 0.9\n[optim]\nlr = 0.005\n')
    config = build_config({"gamma": 0.95}, str(path))
    assert config.env == "CartPole-v1"
    assert config.num_envs == 4  # from the CartPole preset, not the default 8
    assert config.batch_size == 128  # the file beats the preset
    assert config.optim.lr == 0.005 and config.optim.optimizer == "adam"
    assert config.gamma == 0.95  # the flag beats the file
    assert TrainConfig().num_envs == 8


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
