"""The `ddq` command: train, dashboard, evaluate, plot, bench, and the parsing of every command's line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ddq.benchmarks.commands import add_bench_commands
from ddq.cli.hand_started import PLUMBING, add_started_by_ddq, given_redis_url, warn_of_a_password_in_a_flag
from ddq.cli.output import reader_proof_output
from ddq.config import REDIS_URL_ENV
from ddq.flags import PORT, add_config_flags, command_parser, in_range, unrecognized
from ddq.preflight import check_redis
from ddq.processes import exit_on_sigterm, process_started_at


def cmd_train(args: argparse.Namespace) -> int:
    from ddq.api import execute, prepare

    cli_values = {k: v for k, v in vars(args).items()
                  if k not in ("func", "config", "resume", "command", "started_at", "solver")}
    config, saved, spark = prepare(cli_values, args.config, args.solver, args.resume)
    try:
        summary, exit_code = execute(config, saved, args.started_at, spark=spark)
    except (ValueError, OSError, RuntimeError) as error:  # said in one line as a refusal is, but it started
        raise FailedOnceStarted(error_text(error)) from error
    # for a person at the end of a run: every worker's row (25 lines each) would push its results off the screen
    print(json.dumps({k: v for k, v in summary.items() if k not in ("config", "workers")}, indent=2))
    if skipped := summary.get("evaluation_points_skipped"):  # a distributed run's workers outran its evaluator
        print(f"ddq: {skipped} of the evaluation points (every {config.run.eval_every:,} env steps) went unplayed: "
              "the workers passed them before the evaluator was free, and it evaluated newer weights instead",
              file=sys.stderr)
    rows = " and each worker's row" if summary.get("workers") else ""
    print(f"ddq: the same summary, with every setting{rows}, is in {Path(str(config.run.run_dir)) / 'summary.json'}",
          file=sys.stderr)
    return exit_code  # 0 only for a run that finished: 1 when it failed, 128+N when a signal stopped it


def cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from ddq.core import checkpoint as ckpt
    from ddq.core.agent import env_spec, resolve_device
    from ddq.core.evaluate import evaluate
    from ddq.core.replay import state_shape
    from ddq.preflight import check_device

    if args.render:  # before the episodes are played, not after
        check_gif_path(args.render)
    check_device(args.device)
    saved = ckpt.load_checkpoint(args.checkpoint)
    config = ckpt.config_from_checkpoint(saved)
    spec = env_spec(config.agent)
    device = resolve_device(args.device)
    net = ckpt.q_network_from_checkpoint(saved, state_shape(spec.frame_shape, config.agent.frame_stack),
                                         spec.num_actions, device, str(args.checkpoint))
    result = evaluate(net, config.agent.env, args.episodes, config.agent.frame_stack, config.agent.env_options,
                       seed=args.seed, epsilon=args.epsilon, device=device)
    report = {"env": config.agent.env, "episodes": args.episodes, "mean_return": result.mean_return,
              "std_return": float(np.std(result.returns)), "returns": result.returns,
              "mean_rewarded_steps": result.mean_rewarded_steps}
    if spec.score.rewarded_steps:  # the env names its score: Snake's apples
        report = {**report, f"mean_{spec.score.name}": result.mean_rewarded_steps,
                  spec.score.name: result.rewarded_steps}
    if result.endings:  # how the episodes ended, where the env says: Snake's walls, body, full board, step limit
        report["endings"] = result.endings
    if args.render:
        from ddq.core.animation import animate_checkpoint

        report["animation"] = str(animate_checkpoint(args.checkpoint, args.render, args.seed, device))
    print(json.dumps(report))
    return 0


def check_gif_path(path: str) -> None:
    """Refuses, in one line, a --render FILE that could not be written as a GIF."""
    if Path(path).suffix.lower() != ".gif":
        raise ValueError(f"--render {path}: the animation is a GIF; give a FILE ending in .gif")
    if not Path(path).resolve().parent.is_dir():
        raise ValueError(f"--render {path}: no folder {Path(path).parent} to write it in")


def cmd_package(args: argparse.Namespace) -> int:
    """Writes what spark-submit needs: ddq.zip (--py-files), ddq_submit.py (the script it runs) and the
    environment archive (--archives), then prints the command."""
    from ddq.shipping import PackagingError, write_package

    if args.no_env and args.env:
        print("ddq package: --env and --no-env contradict each other: give one", file=sys.stderr)
        return 2
    environment = None if args.no_env else Path(args.env or sys.prefix)
    exit_on_sigterm()  # a stopped packing removes its temporary archive too
    try:
        command = write_package(Path(args.folder), environment, args.compress_level)
    except PackagingError as error:
        print(f"ddq package: error: {error}", file=sys.stderr)  # as every refusal's line begins
        return 2
    print(" ".join(command))
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from ddq.dashboard.app import serve

    if args.run_dir:  # a finished run's saved telemetry, served from a private Redis
        from ddq.services.archive import serve_saved_telemetry

        exit_on_sigterm()  # so the private Redis's folder goes too
        with serve_saved_telemetry(Path(args.run_dir)) as saved:
            serve(saved.url, args.run, args.host, args.port, args.url_file)
        return 0
    url, given_as = given_redis_url(args)
    if not url:
        raise ValueError(f"dashboard needs a finished run's folder, or --redis-url (or ${REDIS_URL_ENV}): the "
                         "Redis of a run going on")
    check_redis(url, given_as)
    warn_of_a_password_in_a_flag("dashboard", url, given_as)
    serve(url, args.run, args.host, args.port, args.url_file)
    return 0


def cmd_dummy_client(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.request

    request = (urllib.request.Request(f"{args.url}/status") if args.action == "status" else
               urllib.request.Request(f"{args.url}/{args.action}", method="POST",
                                      data=json.dumps({"steps": args.steps}).encode(),
                                      headers={"Content-Type": "application/json"}))
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:
            print(response.read().decode())
    except urllib.error.HTTPError as error:
        raise ValueError(f"the Barista refused: {error.read().decode()}") from error
    except urllib.error.URLError as error:
        raise RuntimeError(f"no Barista at {args.url}: {error.reason}") from error
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from ddq.models import BUILDERS, model_definition, shipped_models
    from ddq.models.caffe import load_net

    if args.model is None:
        print("builders:  " + ", ".join(BUILDERS))
        print("shipped:   " + ", ".join(shipped_models()))
        return 0
    definition = model_definition(args.model)
    if definition is None:
        raise ValueError(f"{args.model} is a builder: its shape follows the env; give a definition or file")
    imported = load_net(definition)
    network = imported.build()
    print(f"{imported.name}: input {imported.input_blob} {'x'.join(map(str, imported.input_shape))}, "
          f"{imported.num_actions} actions, {sum(p.numel() for p in network.parameters()):,} parameters")
    for role in ("input", "q-network", "target-network", "loss"):
        names = [name for name, r in imported.roles.items() if r == role]
        if names:
            print(f"  {role:15s} {', '.join(names)}")
    print(network)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from ddq.services.plot import plot_run

    if not (Path(args.run_dir) / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"{args.run_dir} holds no run's metrics.jsonl: give a run's folder (its --run-dir)")
    print(plot_run(args.run_dir, args.output))
    return 0


EPILOG = f"{PLUMBING}\n\nGive --debug (anywhere) to see the traceback of an error."


def build_parser(full_help: bool = False) -> argparse.ArgumentParser:
    """The `ddq` command line; `full_help`: `ddq train --help` lists every setting, not the common ones."""
    parser = argparse.ArgumentParser(prog="ddq", description="Distributed Deep Q-learning.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_train(commands, full_help)
    add_started_by_ddq(commands)
    _add_dashboard(commands)
    _add_tools(commands)
    add_bench_commands(commands)
    describe_commands(parser)
    return parser


def command_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """Every command under `parser`, its subcommands too: (its words, as typed after `parser`'s, its parser,
    the line its parent's list gives it)."""
    for action in parser._actions:  # argparse keeps its subcommands only in these private fields
        if isinstance(action, argparse._SubParsersAction):
            said = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, command in action.choices.items():
                yield name, command, said.get(name, "")
                yield from ((f"{name} {words}", sub, line) for words, sub, line in command_parsers(command))


def describe_commands(parser: argparse.ArgumentParser) -> None:
    """Opens each command's own --help with the line its parent's list gives it, where it has no description
    of its own: argparse shows a command's `help` only in that list, so `ddq package --help` began with its
    usage and "folder: where to write them"."""
    for _, command, line in command_parsers(parser):
        if command.description is None and line:
            command.description = f"{line[0].upper()}{line[1:]}."


def _add_train(commands: Any, full_help: bool) -> None:
    train = commands.add_parser("train",
                                help="train a DQN agent (serial; downpour, actor-learner or data-parallel on Spark)",
                                description="Train a DQN agent. Settings: defaults < the env's preset < its "
                                            "algorithm's preset < --config FILE (TOML) < --solver PROTOTXT < "
                                            "flags; a resumed run's settings stand for the first three.",
                                epilog=None if full_help else "These are the settings people change most; "
                                "`ddq train --help-all` lists every one of them, grouped, with its default.")
    train.add_argument("--help-all", action="store_true", help="list every setting, grouped, and exit")
    train.add_argument("--config", help="TOML file of settings (flags override it)")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR (or in its "
                       "checkpoint.pt), where it trains on")
    train.add_argument("--solver", metavar="PROTOTXT", help="Caffe solver file whose settings become the "
                                                            "optimizer's (flags still override them)")
    add_config_flags(train, brief=not full_help)
    train.set_defaults(func=cmd_train)


def _add_dashboard(commands: Any) -> None:
    dashboard = commands.add_parser(
        "dashboard", help="serve a run's live dashboard and JSON API (read-only) from its Redis",
        description="Serve the babysitting dashboard of a run that is going or finished: one page of live "
                    "charts, and the JSON API behind it (GET /api lists it). `ddq train` starts one itself "
                    "and prints its URL; this serves one for any run whose Redis you can reach, or for a "
                    "finished run from its folder (`ddq dashboard runs/snake`).")
    dashboard.add_argument("run_dir", nargs="?", metavar="RUN_DIR",
                           help="a finished distributed run's folder: serves the telemetry saved there at its end")
    dashboard.add_argument("--redis-url", help=f"the run's Redis (redis://, rediss://, unix://; default "
                                               f"${REDIS_URL_ENV}, which keeps a password off the command line)")
    dashboard.add_argument("--run", help="run id (as `ddq train` printed it; default: the only run there)")
    dashboard.add_argument("--host", default="127.0.0.1",
                           help="address to bind (default 127.0.0.1); beyond loopback, such as 0.0.0.0, it serves "
                                "HTTPS only, and every request needs a token shown once on your terminal")
    dashboard.add_argument("--port", type=PORT, default=0, help="port (default: a free one)")
    dashboard.add_argument("--url-file", help="also write the URL it serves on into this file")
    dashboard.set_defaults(func=cmd_dashboard)


def _add_tools(commands: Any) -> None:
    """The commands for a run's results and its parts: the dummy client, evaluate, models, package, plot."""
    dummy = commands.add_parser("dummy-client", help="drive a Barista by hand: step, status, shutdown")
    dummy.add_argument("url", help="the Barista's URL, as `barista serve` printed it")
    dummy.add_argument("action", choices=("step", "status", "shutdown"),
                       help="step: play --steps env steps; status: the Barista's counters; shutdown: end it")
    dummy.add_argument("--steps", type=in_range(int, 1), default=100, help="env steps for `step` (default 100)")
    dummy.add_argument("--timeout", type=float, default=600, help="seconds to wait for the answer")
    dummy.set_defaults(func=cmd_dummy_client)


    ev = commands.add_parser("evaluate", help="greedy mean return of a checkpoint, as JSON")
    ev.add_argument("checkpoint", help="checkpoint file, or run folder (its checkpoint.pt, the run's newest "
                                       "weights; RUN_DIR/best.pt holds its best evaluation's)")
    ev.add_argument("--episodes", type=in_range(int, 1), default=10, help="episodes to play (default 10)")
    ev.add_argument("--seed", type=int, default=None, help="seed of the first evaluation episode (a run's eval "
                    "points carry theirs in metrics.jsonl: with that evaluation's episodes and epsilon, this plays "
                    "them again; default: a fresh seed each call)")
    ev.add_argument("--epsilon", type=in_range(float, 0.0, 1.0), default=0.0,
                    help="exploration rate while evaluating (default 0: greedy)")
    ev.add_argument("--device", default="cpu", help="torch device (default cpu)")
    ev.add_argument("--render", metavar="FILE", help="also write a GIF of one greedy episode to FILE")
    ev.set_defaults(func=cmd_evaluate)

    models = commands.add_parser("models", help="list the Q-networks ddq ships, or show one (a Caffe "
                                                  "definition: its layers, roles and parameter count)")
    models.add_argument("model", nargs="?", help="shipped name (deepq16, ...) or .prototxt file")
    models.set_defaults(func=cmd_models)

    package = commands.add_parser("package", help="write what spark-submit needs: ddq.zip (--py-files), "
                                                    "ddq_submit.py and a Python environment archive (--archives)")
    package.add_argument("folder", help="the folder to write ddq.zip, ddq_submit.py and ddq-env.tar.gz into")
    package.add_argument("--env", metavar="PREFIX", help="the virtual environment, with ddq's dependencies, "
                                                         "that executors run (default: this one)")
    package.add_argument("--no-env", action="store_true", help="no environment archive: the executors' hosts "
                                                               "have a Python with ddq's dependencies")
    package.add_argument("--compress-level", type=int, default=4, choices=range(10), metavar="0-9",
                         help="gzip level of the archive (default 4; 1 writes faster, larger)")
    package.set_defaults(func=cmd_package)

    plot = commands.add_parser("plot", help="write a run's learning curve as a PNG")
    plot.add_argument("run_dir", help="run folder holding metrics.jsonl")
    plot.add_argument("--output", help="PNG path (default RUN_DIR/learning_curve.png)")
    plot.set_defaults(func=cmd_plot)


def main(argv: list[str] | None = None) -> int:
    """Runs one `ddq` command. A mistake the user can fix (a setting, a file, an unreachable server) is
    one line and exit 2; a run that failed once started, and anything else, one line and exit 1; `--debug`
    shows the traceback instead."""
    started_at = process_started_at()  # the process's start: time_to_target_s and budgets count from here
    argv = list(sys.argv[1:] if argv is None else argv)
    debug, full_help = "--debug" in argv, "--help-all" in argv
    argv = ["--help" if arg == "--help-all" else arg for arg in argv if arg != "--debug"]
    parser = build_parser(full_help)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse's own words, from the command's parser (its usage line), and the flag meant
        command = command_parser(parser, argv)
        command.error(unrecognized(unknown, command))
    args.started_at = started_at
    for not_a_setting in ("debug", "help_all"):
        vars(args).pop(not_a_setting, None)
    with reader_proof_output():  # a reader that leaves first (`| tee`, `| head`) stops nothing
        return _run(args, debug)


def _run(args: argparse.Namespace, debug: bool) -> int:
    """The command `args` names, its errors said in one line (`main`)."""
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("ddq: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            raise
        user_error = isinstance(error, (ValueError, FileNotFoundError, RuntimeError, OSError, FailedOnceStarted))
        kind = "" if user_error else f"{type(error).__name__}: "
        text = (error_text(error).strip().splitlines() or [""])[0]
        print(f"ddq: error: {kind}{text}" + ("" if user_error else " (run again with --debug for the traceback)"),
              file=sys.stderr)
        return 2 if user_error and not isinstance(error, FailedOnceStarted) else 1


class FailedOnceStarted(Exception):
    """A run that failed after it started (its disk filled, say): exit 1, where a command refused before
    anything started exits 2, so that a script can tell settings to fix from a run to resume."""


def error_text(error: Exception) -> str:
    """The error's text; its type's name where making that text fails (py4j asks the JVM, which may be gone)."""
    try:
        return str(error)
    except Exception:
        return type(error).__name__
