"""The cores this process may use, which Spark's JVM offers local[*]: the CPUs it may run on (taskset, a
cpuset), fewer where a cgroup's CPU quota allows less time (a container's --cpus, a Kubernetes CPU limit).

Java 17 reads the quota of the process's own cgroup, Java 21 (2025's updates) and 24 those above it too:
ddq reads them all, so it never counts more slots than the JVM offers (a barrier stage short of one would
wait 10 minutes), and fewer only where a quota above limits the process all the same."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


def usable_cores(proc: Path = Path("/proc/self")) -> int:
    """The CPUs this process may run on, capped by its CPU quota rounded up (as the JVM's container support
    rounds it: 1.5 CPUs' worth of time is 2 cores), at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota(proc)
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def cpu_quota(proc: Path = Path("/proc/self")) -> float | None:
    """CPUs' worth of time per period that the cgroups holding the process allow it (the least of its own
    cgroup's and those above it, in cgroup v1's cpu hierarchy and in v2's), or None where none is set or
    nothing can be read (not Linux, no cgroup file system)."""
    try:
        mounts, memberships = (proc / "mountinfo").read_text(), (proc / "cgroup").read_text()
    except OSError:
        return None
    quotas = [quota for mount in cgroup_mounts(mounts)
              for folder in _folders(mount, memberships) if (quota := _read_quota(folder, mount.version)) is not None]
    return min(quotas, default=None)


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup file system mounted here: which part of the hierarchy it shows (its root), where, and its
    version (1: a v1 hierarchy holding the `cpu` controller; 2: the unified hierarchy)."""

    root: str
    mount_point: str
    version: int


def cgroup_mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup v1 mounts holding the `cpu` controller and the cgroup v2 mounts, from /proc/PID/mountinfo
    (fields: id, parent, device, root, mount point, options, optional fields, "-", type, source, options)."""
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        kind, _, options = (fields[fields.index("-") + 1:] + ["", "", ""])[:3]
        if kind == "cgroup2" or (kind == "cgroup" and "cpu" in options.split(",")):
            mounts.append(CgroupMount(_unescape(fields[3]), _unescape(fields[4]), 2 if kind == "cgroup2" else 1))
    return mounts


def _folders(mount: CgroupMount, memberships: str) -> list[Path]:
    """The folders, in `mount`, of the process's cgroup and of each one above it (from /proc/PID/cgroup's
    "id:controllers:path" lines), up to the mount point. A cgroup the mount does not show (a path outside its
    root, or one that climbs out with "..") has none; a process at its namespace's root ("/") is at the mount
    point (a container's view of its own part of the hierarchy)."""
    for line in memberships.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if (mount.version == 2 and controllers == "") or (mount.version == 1 and "cpu" in controllers.split(",")):
            cgroup = PurePosixPath(path)
            shown = cgroup.is_relative_to(mount.root) and ".." not in cgroup.parts
            if not shown and path != "/":
                return []
            folder = Path(mount.mount_point, cgroup.relative_to(mount.root) if shown else "")
            return [folder, *[parent for parent in folder.parents if parent.is_relative_to(mount.mount_point)]]
    return []


def _read_quota(folder: Path, version: int) -> float | None:
    """CPUs' worth of time `folder`'s cgroup allows: v2's cpu.max ("max 100000", "150000 100000"), v1's
    cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us; None without one."""
    try:
        if version == 2:
            quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
        else:
            quota, period = ((folder / name).read_text().strip() for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
        return int(quota) / int(period) if quota != "max" and int(quota) > 0 and int(period) > 0 else None
    except (OSError, ValueError):
        return None


def _unescape(field: str) -> str:
    """A mountinfo path field, whose spaces, tabs, newlines and backslashes are octal escapes (\\040)."""
    for code in ("040", "011", "012", "134"):
        field = field.replace(f"\\{code}", chr(int(code, 8)))
    return field
