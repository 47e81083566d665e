"""A run's settings from all their sources, in order: defaults (or a resumed run's), the env's preset, its
algorithm's preset (the one named, or the env's measured choice: `ddq.core.algorithms`), a TOML file, a
Caffe solver, then flags; then the algorithm checks that it can train with them. The sources themselves,
and how two combine, are `ddq.config`'s; this order lives here, above config, because it asks the algorithm."""

from __future__ import annotations

from typing import Any

from ddq.config import AgentConfig, RunConfig, TrainConfig, flat_settings, load_toml, merge, preset_for
from ddq.config.sources import COMMAND_LINE, SettingRefused, named_setting, preset_key, spelled, where_given
from ddq.core.algorithms import algorithm_for, algorithm_preset, default_algorithm, unread_by


def build_config(cli_values: dict[str, Any], config_file: str | None = None,
                 base: TrainConfig | None = None, solver_file: str | None = None,
                 given_in: str = COMMAND_LINE) -> TrainConfig:
    """Defaults (or `base`, for a resume), then the env's preset and its algorithm's (the one named, or
    the env's measured choice), the file, a Caffe solver, then the flags (`cli_values`, or a Python call's
    keywords: `given_in` says which, for the errors); checked by the algorithm."""
    file_values = load_toml(config_file) if config_file else {}
    named = set(cli_values) | set(flat_settings(file_values))  # the user's (not a preset's, nor a resumed run's)
    if base is not None:
        config = base
    else:
        env_id = cli_values.get("env") or named_setting(file_values, "env") or AgentConfig.env
        mode = cli_values.get("mode") or named_setting(file_values, "mode") or RunConfig.mode
        algo = cli_values.get("algo") or named_setting(file_values, "algo")
        key = preset_key(env_id)
        try:
            algorithm = algorithm_for(algo) if algo else default_algorithm(key, mode, named)
        except ValueError as error:  # an unknown name: say where it was given
            where = where_given("algo", cli_values, file_values, config_file, given_in)
            raise ValueError(f"{error} ({where})") from None
        config = merge(TrainConfig(), preset_for(env_id), f"the preset for {env_id}")
        config = merge(config, algorithm_preset(algorithm, key), f"the {algorithm.name} preset for {env_id}")
    config = merge(config, file_values, config_file or "the config file")
    if solver_file:
        from ddq.models.caffe import load_solver

        try:
            solver = load_solver(solver_file)
        except ValueError as error:  # the file's name and line, then what: said as given, --solver's
            raise ValueError(f"{spelled('solver', given_in)} {error}") from None
        config = merge(config, solver.as_settings(), solver_file)
    config = merge(config, cli_values, given_in)
    try:
        if (rising := config.agent.rising_exploration()) is not None:
            given = [key for key in ("epsilon_end", "epsilon_start") if key in named]
            raise SettingRefused(given[0] if given else "epsilon_start", rising)
        algorithm_for(config.agent.algo).check(config)
        ignored = unread_by(config.agent.algo, named)
        if ignored:
            setting, reader = next(iter(ignored.items()))
            raise SettingRefused(setting, f"{setting} is a setting of algo {reader}, which algo {config.agent.algo} "
                                          "would ignore")
    except SettingRefused as refusal:
        where = where_given(refusal.setting, cli_values, file_values, config_file, given_in)
        raise ValueError(f"{refusal} ({where})") from None
    return config
