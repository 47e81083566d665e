"""Checkpoints: everything a resume needs, in a file plain `torch.load` reads.

Holds the settings (`ddq.config.settings_document`), the Q-network's state_dict (module names, for torch users),
the flat online and target weights, the optimizer state, the counters (env
steps, updates, episodes, wall time; epsilon follows from env steps) and the
RNG states. The replay memory goes beside it as `replay.npz`. `best.pt`, in the same format, holds the
weights of the run's best greedy evaluation so far, without RNG states: it is for evaluating and loading
(`ddq evaluate`, `ddq.load`); a run resumes from checkpoint.pt.
Only tensors, numbers, strings, lists and dicts: `torch.load(path)` with its
default `weights_only=True` opens it, and nothing in it is executable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ddq.config import TrainConfig, config_from_document, merge, settings_document
from ddq.core.agent import network_for_states
from ddq.core.learner import Learner
from ddq.models import model_definition
from ddq.models.networks import network_from_definition, with_dueling_head
from ddq.run_folder import CHECKPOINT_NAME, holds_a_run, write_whole

BEST_NAME = "best.pt"  # a checkpoint of the weights of the run's best greedy evaluation so far
REPLAY_NAME = "replay.npz"


def save_checkpoint(path: str | Path, config: TrainConfig, learner: Learner,
                    counters: dict[str, Any], rng_states: dict[str, Any]) -> Path:
    """Written whole or not at all (`ddq.run_folder.write_whole`): a crash or a full disk never leaves half a
    checkpoint."""
    return write_whole(Path(path), checkpoint_writer(config, learner, counters, rng_states))


def checkpoint_writer(config: TrainConfig, learner: Learner, counters: dict[str, Any], rng_states: dict[str, Any],
                      replay_written: int | None = None) -> Callable[[BinaryIO], None]:
    """What `save_checkpoint` writes. `replay_written`: the transitions ever written to the replay memory
    saved with it (REPLAY_NAME), by which a resume knows that file belongs to this checkpoint."""
    payload: dict[str, Any] = {
        "format": "ddq-checkpoint-1",
        "settings": settings_document(config),
        "q_network": {k: v.detach().cpu().clone() for k, v in learner.online.state_dict().items()},
        "learner": learner.state_dict(),
        "counters": counters,
        "rng": rng_states,
    }
    if replay_written is not None:
        payload["replay_written"] = replay_written
    definition = model_definition(config.agent.model)
    if definition is not None:  # so the checkpoint still loads where that file is not
        payload["model_definition"] = definition.read_text()
    return lambda file: torch.save(payload, file)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.exists():
        ended_early = ": the run there ended before it saved one" if path.name == CHECKPOINT_NAME and \
            holds_a_run(path.parent) else ""
        raise FileNotFoundError(f"no checkpoint at {path}{ended_early}")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's reader raises many kinds of error for a file that is not its own
        raise ValueError(f"{path} is not a ddq checkpoint (torch cannot read it: {type(error).__name__})") from error
    if not isinstance(saved, dict) or saved.get("format") != "ddq-checkpoint-1":
        raise ValueError(f"{path} is not a ddq checkpoint")
    return saved


def config_from_checkpoint(saved: dict[str, Any], source: str = "the checkpoint") -> TrainConfig:
    if "settings" not in saved and isinstance(saved.get("config"), dict):  # a bare config dict, no settings document
        return merge(TrainConfig(), saved["config"], source)
    return config_from_document(saved.get("settings"), source)


def q_network_from_checkpoint(saved: dict[str, Any], state_shape: tuple[int, ...], num_actions: int,
                              device: str | torch.device = "cpu", where: str = "the checkpoint") -> torch.nn.Module:
    """The checkpoint's Q-network; `where` (the checkpoint's path) names it in errors, as an embedded model
    definition is checked as strictly as a file given to `ddq train`."""
    config = config_from_checkpoint(saved)
    if "model_definition" in saved:
        source = f"{where}, model {config.agent.model} as kept there"
        net = network_from_definition(saved["model_definition"], source, state_shape, num_actions)
        net = with_dueling_head(net, config.agent.model) if config.agent.dueling else net
    else:
        net = network_for_states(config.agent, state_shape, num_actions)
    net.load_state_dict(saved["q_network"])
    return net.to(device)
