"""How many CPUs this process may use: the embedding model's threads and the chunking worker
are sized by it.

``os.cpu_count()`` is the machine's.  A process pinned to fewer (``taskset -c 0``, ``docker
--cpuset-cpus``) or given a CPU quota (``docker --cpus=1``, a Kubernetes limit, systemd's
``CPUQuota=``) runs on less: threads beyond that only take turns, and each turn is throttled.
"""

from __future__ import annotations

import math
import os

#: Where cgroup file systems are mounted (v2: unified; v1: one folder per controller).
_CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct")


def _quota_in(folder: str) -> float | None:
    """The CPUs' worth of time ``folder``'s cgroup allows (``cpu.max`` or ``cpu.cfs_quota_us``)."""
    try:
        with open(os.path.join(folder, "cpu.max"), encoding="ascii") as fh:
            quota, period = [*fh.read().split(), "100000"][:2]
    except (OSError, UnicodeError):
        try:
            with open(os.path.join(folder, "cpu.cfs_quota_us"), encoding="ascii") as fh:
                quota = fh.read().strip()
            with open(os.path.join(folder, "cpu.cfs_period_us"), encoding="ascii") as fh:
                period = fh.read().strip()
        except (OSError, UnicodeError):
            return None
    try:
        allowed, every = int(quota), int(period)
    except ValueError:  # "max": no quota
        return None
    return allowed / every if allowed > 0 and every > 0 else None


def cpu_quota() -> float | None:
    """The tightest CPU quota on this process's cgroup and its parents (1.5 for ``docker
    --cpus=1.5``), or None.  Inside a container the cgroup's own folder is the mount's root."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or not (parts[1] == "" or "cpu" in parts[1].split(",")):
            continue
        path = parts[2].strip("/")
        steps = path.split("/") if path else []
        for depth in range(len(steps), -1, -1):
            for root in _CGROUP_ROOTS:
                quota = _quota_in(os.path.join(root, *steps[:depth]))
                if quota is not None:
                    quotas.append(quota)
    return min(quotas) if quotas else None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), fewer under a CPU quota (rounded up)."""
    try:
        cpus = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = cpu_quota()
    return cpus if quota is None else max(1, min(cpus, math.ceil(quota)))


__all__ = ["cpu_quota", "usable_cpus"]
