"""The cores a run counts for local[*]: the cgroup files read (pure logic, on a made-up tree), and, in a real
cgroup with a one-CPU quota, the same count as the JVM's and a refused run that would have waited on a slot."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddq.config.cores import cgroup_mounts, cpu_quota, usable_cores

V1_MOUNTS = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / {root}/memory rw,relatime shared:9 - cgroup cgroup rw,memory
"""
V2_MOUNTS = "30 23 0:27 {cg_root} {root}/unified\\040tree rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def proc_files(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo.format(root=tmp_path, cg_root="/"))
    (proc / "cgroup").write_text(cgroup)
    return proc


def write(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_a_v1_quota_is_read_from_the_process_cgroup_and_those_above_it(tmp_path):
    proc = proc_files(tmp_path, V1_MOUNTS, "3:memory:/job\n2:cpu,cpuacct:/job/step\n0::/\n")
    write(tmp_path / "cpu", cpu_cfs_quota_us="-1\n", cpu_cfs_period_us="100000\n")
    write(tmp_path / "cpu/job", cpu_cfs_quota_us="250000\n", cpu_cfs_period_us="100000\n")
    write(tmp_path / "cpu/job/step", cpu_cfs_quota_us="-1\n", cpu_cfs_period_us="100000\n")
    assert cpu_quota(proc) == 2.5  # the job's limit binds its step's processes
    write(tmp_path / "cpu/job/step", cpu_cfs_quota_us="50000\n", cpu_cfs_period_us="100000\n")
    assert cpu_quota(proc) == 0.5 and usable_cores(proc) == 1  # half a CPU's time is still one core to count


def test_a_v2_quota_is_read_under_its_mount_root_and_an_escaped_mount_point(tmp_path):
    proc = proc_files(tmp_path, V2_MOUNTS, "0::/pod/app\n")
    write(tmp_path / "unified tree/pod", cpu_max="150000 100000\n")
    write(tmp_path / "unified tree/pod/app", cpu_max="max 100000\n")
    assert [m.mount_point for m in cgroup_mounts((proc / "mountinfo").read_text())] == [f"{tmp_path}/unified tree"]
    assert cpu_quota(proc) == 1.5 and usable_cores(proc) == min(2, len(os.sched_getaffinity(0)))
    # a container that sees only its own part of the hierarchy: its path lies outside the mount's root
    (proc / "mountinfo").write_text(V2_MOUNTS.format(root=tmp_path, cg_root="/pod"))
    (proc / "cgroup").write_text("0::/\n")
    write(tmp_path / "unified tree", cpu_max="300000 100000\n")
    assert cpu_quota(proc) == 3.0
    for elsewhere in ("/job", "/../pod"):  # a cgroup the mount does not show: none of its quotas is this one's
        (proc / "cgroup").write_text(f"0::{elsewhere}\n")
        assert cpu_quota(proc) is None


def test_no_quota_and_no_cgroup_files_leave_the_cpus_the_process_may_run_on(tmp_path):
    proc = proc_files(tmp_path, V1_MOUNTS, "2:cpu,cpuacct:/\n")
    write(tmp_path / "cpu", cpu_cfs_quota_us="-1\n", cpu_cfs_period_us="100000\n")
    assert cpu_quota(proc) is None and usable_cores(proc) == len(os.sched_getaffinity(0))
    assert cpu_quota(tmp_path / "no-proc") is None


@pytest.fixture
def one_cpu_cgroup():
    """A cgroup v1 cpu hierarchy's child of this machine limited to one CPU's time (made and removed here); a
    process joins it with `sh -c 'echo $$ > cgroup.procs; exec ...'`."""
    mounts = [m for m in cgroup_mounts(Path("/proc/self/mountinfo").read_text()) if m.version == 1]
    if not mounts or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a cgroup v1 cpu hierarchy (this machine's) and 2 cores")
    folder = Path(mounts[0].mount_point, f"ddq-test-{os.getpid()}")
    try:
        folder.mkdir()
        (folder / "cpu.cfs_quota_us").write_text(str(int((folder / "cpu.cfs_period_us").read_text())))
    except OSError as error:
        if folder.exists():
            folder.rmdir()
        pytest.skip(f"cannot make a cgroup here: {error}")
    yield folder
    deadline = time.monotonic() + 20
    while (left := [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # each a process of this test's, which it started in the cgroup
        os.kill(pid, signal.SIGKILL)
    while (folder / "cgroup.procs").read_text().split() and time.monotonic() < deadline + 10:
        time.sleep(0.1)
    folder.rmdir()
    assert not left, f"left running in the cgroup: {left}"


def in_cgroup(folder: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", f'echo $$ > "{folder}/cgroup.procs" && exec "$@"', "sh", *command],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_in_a_one_cpu_cgroup_ddq_counts_the_cores_spark_does_and_refuses_two_workers_on_local_star(one_cpu_cgroup,
                                                                                                     tmp_path):
    java = shutil.which("java", path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin")) or shutil.which("java")
    if java is None:
        pytest.skip("no java: Spark needs one")
    jvm = in_cgroup(one_cpu_cgroup, str(java), "-XshowSettings:system", "-version")
    assert re.search(r"Effective CPU Count: 1\b", jvm.stderr), jvm.stderr  # what local[*] gives the run's Spark
    done = in_cgroup(one_cpu_cgroup, sys.executable, "-m", "ddq", "train", "--mode", "data-parallel", "--workers",
                     "2", "--spark-master", "local[*]", "--env", "CartPole-v1", "--run-dir", str(tmp_path / "run"))
    # it waited on the second slot for Spark's 10 minutes (taking both cores by its affinity)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "ddq: error: --spark-master local[*] offers 1 task slot, and the 2 workers of data-parallel mode start "
        "together, one slot each: give local[2] or more, fewer --workers, or --mode downpour"], done.stderr
    assert not (tmp_path / "run").exists()
