"""Checks a run's resolved settings before anything starts: the env, the model, the device, Redis, Spark, the
checkpoint a resume continues from, and the run's folder.

`ddq train` calls `check_run` after the settings are merged and before it
creates a run folder or starts a process, so a mistake costs one line and
leaves nothing behind. Types and ranges are the settings' own rules
(`ddq.config`); what is checked here needs the world: an env id Gymnasium
knows, a network that fits the env's observations, a GPU that is there, a
Redis that answers, a Spark master URL of a known kind, a checkpoint the
run can go on from, a folder that holds no other run.
"""

from __future__ import annotations

import difflib
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ddq.config import (
    REDIS_URL_ENV,
    TrainConfig,
    celery_eval_every_s,
    flat_settings,
    is_distributed,
    load_toml,
    workers_start_together,
)
from ddq.config.documents import shown_url
from ddq.config.masters import (
    MASTER_URL,
    is_cluster,
    is_kubernetes,
    is_standalone,
    kubernetes_address,
    local_slots,
    standalone_addresses,
)
from ddq.config.sections import BY_HAND
from ddq.config.sources import COMMAND_LINE, PYTHON_CALL, from_file, spelled
from ddq.run_folder import has_checkpoint, holds_a_run
from ddq.transport.credentials import PASSWORD_FILE_VARIABLE, PASSWORD_VARIABLE, host_password, split_password
from ddq.transport.reach import Unanswered, refusal

REDIS_TIMEOUT_S = 3.0  # also how long a Spark master may take to accept a connection


class SettingError(ValueError):
    """A setting that cannot work, said in one line: which setting, its value, what is allowed."""


def check_run(config: TrainConfig, redis_url_from: str = "--redis-url", given_in: str = COMMAND_LINE) -> None:
    """Raises SettingError for the first setting that would make the run fail once started. `redis_url_from`:
    where the Redis URL was given, for the line that refuses it ($DDQ_REDIS_URL, or the flag); `given_in`:
    whether the settings are flags or a Python call's keywords, which the lines name."""
    shapes = check_env(config, given_in)
    check_model(config, *shapes, given_in=given_in)
    check_device(config.agent.device, given_in)
    if is_distributed(config.run.mode):
        if config.distributed.listen is not None:
            check_listen(config.distributed.listen, given_in)
        if config.distributed.spark_master is not None:
            check_spark_master(config.distributed.spark_master, given_in)
            check_local_slots(config, given_in)
        if config.services.celery:
            try:
                celery_eval_every_s(os.environ)
            except ValueError as error:
                raise SettingError(str(error)) from error
        if config.distributed.redis_url:
            check_redis_secrets(config.distributed.redis_url, redis_url_from)
            check_redis(config.distributed.redis_url, redis_url_from)
        else:
            check_private_redis(config, given_in)
        if config.distributed.server.shard_hosts == BY_HAND:
            check_shards_by_hand(config, redis_url_from, given_in)


def check_env(config: TrainConfig, given_in: str = COMMAND_LINE) -> tuple[tuple[int, ...], int]:
    """(state shape, number of actions) of the configured env, or a SettingError naming the env."""
    import gymnasium as gym

    from ddq.core.agent import env_spec
    from ddq.core.replay import state_shape
    from ddq.gamesim.envs import is_atari

    env = spelled("env", given_in)
    try:
        spec = env_spec(config.agent)
    except gym.error.Error as error:
        known = [name for name in gym.registry if not is_atari(name)]  # (hundreds of Atari ids crowd the rest)
        close = difflib.get_close_matches(config.agent.env, known, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; see gymnasium.pprint_registry()"
        reason = str(error).splitlines()[0].split(" Did you mean")[0].rstrip(".")  # one suggestion: ddq's
        raise SettingError(f"{env} {config.agent.env!r}: {reason}{hint}") from error
    except (ValueError, RuntimeError) as error:
        raise SettingError(f"{env} {config.agent.env!r}: {error}") from error
    if config.agent.board_symmetries:
        try:
            spec.board_moves(spelled("board_symmetries", given_in), " to train with")
        except ValueError as error:
            raise SettingError(f"{error}; leave it off for this env") from None
    return state_shape(spec.frame_shape, config.agent.frame_stack), spec.num_actions


def check_model(config: TrainConfig, state: tuple[int, ...], actions: int, given_in: str = COMMAND_LINE) -> None:
    from ddq.core.agent import network_for_states

    try:
        network_for_states(config.agent, state, actions)
    except (ValueError, FileNotFoundError) as error:
        raise SettingError(f"{spelled('model', given_in)} {config.agent.model!r}: {error}") from error


def check_shards_by_hand(config: TrainConfig, redis_url_from: str, given_in: str = COMMAND_LINE) -> None:
    """Shards started by hand reach the run's Redis from their hosts and give their own stores its password,
    which they must know: the run's Redis serves other hosts with a password given, not one made for it."""
    d, flag = config.distributed, spelled("shard_hosts", given_in)
    if d.redis_url:
        if split_password(d.redis_url)[1] is None:
            raise SettingError(f"{flag} by-hand: the shards' own Redis servers take the run's password, and "
                               f"{redis_url_from} holds none")
    elif d.listen is None and not is_cluster(d.spark_master):
        raise SettingError(f"{flag} by-hand: the shards' hosts reach the run's Redis only when it serves other "
                           f"hosts: give {spelled('listen', given_in)} ADDR (or a cluster master)")
    elif host_password() is None:
        raise SettingError(f"{flag} by-hand: set {PASSWORD_VARIABLE} (or {PASSWORD_FILE_VARIABLE}) for ddq train "
                           "and on the shards' hosts: the run's Redis takes that password, which the shards "
                           "need (docs/cluster.md)")


def check_device(name: str, given_in: str = COMMAND_LINE) -> None:
    from ddq.core.agent import resolve_device

    try:
        resolve_device(name)
    except RuntimeError as error:
        raise SettingError(f"{spelled('device', given_in)}: {error}; use cpu, cuda, cuda:N or auto") from error


def check_private_redis(config: TrainConfig, given_in: str = COMMAND_LINE) -> None:
    """The run's own Redis can start: a redis-server to run, and its --redis-port, where one is named and
    serves other hosts (--listen, or a cluster master), free now."""
    from ddq.transport.redis_server import redis_server_binary  # it imports cryptography, for TLS

    try:
        binary = redis_server_binary()
    except RuntimeError as error:
        raise SettingError(str(error)) from error
    if not os.access(binary, os.X_OK) or not os.path.isfile(binary):  # $DDQ_REDIS_SERVER names it unchecked
        raise SettingError(f"$DDQ_REDIS_SERVER {binary}: no program there; name a redis-server, or unset it for "
                           "the one on PATH")
    d = config.distributed
    if d.redis_port is None or (d.listen is None and not is_cluster(d.spark_master)):
        return
    address = d.listen or "0.0.0.0"  # a cluster master's: the address toward it, one of this host's
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server binds
        try:
            probe.bind((address, d.redis_port))
        except OSError as error:
            raise SettingError(f"{spelled('redis_port', given_in)} {d.redis_port}: taken on {address} "
                               f"({error.strerror}); give a free port, or leave it out for ddq to choose "
                               "one") from error


def check_listen(address: str, given_in: str = COMMAND_LINE) -> None:
    """An address of this host that a server can bind (0.0.0.0 or :: only when given as such)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family) as probe:
            probe.bind((address, 0))
    except (OSError, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise SettingError(f"{spelled('listen', given_in)} {address}: not an address of this host ({reason}); give "
                           "one of its IP addresses, or 0.0.0.0 for all of them") from error


def check_spark_master(master: str, given_in: str = COMMAND_LINE) -> None:
    """A master URL of a kind Spark knows; a standalone master (spark://HOST:PORT) and a Kubernetes API server
    (k8s://URL) must accept a connection. (YARN's configuration may be named in spark-env.sh, which Spark's
    launcher reads: its JVM says so if none is.)"""
    flag = spelled("spark_master", given_in)
    if not MASTER_URL.match(master):
        raise SettingError(f"{flag} {master!r} is not a Spark master URL: use local[N], spark://HOST:PORT, "
                           "yarn or k8s://URL")
    if is_standalone(master):
        for address in standalone_addresses(master):
            host, _, port = address.rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=REDIS_TIMEOUT_S).close()
                return
            except (OSError, ValueError):
                continue
        raise SettingError(f"{flag} {master}: no Spark master accepts connections there")
    if is_kubernetes(master):
        server = kubernetes_address(master)
        if server is None:
            raise SettingError(f"{flag} {master!r} names no Kubernetes API server: use k8s://https://HOST:PORT")
        try:
            socket.create_connection(server, timeout=REDIS_TIMEOUT_S).close()
        except OSError:
            raise SettingError(f"{flag} {master}: no Kubernetes API server accepts connections there") from None


def check_local_slots(config: TrainConfig, given_in: str = COMMAND_LINE) -> None:
    """A local master with a task slot, and with one for every worker where they start together: Spark would
    try a barrier stage short of slots for 10 minutes (40 checks, 15 s apart), then fail it."""
    master, workers = str(config.distributed.spark_master), config.distributed.workers
    slots = local_slots(master)
    if slots is None:
        return
    flag = spelled("spark_master", given_in)
    if slots < 1:
        raise SettingError(f"{flag} {master}: a local master of no thread runs no task: give local[N], N at least 1")
    if slots < workers and workers_start_together(config.run.mode, config.distributed.sync):
        raise SettingError(f"{flag} {master} offers {slots} task slot{'s' * (slots != 1)}, and the {workers} "
                           f"workers of {config.run.mode} mode start together, one slot each: give local[{workers}] "
                           f"or more, fewer --workers, or --mode downpour")


def check_redis_secrets(url: str, setting: str) -> None:
    """A URL whose one secret is its password: Spark's tasks carry the URL to the workers with a placeholder
    where the password was (each host fills in its own), and would carry any other secret as written."""
    parts, query = urlsplit(url), parse_qs(urlsplit(url).query, keep_blank_values=True)
    if "ssl_password" in query:
        raise SettingError(f"{setting} {shown_url(url)}: ssl_password, the client key's passphrase, would travel "
                           "in Spark's tasks as written: give a key file without one, readable by the run's user "
                           "alone")
    if parts.password is not None and "password" in query:
        raise SettingError(f"{setting} {shown_url(url)}: a password in its user part and another in its query: "
                           "give one")


def unchecked_server_note(url: str, setting: str) -> str | None:
    """A warning for a TLS URL that checks no certificate (`ssl_cert_reqs=none`): taken, as redis-py takes it,
    but the password then goes to whoever answers at that address."""
    parts = urlsplit(url)
    requirement = [value.lower() for value in parse_qs(parts.query).get("ssl_cert_reqs", [])]
    if parts.scheme == "rediss" and requirement == ["none"]:
        return (f"{setting} {shown_url(url)}: ssl_cert_reqs=none checks no certificate, so the run's password "
                "goes to whatever answers at that address (give the server's CA as ssl_ca_data, or "
                "ssl_ca_certs=FILE, to check it)")
    return None


def password_in_flag_note(url: str, setting: str) -> str | None:
    """A warning for a password given in --redis-url: taken, but every user of this host sees a command line
    (`ps`); $DDQ_REDIS_URL keeps it in the process's environment, which only its user reads."""
    if setting != "--redis-url" or split_password(url)[1] is None:
        return None
    return ("--redis-url carries a password, which every user of this host can read on the command line (ps); "
            f"give the URL in ${REDIS_URL_ENV} instead")


def check_redis(url: str, setting: str) -> None:
    """A Redis that answers PING within a few seconds, and takes the URL's password as the shards do."""
    refused = refusal(url, REDIS_TIMEOUT_S)
    if refused is None:
        return
    said = f"{setting} {shown_url(url)}"
    if refused.why is Unanswered.CERTIFICATE:
        line = (f"{said}: the server's TLS certificate is not one this URL trusts (give its CA as ssl_ca_data, "
                "or ssl_ca_certs=FILE)")
    elif refused.why is Unanswered.SILENCE:
        line = f"{said}: no Redis answers there ({refused.detail})"
    elif refused.why is Unanswered.MALFORMED:
        line = f"{said}: not a Redis URL ddq can use ({refused.detail})"
    else:
        what = "the user name or password" if refused.why is Unanswered.PASSWORD else "this connection"
        line = f"{said}: Redis refused {what} ({refused.detail})"
    raise SettingError(line) from refused.error


def check_resume(saved: dict[str, Any], config: TrainConfig, resume: str, given_in: str = COMMAND_LINE) -> None:
    """Refuses, in one line, a resume that could not continue the run: with its step or episode budget spent
    (it trained nothing, yet evaluated again and rewrote the summary), in another mode, whose weights live
    elsewhere (a serial run resumed in downpour had trained on from new ones, and said nothing), or with
    settings that make another network (a shard refused its snapshot once the run had started, after the
    run's settings were rewritten). A network from a model file is checked as it loads."""
    from dataclasses import asdict

    from ddq.core import checkpoint as ckpt
    from ddq.core.agent import env_spec, q_network
    from ddq.lifecycle import StopReason, budget_spent

    before, counters, run = ckpt.config_from_checkpoint(saved), saved.get("counters", {}), config.run
    resuming = f"{spelled('resume', given_in)} {resume}"
    if config.run.mode != before.run.mode:
        raise ValueError(f"{resuming}: the run trained in {before.run.mode} mode, which keeps its weights; resume "
                         f"it in that mode (no {spelled('mode', given_in)}), or start a new run in {config.run.mode} "
                         "mode")
    if "model_definition" not in saved:
        spec = env_spec(config.agent)
        network = q_network(config.agent, spec.frame_shape, spec.num_actions).state_dict()
        if {k: v.shape for k, v in network.items()} != {k: v.shape for k, v in saved["q_network"].items()}:
            now, then = asdict(config.agent), asdict(before.agent)
            changed = ", ".join(sorted(key for key in now if now[key] != then.get(key)))
            raise ValueError(f"{resuming}: with {changed} changed, the network is not the run's; resume it "
                             "with the run's, or start a new run")
    check_resumed_state(before, config, resuming, given_in)
    spent = budget_spent(int(counters.get("env_steps", 0)), run.total_steps, int(counters.get("episodes", 0)),
                         run.total_episodes)
    if spent is not None:
        flag = spelled("total_steps" if spent is StopReason.BUDGET else "total_episodes", given_in)
        raise ValueError(f"{resuming}: the run has spent its budget ({spent.value}: {counters.get('env_steps')} "
                         f"env steps, {counters.get('episodes')} episodes); resume it with a larger {flag}")


def check_resumed_state(before: TrainConfig, config: TrainConfig, resuming: str, given_in: str) -> None:
    """The optimizer's saved state, and a serial run's replay memory, fit the resumed settings: another update
    rule's, or a memory of another size, had been refused only once the run had started (a shard dying of
    it four times, or the serial run at once)."""
    from ddq.core import checkpoint as ckpt
    from ddq.core.optimizers import state_names

    now, then = config.agent.optim, before.agent.optim
    if (now.optimizer, state_names(now)) != (then.optimizer, state_names(then)):
        raise ValueError(f"{resuming}: the run's optimizer ({then.optimizer}, keeping "
                         f"{', '.join(state_names(then)) or 'no state'}) saved state this one "
                         f"({now.optimizer}, keeping {', '.join(state_names(now)) or 'no state'}) cannot take; resume "
                         "it with the run's optimizer settings, or start a new run")
    replay = Path(str(config.run.run_dir)) / ckpt.REPLAY_NAME
    if not is_distributed(config.run.mode) and config.run.save_replay and replay.exists():
        changed = [key for key in ("buffer_size", "num_envs", "prioritized")
                   if getattr(config.agent, key) != getattr(before.agent, key)]
        if changed:
            without = "save_replay=False" if given_in == PYTHON_CALL else "--no-save-replay"
            raise ValueError(f"{resuming}: with {', '.join(changed)} changed, the run's replay memory does not "
                             f"fit; resume it with the run's, or without its memory ({without}, which fills a new "
                             "one first)")


def run_dir_asked(values: dict[str, Any], config_file: str | None, given_in: str) -> tuple[str | None, str | None]:
    """The run folder the user named, and where, for the lines: its flag or keyword, `run_dir in FILE`, or
    (None, None) where they named none."""
    if "run_dir" in values:
        return str(values["run_dir"]), spelled("run_dir", given_in)
    in_file = flat_settings(load_toml(config_file)).get("run_dir") if config_file else None
    if in_file is None or not config_file:
        return None, None
    return str(in_file), from_file("run_dir", config_file)


def claim_words(run_dir: str, resume: str | None, values: dict[str, Any], config_file: str | None,
                given_in: str) -> tuple[str, str]:
    """How the refusal of a run folder another run trains in names it, and what it offers instead
    (`ddq.run_folder.claim`)."""
    if resume:
        return f"{spelled('resume', given_in)} {run_dir}", "to resume it"
    _, asked_in = run_dir_asked(values, config_file, given_in)
    flag = spelled("run_dir", given_in)
    if asked_in is None:
        return f"{run_dir} (the default folder)", f"or give a {flag}"
    return f"{asked_in} {run_dir}", f"or choose another {flag}"


def refuse_a_held_run(run_dir: str, resume: str | None, given_in: str) -> None:
    """Refuses a new run into a folder that holds one (`holds_a_run`), in one line that says what to do."""
    if resume or not holds_a_run(run_dir):
        return
    how = f"continue it with {spelled('resume', given_in)} {run_dir}" if has_checkpoint(run_dir) else \
        f"it ended before it saved a checkpoint, so it cannot be resumed: empty {run_dir} to start there again"
    raise ValueError(f"{run_dir} already holds a run: {how}, or choose another {spelled('run_dir', given_in)}")
