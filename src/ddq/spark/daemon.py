"""Spark's Python daemon for a local master, with torch and ddq's task code imported once, before it forks.

Spark starts one daemon per executor and forks a Python worker from it for each task slot. pyspark's own
daemon imports only pyspark, so every worker then imported torch and the envs itself (about 1.5 CPU-seconds
each, taken from the cores that train). This one imports them first: a forked worker starts with them
(`spark.python.daemon.module`). Nothing here runs a torch operation, so no thread pool exists to be forked.
A cluster's executors keep pyspark's daemon: ddq reaches them with the job, after their daemon started;
there `warm_workers` imports this module in each worker instead.
"""

from __future__ import annotations

import pyspark.worker  # noqa: F401  (what pyspark's daemon runs in each worker it forks, importing it there)

import ddq.workers.actor  # noqa: F401  (actor-learner's task)
import ddq.workers.barista  # noqa: F401  (torch, the envs, the core: every task)
import ddq.workers.data_parallel  # noqa: F401  (data-parallel's task)

if __name__ == "__main__":
    from pyspark.daemon import manager

    manager()
