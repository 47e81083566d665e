"""Typed run configuration: settings in sections (`sections`), where they come from and how they combine
(`sources`), and the one document that carries them between processes (`documents`)."""

from ddq.config.documents import (
    EVAL_EVERY_ENV,
    MASKED,
    REDIS_URL_ENV,
    celery_eval_every_s,
    config_from_document,
    decode_settings,
    encode_settings,
    has_masked_secret,
    masked_url,
    read_settings,
    settings_document,
    without_secrets,
    write_settings,
)
from ddq.config.sections import (
    MODES,
    PRECISIONS,
    SERIAL,
    AgentConfig,
    DistributedConfig,
    RunConfig,
    ServerConfig,
    ServicesConfig,
    TrainConfig,
    is_distributed,
    workers_start_together,
)
from ddq.config.sources import (
    PRESETS,
    SECTIONS,
    SETTINGS,
    SETTINGS_FORMAT,
    SETTINGS_VERSION,
    config_of,
    field_type,
    flat_settings,
    load_toml,
    merge,
    preset_for,
    setting_path,
)

__all__ = ["EVAL_EVERY_ENV", "MASKED", "MODES", "PRECISIONS", "PRESETS", "REDIS_URL_ENV", "SECTIONS", "SERIAL",
           "SETTINGS", "SETTINGS_FORMAT", "SETTINGS_VERSION", "AgentConfig", "DistributedConfig", "RunConfig",
           "ServerConfig", "ServicesConfig", "TrainConfig", "celery_eval_every_s", "config_from_document",
           "config_of", "decode_settings", "encode_settings", "field_type", "flat_settings", "has_masked_secret",
           "is_distributed", "load_toml", "masked_url", "merge", "preset_for", "read_settings", "setting_path",
           "settings_document", "without_secrets", "workers_start_together", "write_settings"]
