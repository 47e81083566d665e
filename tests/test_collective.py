"""The data-parallel collective between two real processes (torch.distributed's gloo over loopback), formed
through its store in a real Redis: the mean, rank 0's weights, a vote, the highest number (where --sync actors
meet), the time a rank spends waiting there for a slower one, nothing listening beyond the address it was
given, gloo's socket reader at SCHED_IDLE, whether ranks share a GPU, and a rank whose peer never comes failing
after the store's timeout instead of waiting forever."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import pytest
import torch

from ddq.spark.tasks import gpu_for
from ddq.transport.collective import Collective, every_rank_has_its_own_gpu
from ddq.transport.keys import RunKeys
from ddq.transport.redis_client import connect
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.stage_store import KEY_LIFETIME_S, StageStore


def listening_addresses() -> list[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) this process listens on."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(fields[1])
    return found


def idle_threads() -> list[str]:
    """The names of this process's threads that run at SCHED_IDLE, "(unnamed)" for one that has the
    process's own name."""
    own = open("/proc/self/comm").read().strip()
    names = [open(f"/proc/self/task/{thread}/comm").read().strip() for thread in os.listdir("/proc/self/task")
             if os.sched_getscheduler(int(thread)) == os.SCHED_IDLE]
    return ["(unnamed)" if name == own else name for name in names]


STRAGGLE_S = 1.0


def _rank(rank: int, url: str, results: multiprocessing.Queue) -> None:
    collective = Collective(rank, 2, "127.0.0.1", StageStore(connect(url), RunKeys("test").stage_store(0), 60.0), 60.0,
                            torch.device("cpu"))
    listening = listening_addresses()
    idle = idle_threads()
    if rank == 1:
        time.sleep(STRAGGLE_S)  # a straggler: rank 0's first all-reduce waits for it
    gradient = collective.average_(torch.full((5,), float(rank + 1)))
    weights = collective.broadcast_(torch.full((3,), float(10 * (rank + 1))))
    votes = (collective.any(rank == 1), collective.any(False), collective.highest(7 + 5 * rank),
             collective.from_rank_zero(3 + rank), collective.totals([rank, 10 + rank]))
    collective.close()
    results.put((rank, gradient.tolist(), weights.tolist(), votes, listening, idle, collective.seconds))


def two_ranks(rank_body, redis_url: str) -> dict:
    """What `rank_body` put in its queue, by rank, for ranks 0 and 1 run as processes of their own."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=rank_body, args=(rank, redis_url, results)) for rank in (0, 1)]
    for process in ranks:
        process.start()
    got = dict((r[0], r[1:]) for r in (results.get(timeout=120) for _ in ranks))
    for process in ranks:
        process.join(60)
        assert process.exitcode == 0
    return got


@pytest.fixture(scope="module")
def redis_url():
    with EmbeddedRedis() as server:
        yield server.url


def test_two_ranks_average_take_rank_zeros_weights_vote_and_agree_on_the_highest_listening_on_loopback_only(
        redis_url):
    got = two_ranks(_rank, redis_url)
    for rank in (0, 1):
        gradient, weights, votes, _, idle, _ = got[rank]
        assert gradient == [1.5] * 5 and weights == [10.0] * 3 and votes == (True, False, 12, 3, [1, 21])
        # gloo's socket reader, the thread its link device starts, gives way to the threads that post its
        # buffers (a one-core host's 4 ms stalls); nothing else of the rank does. Newer torch names the
        # reader; older builds (2.11) leave it the rank's own name.
        assert idle in (["gloo_tcp_loop"], ["(unnamed)"]), idle
    # what rank 1's lateness cost rank 0, counted in its collectives' time; rank 1 found rank 0 waiting
    waited = {rank: got[rank][5] for rank in (0, 1)}
    assert waited[0] >= STRAGGLE_S / 2 and waited[1] < waited[0], waited
    # rank 0 listens (its gloo links) on 127.0.0.1 only: 0100007F in /proc/net/tcp
    listening = got[0][3]
    assert listening and all(address.startswith("0100007F:") for address in listening), listening


def test_a_rank_whose_peer_never_comes_fails_at_the_store_timeout_and_its_keys_expire(redis_url):
    store = StageStore(connect(redis_url), RunKeys("test").stage_store(1), 0.5)
    with pytest.raises(Exception, match="no task of the stage wrote"):
        Collective(0, 2, "127.0.0.1", store, 0.5, torch.device("cpu"))
    store.close()
    client = connect(redis_url)
    keys = client.keys(f"{RunKeys('test').stage_store(1)}:*")  # what rank 0 wrote for its peer: Redis forgets it in a day
    assert keys and all(0 < client.ttl(key) <= KEY_LIFETIME_S for key in keys), keys
    client.close()


def test_ranks_agree_on_nccl_only_when_each_has_a_gpu_of_its_own(redis_url):
    """NCCL refuses two ranks on one GPU, and a rank on a CPU: the ranks learn it through the stage's store,
    the same answer on each, and reduce with gloo instead."""
    answers = {}

    def rank(index: int, gpus: list[str | None], start: int) -> None:
        store = StageStore(connect(redis_url), RunKeys("test").stage_store(start), 30.0)
        answers[start, index] = every_rank_has_its_own_gpu(store, index, len(gpus), gpus[index])
        store.close()

    worlds = [["uuid A", "uuid A"], ["uuid A", "uuid B", "uuid C"], ["uuid A", None], [None, None]]
    for start, gpus in enumerate(worlds, 2):
        threads = [threading.Thread(target=rank, args=(index, gpus, start)) for index in range(len(gpus))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert answers == {(2, 0): False, (2, 1): False, (3, 0): True, (3, 1): True, (3, 2): True,
                       (4, 0): False, (4, 1): False, (5, 0): False, (5, 1): False}


def test_the_ranks_on_one_gpu_machine_take_a_gpu_each():
    """NCCL refuses two ranks of a group on one GPU: each rank takes its turn among the ranks on its host (the
    barrier stage's task addresses), unless Spark assigned its task a GPU (spark.task.resource.gpu.amount)."""
    hosts = ["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.1"]
    assert [gpu_for(rank, hosts, [], 4) for rank in range(5)] == [0, 0, 1, 1, 2]
    assert [gpu_for(rank, ["127.0.0.1"] * 3, [], 2) for rank in range(3)] == [0, 1, 0]  # more ranks than GPUs
    assert gpu_for(4, hosts, ["3"], 4) == 3


def _diverged_rank(rank: int, url: str, results: multiprocessing.Queue) -> None:
    """A rank that read another snapshot than rank 0's: every part of its learner differs."""
    from ddq.core.agent import env_spec, make_learner
    from ddq.core.settings import build_config
    from ddq.workers.data_parallel import take_rank_zeros_state

    config = build_config({"env": "CartPole-v1", "algo": "dqn"})
    spec = env_spec(config.agent)
    learner = make_learner(config.agent, spec.frame_shape, spec.num_actions, torch.device("cpu"))
    learner.flat.data.fill_(rank + 1)
    learner.target_flat.data.fill_(rank + 2)
    for value in learner.optimizer.state.values():
        value.fill_(rank + 3)
    learner.optimizer.steps, learner.updates = 100 + rank, 200 + rank
    collective = Collective(rank, 2, "127.0.0.1", StageStore(connect(url), RunKeys("test").stage_store(1), 60.0), 60.0,
                            torch.device("cpu"))
    returned = take_rank_zeros_state(collective, learner)
    collective.close()
    results.put((rank, returned, learner.updates, learner.optimizer.steps, set(learner.flat.data.tolist()),
                 set(learner.target_flat.data.tolist()),
                 {key: set(value.flatten().tolist()) for key, value in learner.optimizer.state.items()}))


def test_a_stages_ranks_begin_with_rank_zeros_whole_state_though_they_read_different_snapshots(redis_url):
    """Each rank read the newest snapshot on its own, and a start's rank 0 may still be writing its last as the
    next start's ranks read it; weights alone were broadcast, so optimizer state and update counts stayed apart.
    Now rank 0 alone reads it, and every part of its state is broadcast (ranks filled apart here)."""
    got = two_ranks(_diverged_rank, redis_url)
    assert got[0][5], "the optimizer keeps no state: nothing to compare"
    for rank in (0, 1):
        assert got[rank] == (200, 200, 100, {1.0}, {2.0}, {key: {3.0} for key in got[0][5]}), got[rank]
