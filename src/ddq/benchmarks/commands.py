"""The `ddq bench` subcommands: each parses its flags here and runs its benchmark module lazily."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ddq.config import MODES
from ddq.gamesim.envs import MINATAR_ACTION_SETS, MINATAR_GAMES
from ddq.processes import exit_on_sigterm


def parse_setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE of `--set`: the value read as TOML would read it (true, 3, 2.5e-4, [64, 64]), else as text."""
    import tomllib

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE, e.g. n_step=3")
    try:
        return key.strip(), tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return key.strip(), value.strip()


def cmd_bench(args: argparse.Namespace) -> int:
    from ddq.benchmarks.serial import run_seeds, serial_table
    from ddq.config import merge
    from ddq.core.settings import build_config

    # Checked alone first, so a bad --set is named as one (not as a flag of that name) before any run.
    merge(build_config({"env": args.env}), dict(args.settings), "--set")
    overrides = {"total_steps": args.total_steps} if args.total_steps else {}
    overrides.update(dict(args.settings))
    overrides.update(mode=args.mode, **({} if args.mode == "serial" else {"workers": args.workers}))
    overrides.update({name: True for name in ("prioritized", "per_actor_epsilon", "sync") if getattr(args, name)})
    if args.target_return is not None:
        overrides["target_return"] = args.target_return
    print(serial_table(args.env, run_seeds(args.env, args.seeds, overrides), dict(args.settings)))
    return 0


def cmd_bench_grad(args: argparse.Namespace) -> int:
    from ddq.benchmarks.grad import measure, table

    rows = []
    for size in ([0] if args.mlp else []) + args.sizes:
        rows.append(measure(size, args.repeats, device=args.device))
        print(f"ddq: measured {f'{size}x{size}' if size else 'the MLP'} on {args.device}", file=sys.stderr)
    print(table(rows, args.device))
    return 0


def cmd_bench_ps(args: argparse.Namespace) -> int:
    from ddq.benchmarks.ps import run_bench, table

    print(table(*run_bench(args.sizes, args.shards, args.repeats, args.seconds, args.redis_url)))
    return 0


def cmd_bench_throughput(args: argparse.Namespace) -> int:
    from ddq.benchmarks.throughput import run_bench, table

    print(table(run_bench(args.workers, args.latency_ms, args.steps_per_worker, args.mode), args.latency_ms, args.mode))
    return 0


def cmd_bench_scaling(args: argparse.Namespace) -> int:
    from ddq.benchmarks.scaling import TASKS, run_bench, table, task_with_target

    exit_on_sigterm()  # a stopped bench still removes its test hosts (--hosts)
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: each distributed run needs at least 1 worker")
    retargeted = {}
    for given in args.target or []:
        task = task_with_target(given)
        if task.env not in args.envs:  # (it was taken, and changed nothing)
            raise ValueError(f"--target {given}: {task.env} is not one of the tasks this bench runs (--envs "
                             f"{' '.join(args.envs)})")
        retargeted[task.env] = task
    tasks = [retargeted.get(env, TASKS[env]) for env in args.envs]
    for task in tasks:  # every task's setup, before the first run
        task.check(args.wall_time_s)
    for task in tasks:
        outcomes = run_bench(task, args.modes, args.workers, args.seeds, args.cores, args.hosts, args.wall_time_s)
        print(table(task, outcomes, args.wall_time_s) + "\n", flush=True)
    return 0


def cmd_bench_shard_links(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ddq.benchmarks.shard_links import run_bench, table

    exit_on_sigterm()  # a stopped bench still removes its test hosts
    outcomes = run_bench(args.seeds, args.mbit, args.env_steps, Path(args.logs))
    print(table(outcomes, args.mbit, args.env_steps))
    return 0


def cmd_bench_grandio(args: argparse.Namespace) -> int:
    from ddq.benchmarks.grandio import run_bench, table
    from ddq.benchmarks.serial import BenchStopped

    for env in args.envs:
        try:
            results = run_bench(env, args.actors, args.seeds, args.target_return, args.step_latency_ms,
                                args.total_steps, args.sync, args.episodes)
        except BenchStopped as stopped:  # Ctrl-C: the table of the runs that finished, and no further env
            if stopped.partial:
                print(table(env, args.target_return, args.step_latency_ms, stopped.partial) + "\n", flush=True)
            raise
        print(table(env, args.target_return, args.step_latency_ms, results) + "\n", flush=True)
    return 0


def cmd_bench_learner(args: argparse.Namespace) -> int:
    from ddq.benchmarks.learner import run_bench, table

    rows = run_bench(args.env, args.devices, args.batch_sizes, args.updates, args.model, args.workers)
    print(table(args.env, rows))
    return 0


def cmd_bench_peers(args: argparse.Namespace) -> int:
    from ddq.benchmarks.peers import run_bench, table

    for env_id in args.envs:
        print(table(env_id, run_bench(env_id, args.seeds, args.peers, args.cleanrl)) + "\n", flush=True)
    return 0


def parse_configuration(text: str) -> tuple[str, dict[str, Any]]:
    """`NAME: KEY=VALUE KEY=VALUE` (or `preset`), a `ddq bench minatar --configs` item, as (name, settings
    over the preset)."""
    name, _, settings = text.partition(":")
    if not name.strip():
        raise ValueError(f"--configs {text!r}: expected NAME or NAME: KEY=VALUE ..., e.g. 'pqn: algo=pqn'")
    return name.strip(), dict(parse_setting(part) for part in settings.split())


def cmd_bench_minatar(args: argparse.Namespace) -> int:
    from ddq.benchmarks.minatar import run_bench, table

    configurations = [parse_configuration(text) for text in args.configs]
    checkpoints = sorted(f for f in args.at if f <= args.frames)
    print(table(run_bench(args.games, configurations, args.seeds, args.frames, args.action_set), checkpoints,
                args.action_set))
    return 0


def cmd_bench_chaos(args: argparse.Namespace) -> int:
    from ddq.benchmarks.chaos import run_bench

    exit_on_sigterm()  # a stopped bench still removes its test hosts
    if args.minutes <= 0 or args.fault_every <= 0:  # before any host is made
        raise ValueError(f"--minutes and --fault-every must be positive, got {args.minutes:g} and "
                         f"{args.fault_every:g}")
    return run_bench(args.minutes, args.fault_every, args.seed, args.modes, args.topology)


def cmd_bench_dashboard(args: argparse.Namespace) -> int:
    from ddq.benchmarks.dashboard import run_bench, table

    rows = run_bench(args.repeats, args.total_steps, args.workers, args.eval_every_s)
    print(table(rows, args.total_steps, args.workers, args.eval_every_s))
    return 0


def add_bench_commands(commands: Any) -> None:
    """Adds `ddq bench KIND` to the `ddq` command's subparsers."""
    bench = commands.add_parser("bench", help="benchmarks: train (training to a target return), snake (the Snake "
                                              "ablation), grad (gradient cost by model size), ps (parameter "
                                              "server), shard-links (shards on hosts of their own), scaling "
                                              "(serial against distributed modes: what more machines buy; alias "
                                              "speedup), throughput (distributed workers on a slept env), learner, "
                                              "grandio, peers, minatar, dashboard (what babysitting costs), chaos "
                                              "(faults across test hosts)")
    kinds = bench.add_subparsers(dest="kind", metavar="KIND", required=True)
    _add_training_benches(kinds)
    _add_cost_benches(kinds)
    _add_study_benches(kinds)
    _add_babysitting_benches(kinds)


def _add_training_benches(kinds: Any) -> None:
    """Runs to a target: `train` (seeds of one mode), the Snake ablation, `scaling` (what more machines buy)."""
    serial = kinds.add_parser("train", aliases=["serial"],
                              help="steps and wall time to a target return over several seeds (serial mode "
                                   "unless --mode names a distributed one)")
    serial.add_argument("--mode", default="serial", choices=MODES, help="training mode (default serial)")
    serial.add_argument("--workers", type=int, default=2, help="workers (actors) of a distributed mode")
    serial.add_argument("--prioritized", action="store_true", help="prioritized replay")
    serial.add_argument("--per-actor-epsilon", action="store_true", help="actor-learner: Ape-X's epsilon per actor")
    serial.add_argument("--sync", action="store_true", help="actor-learner: collective rounds at a Spark barrier")
    serial.add_argument("--env", default="CartPole-v1", help="Gymnasium env id")
    serial.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds to run, one after another")
    serial.add_argument("--target-return", type=float, default=None, help="stop each run once reached")
    serial.add_argument("--total-steps", type=int, default=None, help="step budget per run (default: the preset's)")
    serial.add_argument("--set", dest="settings", metavar="KEY=VALUE", type=parse_setting, action="append",
                        default=[], help="any other setting for every run, as in a config file (n_step=3, "
                                         "dueling=true, hidden=[64, 64]); repeatable")
    serial.set_defaults(func=cmd_bench)
    from ddq.benchmarks.snake import add_command  # the board game's own ablation bench; light: its rows name its flags

    add_command(kinds)
    from ddq.benchmarks.scaling import TASKS, WALL_TIME_S

    scaling = kinds.add_parser("scaling", aliases=["speedup"],
                               help="what more machines buy: time to a target return (Snake: apples after a fixed "
                                    "time), serial on one core against distributed modes on N cores (or N one-core "
                                    "test hosts), seed by seed, with speedup and efficiency")
    scaling.add_argument("--envs", "--env", nargs="+", default=["LunarLander-v3", "MinAtar/Breakout-v1"],
                         choices=list(TASKS), help="tasks (each with its target return; Snake trains with make run's "
                                                   "settings for --wall-time-s and is scored by its greedy apples) "
                                                   "(default: LunarLander-v3 MinAtar/Breakout-v1, with the other "
                                                   "defaults 20 runs of half a minute to 3 minutes each on 2 cores)")
    scaling.add_argument("--modes", nargs="+", default=["data-parallel"], choices=MODES[1:],
                         help="distributed modes to run beside serial (default: data-parallel)")
    scaling.add_argument("--workers", type=int, default=2,
                         help="workers (and cores) of each distributed run (default: %(default)s)")
    scaling.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds (default: 0-4)")
    scaling.add_argument("--hosts", action="store_true",
                         help="run each distributed run on test hosts (root): a Spark cluster of N one-core worker "
                              "hosts and a services host with a core of its own")
    scaling.add_argument("--cores", type=int, nargs="+", metavar="CORE",
                         help="the CPU cores the runs may use (default: the first N, and one more with --hosts): "
                              "serial and the services host get the first, each worker the next")
    scaling.add_argument("--target", nargs="+", action="extend", metavar="ENV=RETURN",
                         help="another target return for a task (default: " + ", ".join(
                             f"{name}={task.target:g}" for name, task in TASKS.items() if not task.fixed_time) + ")")
    scaling.add_argument("--wall-time-s", type=float, default=WALL_TIME_S,
                         help="how long each run of a task without a target trains, from its command's start "
                              "(default: %(default)g)")
    scaling.set_defaults(func=cmd_bench_scaling)


def _add_cost_benches(kinds: Any) -> None:
    """What the parts cost: a gradient by model size, the parameter server, workers on a slept env, the learner."""
    grad = kinds.add_parser("grad", help="the original's cost-vs-image-size table: DeepQ gradient and message "
                                         "costs against bare PyTorch and the original's figures")
    grad.add_argument("--sizes", type=int, nargs="+", default=list(range(16, 129, 8)), help="input sizes")
    grad.add_argument("--repeats", type=int, default=5, help="timed repetitions per figure (medians)")
    grad.add_argument("--device", default="cpu", help="torch device to time on (cpu, cuda)")
    grad.add_argument("--no-mlp", dest="mlp", action="store_false",
                      help="leave out the MLP row (256x256 on CartPole's shapes)")
    grad.set_defaults(func=cmd_bench_grad)
    ps = kinds.add_parser("ps", help="parameter-server pull and push latency and updates/s by model size, "
                                     "beside the original's latency")
    ps.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128], help="DeepQ input sizes")
    ps.add_argument("--shards", type=int, nargs="+", default=[1], help="shard counts to measure each size with")
    ps.add_argument("--repeats", type=int, default=30, help="timed pulls and pushes per size (medians)")
    ps.add_argument("--seconds", type=float, default=3.0, help="length of each throughput window")
    ps.add_argument("--redis-url", help="use this Redis instead of a private one")
    ps.set_defaults(func=cmd_bench_ps)
    throughput = kinds.add_parser("throughput", help="a distributed mode's env steps/s and messages/s by worker "
                                                     "count, on an env whose steps take a fixed (slept) time")
    throughput.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                            help="worker counts (first: base)")
    throughput.add_argument("--mode", default="downpour", choices=MODES[1:], help="distributed mode to measure")
    throughput.add_argument("--latency-ms", type=float, default=10.0, help="time each env step takes")
    throughput.add_argument("--steps-per-worker", type=int, default=1000, help="env steps per worker per run")
    throughput.set_defaults(func=cmd_bench_throughput)
    links = kinds.add_parser("shard-links", help="downpour's updates/s with 2 shards started by hand on one host's "
                                                 "link or each on a host of its own, every shard host's link held "
                                                 "to a rate (test hosts; root)")
    links.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="seeds (default: 0-4)")
    links.add_argument("--mbit", type=float, default=2.0, help="each shard host's link, Mbit/s each way; 0: no "
                                                               "limit (default: %(default)g)")
    links.add_argument("--env-steps", type=int, default=20000, help="each run's budget (default: %(default)d)")
    links.add_argument("--logs", default="shard-links-logs", help="folder for the runs' logs (default: %(default)s)")
    links.set_defaults(func=cmd_bench_shard_links)
    learner = kinds.add_parser("learner", help="the actor-learner learner's updates/s by device and batch size, "
                                               "uniform and prioritized replay")
    learner.add_argument("--env", default="ddq/Snake-v0", help="Gymnasium env id (its frames' layout)")
    learner.add_argument("--devices", nargs="+", default=["cpu"], help="torch devices to measure (cpu, cuda)")
    learner.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128], help="minibatch sizes")
    learner.add_argument("--updates", type=int, default=500, help="timed updates per row")
    learner.add_argument("--model", default=None, help="Q-network (default: the env's preset)")
    learner.add_argument("--workers", type=int, default=2, help="actors (one replay memory each)")
    learner.set_defaults(func=cmd_bench_learner)


def _add_study_benches(kinds: Any) -> None:
    """Other studies done again beside ddq: Grandio's runtime study, the peers' DQNs, the MinAtar paper's."""
    grandio = kinds.add_parser("grandio", aliases=["actors"],
                               help="Grandio's MPI DQN runtime study re-done: serial beside actor-learner with 1 to N "
                                    "actors, for 500 training episodes (or to a target return), side by side")
    grandio.add_argument("--envs", "--env", nargs="+", default=["CartPole-v1", "LunarLander-v3"],
                         help="Gymnasium env ids (LunarLander needs pip install 'ddq[box2d]')")
    grandio.add_argument("--actors", type=int, nargs="*", default=[1, 2, 3, 4, 5],
                         help="actor counts to run (none: serial alone)")
    grandio.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (each runs every configuration)")
    grandio.add_argument("--episodes", type=int, default=500, help="training episodes per run (the study's 500)")
    grandio.add_argument("--target-return", type=float, default=None,
                         help="instead of an episode budget: run to this greedy return and time that")
    grandio.add_argument("--step-latency-ms", type=float, default=0.0, help="time each env step takes (slept)")
    grandio.add_argument("--total-steps", type=int, default=None,
                         help="step budget per run (default: the preset's to a target, 1,000 per episode otherwise)")
    grandio.add_argument("--no-sync", dest="sync", action="store_false",
                         help="leave out the collective rounds (--sync rows, Grandio's MP(N))")
    grandio.set_defaults(func=cmd_bench_grandio)

    peers = kinds.add_parser("peers", help="time to CartPole-v1 475 and LunarLander-v3 200: ddq's defaults beside "
                                           "Stable-Baselines3 (rl-baselines3-zoo settings) and CleanRL's dqn.py, "
                                           "seed by seed (needs pip install 'ddq[peers]' and a CleanRL checkout)")
    peers.add_argument("--envs", nargs="+", default=["CartPole-v1", "LunarLander-v3"],
                       choices=["CartPole-v1", "LunarLander-v3"], help="envs, one table each (default: both)")
    peers.add_argument("--seeds", type=int, nargs="+", default=list(range(10)),
                       help="seeds (each runs every learner; default 0 to 9)")
    peers.add_argument("--peers", nargs="+", default=["ddq", "sb3", "cleanrl"], choices=["ddq", "sb3", "cleanrl"],
                       help="learners to run (sb3: Stable-Baselines3; cleanrl: CleanRL's dqn.py; default: all three)")
    peers.add_argument("--cleanrl", metavar="CHECKOUT", default=None,
                       help="a checkout of CleanRL's repository (git clone https://github.com/vwxyzjn/cleanrl): "
                            "its cleanrl/dqn.py runs as it is there")
    peers.set_defaults(func=cmd_bench_peers)

    minatar = kinds.add_parser("minatar", help="the MinAtar paper's protocol: training returns against frames, "
                                               "averaged over runs, with wall time (needs pip install 'ddq[minatar]')")
    minatar.add_argument("--games", nargs="+", default=["Breakout", "SpaceInvaders", "Asterix"],
                         choices=MINATAR_GAMES, help="games (default: Breakout SpaceInvaders Asterix)")
    minatar.add_argument("--configs", nargs="+", default=["preset", "pqn: algo=pqn"], metavar="'NAME: KEY=VALUE ...'",
                         help="configurations, each its settings over the MinAtar preset (the paper's DQN; algo=pqn "
                              "brings PQN's MinAtar settings), e.g. preset 'pqn-64: algo=pqn num_envs=64' "
                              "(default: preset 'pqn: algo=pqn')")
    minatar.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                         help="seeds (runs per configuration; default 0 1 2)")
    minatar.add_argument("--frames", type=int, default=5_000_000,
                         help="env steps per run (default: the paper's 5M, over two hours a run on one core: with "
                              "the other defaults, 18 runs, a day and more)")
    minatar.add_argument("--at", type=int, nargs="+", default=[500_000, 1_000_000, 2_500_000, 5_000_000],
                         help="frames at which the table reads the returns and the time (default 500k, 1M, 2.5M, 5M)")
    minatar.add_argument("--action-set", default="minimal", choices=list(MINATAR_ACTION_SETS),
                         help="minimal: each game's own actions (the MinAtar/<Game>-v1 ids); full: all 6 actions "
                              "(the -v0 ids), as the MinAtar paper and its repository's examples/dqn.py play")
    minatar.set_defaults(func=cmd_bench_minatar)


def _add_babysitting_benches(kinds: Any) -> None:
    """What watching a run costs (the dashboard), and what faults it survives (chaos)."""


    watch = kinds.add_parser("dashboard", help="downpour throughput bare against with Celery evaluating and the "
                                               "dashboard open in headless Chromium")
    watch.add_argument("--repeats", type=int, default=2, help="pairs of runs (bare, watched), alternating")
    watch.add_argument("--total-steps", type=int, default=200_000, help="env steps per run")
    watch.add_argument("--workers", type=int, default=2, help="downpour workers")
    watch.add_argument("--eval-every-s", type=float, default=30.0, help="seconds between Celery's evaluations")
    watch.set_defaults(func=cmd_bench_dashboard)

    from ddq.benchmarks.chaos import FAULTS, OWNER

    chaos = kinds.add_parser("chaos", help="a run across test hosts (network namespaces of this machine; needs "
                                           "root) under a fault every so often, then Ctrl-C and --resume: checks "
                                           "that nothing is applied twice and nothing is left running")
    chaos.add_argument("--minutes", type=float, default=5.0, help="minutes of faults per mode (default 5)")
    chaos.add_argument("--fault-every", type=float, default=30.0, help="seconds between faults (default 30)")
    chaos.add_argument("--seed", type=int, default=0, help="seed of the faults drawn (default 0)")
    chaos.add_argument("--modes", nargs="+", choices=tuple(OWNER), default=list(OWNER),
                       help=f"distributed modes run (default: {' '.join(OWNER)})")
    chaos.add_argument("--topology", choices=tuple(FAULTS), default="private",
                       help="private: 3 one-core worker hosts and a spare, ddq's private Redis (its faults include "
                            "Redis killed); proxied: 2 two-core worker hosts and a spare, an operator's TLS Redis "
                            "behind the latency proxy (its faults include the proxy killed and a minute of 2 +- 1 "
                            "ms latency)")
    chaos.set_defaults(func=cmd_bench_chaos)
