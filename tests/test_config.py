"""Configuration precedence: defaults < env preset < TOML file < flags."""

import argparse
import json

import pytest

from ddq.config import TrainConfig, build_config
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


def test_a_redis_password_is_masked_wherever_settings_are_written():
    from ddq.config import masked_url, settings_document

    assert masked_url("redis://:s3cret@host:6380/0") == "redis://***@host:6380/0"
    assert masked_url("rediss://user:s3cret@host/1") == "rediss://***@host/1"
    assert masked_url("unix:///tmp/r.sock?db=0&password=s3cret") == "unix:///tmp/r.sock?db=0&password=***"
    assert masked_url("unix:///tmp/r.sock?db=0") == "unix:///tmp/r.sock?db=0"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0" and masked_url(None) is None
    config = build_config({"env": "CartPole-v1", "redis_url": "redis://:s3cret@host/0"})
    assert "s3cret" not in json.dumps(settings_document(config)) and config.redis_url.endswith("s3cret@host/0")
    from pathlib import Path

    from ddq.modes.bookkeeping import RunCounters, run_summary

    assert "s3cret" not in json.dumps(run_summary(config, RunCounters(), None, 0, Path("c.pt"), None))


def test_settings_travel_as_one_versioned_document_without_presets_applied_again():
    from ddq.config import config_from_document, decode_settings, encode_settings, settings_document

    config = build_config({"env": "CartPole-v1", "lr": 0.5, "total_steps": 123})
    assert decode_settings(encode_settings(config), "test") == config
    document = settings_document(config)
    assert document["format"] == "ddq-settings" and document["version"] == 1
    with pytest.raises(ValueError, match="version 99"):
        config_from_document({**document, "version": 99}, "a newer ddq's file")
    with pytest.raises(ValueError, match="does not hold ddq settings"):
        decode_settings('{"lr": 1}', "a stray file")
