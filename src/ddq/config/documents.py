"""The run's settings across processes and on disk: one versioned document, with any Redis password masked.

This is the only form in which settings leave the driver: the Spark tasks'
closure, the shards', learner's and Celery's settings file, the run's info in
Redis (the dashboard) and checkpoints all carry it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ddq.config.sections import TrainConfig
from ddq.config.sources import SETTINGS_FORMAT, SETTINGS_VERSION, document_values, merge
from ddq.run_folder import write_whole

REDIS_URL_ENV = "DDQ_REDIS_URL"  # how the processes ddq starts receive the Redis URL: never on a command line
MASKED = "***"
SECRET_QUERY = ("password", "username", "ssl_password")  # a URL's query keys that files and logs never show
EVAL_EVERY_ENV = "DDQ_EVAL_EVERY_S"  # the seconds between the Celery worker's evaluations (`ddq.services.tasks`)


def celery_eval_every_s(environ: Mapping[str, str]) -> float:
    """The seconds between the Celery worker's evaluations: $DDQ_EVAL_EVERY_S, 30 where it is not set;
    ValueError, in one line, for anything but a positive number."""
    raw = environ.get(EVAL_EVERY_ENV, "30")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"${EVAL_EVERY_ENV} {raw!r} (the environment's): give the seconds between the Celery "
                         "worker's evaluations, a positive number")
    return seconds


def masked_url(url: str | None) -> str | None:
    """`url` with its password (and user name, and a client key's passphrase) replaced by ***: what files, logs
    and Redis keys may hold."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is not None or parts.username is not None:  # redis://user:password@host
        url = url.replace(parts.netloc, f"{MASKED}@" + parts.netloc.rsplit("@", 1)[1], 1)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(key in SECRET_QUERY for key, _ in pairs):  # unix:///path?password=...
        url = url.split("?", 1)[0] + "?" + urlencode(
            [(key, MASKED if key in SECRET_QUERY else value) for key, value in pairs], safe="*")
    return url


def shown_url(url: str) -> str:
    """`url` as a line shows it: masked, and a CA it carries (`ssl_ca_data`, hundreds of characters of
    URL-encoded PEM) shown as `...`."""
    return re.sub(r"(ssl_ca_data=)[^&]*", r"\1...", str(masked_url(url)))


def has_masked_secret(url: str | None) -> bool:
    return bool(url) and MASKED in str(url)


def without_secrets(config: TrainConfig) -> TrainConfig:
    """A copy of `config` fit to be written down: the Redis URL's password masked."""
    distributed = dataclasses.replace(config.distributed, redis_url=masked_url(config.distributed.redis_url))
    return dataclasses.replace(config, distributed=distributed)


def settings_document(config: TrainConfig) -> dict[str, Any]:
    """The resolved settings of a run as plain data, with a format and version, for another process.

    This is the only form in which settings leave the driver: the Spark tasks'
    closure, the shards' and Celery's settings file, the run's info in Redis
    (the dashboard) and checkpoints all carry this document. A Redis password is
    masked: processes ddq starts receive the URL in their environment instead."""
    return {"format": SETTINGS_FORMAT, "version": SETTINGS_VERSION,
            "config": dataclasses.asdict(without_secrets(config))}


def config_from_document(document: Any, source: str) -> TrainConfig:
    """The TrainConfig a `settings_document` holds. No preset is applied again: the driver already
    resolved every setting, so a child process runs exactly the driver's configuration."""
    return merge(TrainConfig(), document_values(document, source), source)


def encode_settings(config: TrainConfig) -> str:
    """`settings_document` as JSON text."""
    return json.dumps(settings_document(config))


def decode_settings(text: str | bytes, source: str) -> TrainConfig:
    """The TrainConfig of `encode_settings`'s text; one clear error for anything else."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{source} is not JSON: {error}") from error
    return config_from_document(document, source)


def write_settings(config: TrainConfig, path: Path) -> Path:
    """The run's settings as a file (`settings.json` in a run folder) that processes ddq starts read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_whole(path, json.dumps(settings_document(config), indent=1).encode())  # (a restarted shard reads it)


def read_settings(path: str | Path) -> TrainConfig:
    return decode_settings(Path(path).read_text(), str(path))
