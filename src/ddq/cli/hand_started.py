"""The processes ddq starts itself, which a person may start by hand too: a Barista over HTTP, a
parameter-server shard, actor-learner's learner. Their commands, their parsers, and the rule for the Redis
URL each takes."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from ddq.config import REDIS_URL_ENV, TrainConfig, read_settings
from ddq.config.sources import from_file
from ddq.flags import PORT, add_config_flags, in_range, reword
from ddq.run_folder import write_whole
from ddq.transport.credentials import (
    PASSWORD_FILE_VARIABLE,
    PASSWORD_VARIABLE,
    PLACEHOLDER,
    executor_url,
    host_password,
)

PLUMBING = """processes ddq starts itself (each has its own --help):
  param-server  one shard of a run's parameter server (downpour)
  learner       the central learner of an actor-learner run
  barista serve
                a long-lived Barista over HTTP, for the dummy client or Spark tasks"""


def cmd_param_server(args: argparse.Namespace) -> int:
    from ddq.param_server.server import ShardServer

    logging.basicConfig(level=logging.INFO, format=f"ddq param-server[{args.run}/{args.shard}]: %(message)s")
    if getattr(args, "listen", None):
        return _serve_on_a_host_of_its_own(args)
    if args.settings:  # what the driver resolved: used as it is, no preset applied again
        config = read_settings(args.settings)
    else:
        config = _config_from(args, ("run", "shard", "settings"))
    if not 0 <= args.shard < config.distributed.server.shards:
        raise ValueError(f"--shard {args.shard} is not one of the {config.distributed.server.shards} shards")
    # a shard given a run's settings file is ddq train's own (or one restarted in its place): it waits out an
    # outage of the Redis the driver restarts, where a check now would end it
    url = _take_redis_url(config, args, "param-server", "(ddq train starts Redis and the servers itself)",
                          answering=not args.settings)
    return ShardServer.connect(config, url, args.run, args.shard).serve()


def _serve_on_a_host_of_its_own(args: argparse.Namespace) -> int:
    """`param-server --listen`: the shard serves from a Redis of its own on this host, and reads the run's
    settings from the run's Redis (or the settings file given)."""
    from ddq.param_server.shard_host import serve_with_own_store
    from ddq.preflight import check_listen
    from ddq.processes import exit_on_sigterm

    given, how = given_redis_url(args)
    if not given:  # (no settings file to fall back on, as `_take_redis_url` does: they come from the run's Redis)
        raise ValueError(f"param-server --listen needs the run's Redis URL: ${REDIS_URL_ENV} (as ddq train "
                         "prints it), or --redis-url")
    if PLACEHOLDER in given and host_password() is None:
        raise ValueError(f"the run's Redis URL holds {PLACEHOLDER}: set {PASSWORD_VARIABLE} (or "
                         f"{PASSWORD_FILE_VARIABLE}) on this host to the run's password, as for ddq train")
    check_listen(args.listen)
    warn_of_a_password_in_a_flag("param-server", given, how)
    exit_on_sigterm()  # its own Redis and certificates go with it
    settings = read_settings(args.settings) if args.settings else None
    return serve_with_own_store(executor_url(given), args.run, args.shard, args.listen,
                                getattr(args, "redis_port", None), settings)


def cmd_learner(args: argparse.Namespace) -> int:
    from ddq.learner_server.server import LearnerServer

    logging.basicConfig(level=logging.INFO, format=f"ddq learner[{args.run}]: %(message)s")
    config = read_settings(args.settings)  # what the driver resolved: used as it is
    config.distributed.redis_url = given_redis_url(args)[0] or config.distributed.redis_url
    if not config.distributed.redis_url:
        raise ValueError(f"the learner needs the run's Redis URL in ${REDIS_URL_ENV} (ddq train starts it itself)")
    return LearnerServer(config, config.distributed.redis_url, args.run).serve()


def _config_from(args: argparse.Namespace, own: tuple[str, ...]):
    """The run settings of a command that also takes `ddq train`'s flags."""
    from ddq.core.settings import build_config  # it asks the algorithms, which load torch

    skip = ("func", "config", "command", "started_at", *own)
    return build_config({k: v for k, v in vars(args).items() if k not in skip}, args.config)


# what a Barista or a shard started by hand never reads: the driver's evaluations and services, and
# actor-learner's wiring (groups of `ddq train --help-all`)
UNREAD_BY_HAND = ("evaluation", "actor-learner", "services")
SHARD_LISTEN = ("serve this shard's gradients and weights from a Redis of its own on this host's ADDR (TLS, the "
                "run's password), so that they go over this host's link: for ddq train --shard-hosts by-hand, which "
                "prints this command; the run's settings then come from its Redis")
HAND_STARTED_REDIS = (f"the run's Redis: redis://, rediss://, unix:// (default ${REDIS_URL_ENV}, which keeps a "
                      "password off the command line)")


def given_redis_url(args: argparse.Namespace) -> tuple[str | None, str]:
    """The Redis URL a command was given, and how, for its lines: --redis-url, else $DDQ_REDIS_URL, which
    keeps a password off the command line (and out of `ps`)."""
    flag = getattr(args, "redis_url", None)
    return (flag, "--redis-url") if flag else (os.environ.get(REDIS_URL_ENV), f"${REDIS_URL_ENV}")


def _take_redis_url(config: TrainConfig, args: argparse.Namespace, command: str, whose: str,
                    answering: bool = True) -> str:
    """A process started by hand takes its Redis by `given_redis_url`'s rule, else from its settings file;
    with none, or (`answering`) one where no Redis answers now, it is refused in one line."""
    given, how = given_redis_url(args)
    config.distributed.redis_url = given or config.distributed.redis_url
    if not config.distributed.redis_url:
        raise ValueError(f"{command} needs a Redis URL {whose}: --redis-url, or ${REDIS_URL_ENV}, which keeps a "
                         "password off the command line")
    if given:
        warn_of_a_password_in_a_flag(command, given, how)
    if answering:
        from ddq.preflight import check_redis  # what ddq train checks of a Redis it is given

        check_redis(config.distributed.redis_url, how if given else from_file("redis_url", args.config))
    return config.distributed.redis_url


def warn_of_a_password_in_a_flag(command: str, url: str, how: str) -> None:
    """`ddq COMMAND: warning: ...` where a password came in a flag, which `ps` shows every user."""
    from ddq.preflight import password_in_flag_note

    if note := password_in_flag_note(url, how):
        print(f"ddq {command}: warning: {note}", file=sys.stderr, flush=True)


def cmd_barista_serve(args: argparse.Namespace) -> int:
    from ddq.param_server.overlap import remote_source
    from ddq.workers.barista import Barista
    from ddq.workers.barista_server import BaristaServer

    config = _config_from(args, ("run", "worker", "port", "url_file", "action"))
    url = _take_redis_url(config, args, "barista serve", "(the parameter server's)")
    barista = Barista(config, url, args.run, args.worker, remote_source(config, url, args.run, args.worker))
    server = BaristaServer(barista, args.port)
    print(f"ddq barista: worker {args.worker} of run {args.run} serving on {server.url}", file=sys.stderr, flush=True)
    if args.url_file:
        write_whole(args.url_file, server.url.encode())  # whole: a program may read it the moment it appears
    try:
        server.serve_forever()
    finally:
        server.server_close()
        barista.close()
    return 0


def add_started_by_ddq(commands: Any) -> None:
    """The processes ddq starts itself, which a person may start by hand too: a Barista, a shard, the learner.
    Parsers without a `help`: argparse leaves them out of the list of commands, and PLUMBING names them."""
    barista = commands.add_parser("barista", description="A long-lived worker: `barista serve`.")
    barista_kinds = barista.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = barista_kinds.add_parser("serve", help="serve one worker over HTTP on 127.0.0.1 (JSON: /status, "
                                                   "/step, /shutdown) for the dummy client or Spark tasks")
    serve.add_argument("--config", help="settings file (TOML or JSON)")
    serve.add_argument("--run", default="default", help="run id of the parameter server it works for")
    serve.add_argument("--worker", type=in_range(int, 0), default=0, help="this worker's id")
    serve.add_argument("--port", type=PORT, default=0, help="port on 127.0.0.1 (default: a free one)")
    serve.add_argument("--url-file", help="also write the URL it serves on into this file")
    _hand_started(serve, cmd_barista_serve)

    server = commands.add_parser("param-server",
                             description="A parameter-server shard: applies the gradients workers push to Redis "
                                         "and publishes the weights. `ddq train` starts these itself; run one "
                                         "by hand against any --redis-url. Once the run's control key says stop "
                                         "(SET ddq:RUN:control stop) it applies what workers still send until "
                                         "ddq:RUN:workers_finished is set, or for 60 s, then exits. With --listen "
                                         "it runs on a host of its own, for ddq train --shard-hosts by-hand, which "
                                         "prints the command (DDQ_REDIS_PASSWORD set to ddq train's): it then "
                                         "reads every setting from the run's Redis, so no other flag is needed.")
    server.add_argument("--config", help="settings file (TOML); the env's preset applies first, flags after")
    server.add_argument("--settings", metavar="FILE", help="a run folder's config.json, as ddq train wrote it: "
                                                           "used as it is (only --redis-url applies over it)")
    server.add_argument("--run", default="default", help="run id: the Redis keys live under ddq:RUN:")
    server.add_argument("--shard", type=in_range(int, 0), default=0, help="which shard of --shards this process serves")
    _hand_started(server, cmd_param_server)
    reword(server, "listen", SHARD_LISTEN)
    reword(server, "redis_port", "with --listen, the TLS port of the shard's own Redis (default: a free one)")

    learner = commands.add_parser("learner",
                                  description="The learner of `ddq train --mode actor-learner`: trains on the "
                                              "experience actors send to Redis and publishes the weights. It reads "
                                              "the run's Redis URL from $DDQ_REDIS_URL and exits when the run's "
                                              "control key says stop.")
    learner.add_argument("--settings", metavar="FILE", required=True, help="the run folder's config.json")
    learner.add_argument("--run", required=True, help="run id: the Redis keys live under ddq:RUN:")
    learner.set_defaults(func=cmd_learner)


def _hand_started(parser: argparse.ArgumentParser, command: Any) -> None:
    """The settings a Barista or a shard started by hand reads, its Redis from the flag or $DDQ_REDIS_URL."""
    add_config_flags(parser, leaving_out=UNREAD_BY_HAND)
    reword(parser, "redis_url", HAND_STARTED_REDIS)
    parser.set_defaults(func=command)
