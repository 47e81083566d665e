"""The algorithms ddq trains with, each one module behind one interface (`base.Algorithm`), named once here
(SB3's small registry): the rest of ddq holds the algorithm the settings name and asks it.

The settings ask the algorithms (their presets, checks and measured choices), so this package loads no
torch: each algorithm's training step (`ddq.core.replay_training`, `ddq.core.pqn`) and network are loaded
when it first trains. `ddq train --help` and a refused setting take a second, not four."""

from __future__ import annotations

from typing import Any

from ddq.core.algorithms.base import AgentParts, Algorithm
from ddq.core.algorithms.dqn import DQN
from ddq.core.algorithms.pqn import PQN

ALGORITHMS: dict[str, type[Algorithm]] = {"dqn": DQN, "pqn": PQN}
DEFAULT = DQN  # what a run trains where nothing asks for another (`default_algorithm`)


def algorithm_for(name: str) -> Algorithm:
    """The algorithm `--algo` names."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algo {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]()


def default_algorithm(preset_key: str, mode: str, named: set[str] | frozenset[str] = frozenset()) -> Algorithm:
    """What a run trains with when no algorithm is named: the env's measured choice (by its preset key), DQN
    where there is none; DQN too where the choice cannot train in `mode` (PQN in actor-learner mode, whose
    learner draws from a replay memory), or where one of the `named` settings is read only by another
    algorithm (a settings document of a run from before PQN names all of DQN's)."""
    for kind in ALGORITHMS.values():
        if preset_key in kind.chosen_for and mode in kind.modes and not unread_by(kind.name, named):
            return kind()
    return DEFAULT()


def unread_by(algo: str, named: set[str] | frozenset[str]) -> dict[str, str]:
    """Of the `named` settings, those that other algorithms read and `algo` does not, each with the first
    registered one that reads it: a run of `algo` would ignore them. An algorithm built on another (C51 on
    DQN) reads what it inherits, so neither refuses the other's settings."""
    own = ALGORITHMS[algo].reads_alone
    unread: dict[str, str] = {}
    for other in ALGORITHMS.values():
        for setting in sorted(named & other.reads_alone - own):
            unread.setdefault(setting, other.name)
    return unread


def algorithm_preset(algorithm: Algorithm, preset_key: str) -> dict[str, Any]:
    """The settings `algorithm` needs over the env's preset, with the algorithm itself."""
    return {"algo": algorithm.name, **algorithm.presets.get(preset_key, {})}


__all__ = ["ALGORITHMS", "DEFAULT", "AgentParts", "Algorithm", "algorithm_for", "algorithm_preset", "unread_by",
           "default_algorithm"]
