"""A container's limits as files show them: the cgroup CPU quota, cpuset and memory limit, and the size of ``/dev/shm``.

Read through ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` (cgroup v1, v2 or the hybrid layout of both), each
limit taken as the smallest on the way from this process's cgroup up to the top of the mounted hierarchy; the
``/dev/shm`` size from its mount options. Also the :class:`Reader` of files under a root that
:func:`clsbench.system.container.container_facts` reads every container fact through, and the parsed lines of those
two ``/proc`` files, which the container's detection reads too.

A limit that is not set is recorded as :data:`NO_LIMIT`, a limit that cannot be read with the reason, so "no limit"
and "unknown" differ. Nothing is run and nothing is changed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

NO_LIMIT = "no limit set"
"""The reason recorded for a cgroup limit that is not set (as opposed to one that could not be read)."""

V1_NO_LIMIT_BYTES = 2**60
"""cgroup v1 reports "no memory limit" as the largest page-aligned value of its signed 64-bit counter
(9223372036854771712 with 4 KiB pages). Any limit of an exbibyte or more means none."""


# ----------------------------------------------------------------------------------------------------------
# Reading files under a root


class Reader:
    """Reads files under ``root`` and the given environment; collects the reasons for facts it could not read."""

    def __init__(self, root: str | os.PathLike[str], environ: Mapping[str, str]) -> None:
        self.root = Path(root)
        self.environ = environ
        self.unavailable: dict[str, str] = {}

    def path(self, absolute: str | PurePosixPath) -> Path:
        """The file ``absolute`` (a path inside the machine or container) under the root."""
        return self.root / str(absolute).lstrip("/")

    def text(self, absolute: str | PurePosixPath) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""
        try:
            return self.path(absolute).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def exists(self, absolute: str | PurePosixPath) -> bool:
        """Whether the file or folder ``absolute`` exists under the root (False when it cannot be checked)."""
        try:
            return self.path(absolute).exists()
        except OSError:
            return False

    def missing(self, dotted: str, reason: str) -> None:
        """Record why the fact ``container.<dotted>`` could not be read."""
        self.unavailable[f"container.{dotted}"] = reason


# ----------------------------------------------------------------------------------------------------------
# /proc/self/mountinfo and /proc/self/cgroup


@dataclass(frozen=True)
class Mount:
    """One line of ``/proc/self/mountinfo`` (proc(5)): what is mounted where, from which sub-tree of its source."""

    root: str
    mount_point: str
    fstype: str
    source: str
    super_options: tuple[str, ...]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/self/mountinfo`` text; malformed lines are skipped."""
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        options = tuple(tail[2].split(",")) if len(tail) > 2 else ()
        mounts.append(Mount(_unescape(fields[3]), _unescape(fields[4]), tail[0], _unescape(tail[1]), options))
    return mounts


@dataclass(frozen=True)
class CgroupEntry:
    """One line of ``/proc/self/cgroup``: hierarchy id, its controllers (empty for v2), this process's path."""

    hierarchy: str
    controllers: tuple[str, ...]
    path: str


def parse_proc_cgroup(text: str) -> list[CgroupEntry]:
    """The entries of a ``/proc/self/cgroup`` text; malformed lines are skipped."""
    entries = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            controllers = tuple(c for c in parts[1].split(",") if c)
            entries.append(CgroupEntry(parts[0], controllers, parts[2]))
    return entries


# ----------------------------------------------------------------------------------------------------------
# cgroup limits


def cgroup_limits(reader: Reader, mounts: list[Mount] | None, entries: list[CgroupEntry] | None) -> dict[str, Any]:
    """The layout (v1, v2 or hybrid: v1 controllers beside a v2 mount) and the limits this process is under."""
    keys = ("version", "cpu_quota_cpus", "cpu_period_us", "cpuset_cpus", "cpuset_count", "memory_limit_bytes",
            "memory_high_bytes", "memory_usage_bytes", "cpu_throttled_periods")
    out: dict[str, Any] = dict.fromkeys(keys)
    if mounts is None or entries is None:
        missing = "/proc/self/mountinfo" if mounts is None else "/proc/self/cgroup"
        for key in keys:
            reader.missing(f"cgroup.{key}", f"{missing} unreadable")
        return out
    v1 = [m for m in mounts if m.fstype == "cgroup"]
    v2 = [m for m in mounts if m.fstype == "cgroup2"]
    out["version"] = "hybrid" if v1 and v2 else "v1" if v1 else "v2" if v2 else None
    if out["version"] is None:
        for key in keys:
            reader.missing(f"cgroup.{key}", "no cgroup file system mounted")
        return out
    hierarchy = _Hierarchy(reader, v1, v2, entries)

    cpu = hierarchy.find("cpu")
    if cpu is None:
        for key in ("cpu_quota_cpus", "cpu_period_us", "cpu_throttled_periods"):
            reader.missing(f"cgroup.{key}", "no cgroup with the cpu controller found for this process")
    else:
        _cpu(reader, cpu, out)

    cpuset = hierarchy.find("cpuset")
    cpus = _cpuset(reader, cpuset) if cpuset is not None else None
    if cpus is None:
        reader.missing("cgroup.cpuset_cpus", "no cpuset file found for this process's cgroup")
        reader.missing("cgroup.cpuset_count", "no cpuset file found for this process's cgroup")
    else:
        out["cpuset_cpus"], out["cpuset_count"] = cpus, _count_cpus(cpus)

    memory = hierarchy.find("memory")
    if memory is None:
        for key in ("memory_limit_bytes", "memory_high_bytes", "memory_usage_bytes"):
            reader.missing(f"cgroup.{key}", "no cgroup with the memory controller found for this process")
    else:
        _memory(reader, memory, out)
    return out


@dataclass(frozen=True)
class _Place:
    """Where a controller's files are for this process: the cgroup's folder, the top of the mount, the version."""

    leaf: PurePosixPath
    top: PurePosixPath
    version: int

    def levels(self) -> list[PurePosixPath]:
        """The folder and its parents up to the top of the mounted hierarchy, the folder first."""
        out = [self.leaf]
        if self.top in self.leaf.parents:
            for parent in self.leaf.parents:
                out.append(parent)
                if parent == self.top:
                    break
        return out


class _Hierarchy:
    """Maps a controller to this process's cgroup folder, v1 first (in a hybrid layout controllers live there)."""

    def __init__(self, reader: Reader, v1: list[Mount], v2: list[Mount], entries: list[CgroupEntry]) -> None:
        self.reader, self.v1, self.v2, self.entries = reader, v1, v2, entries

    def find(self, controller: str) -> _Place | None:
        for mount in reversed(self.v1):  # a later mount of the same hierarchy hides an earlier one
            if controller in mount.super_options:
                entry = next((e for e in self.entries if controller in e.controllers), None)
                if entry is not None:
                    return _Place(_folder(mount, entry.path), PurePosixPath(mount.mount_point), 1)
        unified = next((e for e in self.entries if e.hierarchy == "0" and not e.controllers), None)
        if self.v2 and unified is not None:
            mount = self.v2[-1]
            return _Place(_folder(mount, unified.path), PurePosixPath(mount.mount_point), 2)
        return None


def _folder(mount: Mount, path: str) -> PurePosixPath:
    """This process's cgroup folder under ``mount``: its path relative to the part of the hierarchy mounted.

    Without a cgroup namespace a container sees its own cgroup mounted (mount root ``/docker/<id>``) while
    ``/proc/self/cgroup`` names the same full path: the folder is then the mount point itself. A path outside the
    mounted part (seen with nested namespaces) also falls back to the mount point.
    """
    top, process, mounted = PurePosixPath(mount.mount_point), PurePosixPath(path), PurePosixPath(mount.root)
    try:
        relative = process.relative_to(mounted)
    except ValueError:
        return top
    return top / relative if str(relative) != "." else top


def _first_line(reader: Reader, path: PurePosixPath) -> str | None:
    text = reader.text(path)
    return text.strip().splitlines()[0].strip() if text and text.strip() else None


def _cpu_quota(reader: Reader, place: _Place) -> tuple[float, int] | None:
    """The smallest CPU quota on the way up, in CPUs (quota / period), with its period; None when none is set."""
    best: tuple[float, int] | None = None
    seen_file = False
    for level in place.levels():
        if place.version == 2:
            line = _first_line(reader, level / "cpu.max")
            if line is None:
                continue
            seen_file = True
            quota_text, _, period_text = line.partition(" ")
            if quota_text == "max":
                continue
            quota, period = int(quota_text), int(period_text or 100000)
        else:
            quota_line = _first_line(reader, level / "cpu.cfs_quota_us")
            period_line = _first_line(reader, level / "cpu.cfs_period_us")
            if quota_line is None or period_line is None:
                continue
            seen_file = True
            quota, period = int(quota_line), int(period_line)
            if quota < 0:  # -1: no quota at this level
                continue
        cpus = quota / period
        if best is None or cpus < best[0]:
            best = (cpus, period)
    if not seen_file:
        name = "cpu.max" if place.version == 2 else "cpu.cfs_quota_us"
        reader.missing("cgroup.cpu_quota_cpus", f"no {name} from {place.leaf} up to {place.top}")
        reader.missing("cgroup.cpu_period_us", f"no {name} from {place.leaf} up to {place.top}")
    return best


def _throttled(reader: Reader, place: _Place) -> int | None:
    """Periods in which the quota stopped this cgroup, since it started (``nr_throttled`` in ``cpu.stat``)."""
    text = reader.text(place.leaf / "cpu.stat")
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_throttled" and value.strip().isdigit():
            return int(value)
    return None


def _cpuset(reader: Reader, place: _Place) -> str | None:
    """The CPUs this cgroup may run on, from the nearest level that says (``0-3,8``)."""
    names = ("cpuset.cpus.effective", "cpuset.cpus") if place.version == 2 else ("cpuset.effective_cpus", "cpuset.cpus")
    for level in place.levels():
        for name in names:
            line = _first_line(reader, level / name)
            if line:
                return line
    return None


def _count_cpus(cpus: str) -> int | None:
    """How many CPUs a list like ``0-3,8,10-11`` names (None when it is malformed)."""
    count = 0
    for part in cpus.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return None
        count += int(last) - int(first) + 1 if last else 1
    return count


def _cpu(reader: Reader, place: _Place, out: dict[str, Any]) -> None:
    """The CPU quota in CPUs and its period (the smallest on the way up; none set is recorded as no limit, not as
    missing) and the number of periods in which the quota has throttled the cgroup."""
    quota = _cpu_quota(reader, place)
    if quota is not None:
        out["cpu_quota_cpus"], out["cpu_period_us"] = quota
    elif "container.cgroup.cpu_quota_cpus" not in reader.unavailable:
        reader.missing("cgroup.cpu_quota_cpus", NO_LIMIT)
        reader.missing("cgroup.cpu_period_us", NO_LIMIT)
    out["cpu_throttled_periods"] = _throttled(reader, place)
    if out["cpu_throttled_periods"] is None:
        reader.missing("cgroup.cpu_throttled_periods", "no cpu.stat with nr_throttled")


def _memory(reader: Reader, place: _Place, out: dict[str, Any]) -> None:
    """The smallest memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) and ``memory.high`` on the
    way up, and the cgroup's usage now."""
    limit_name = "memory.max" if place.version == 2 else "memory.limit_in_bytes"
    usage_name = "memory.current" if place.version == 2 else "memory.usage_in_bytes"
    limit = _smallest(reader, place, limit_name)
    if limit is _NOT_FOUND:
        reader.missing("cgroup.memory_limit_bytes", f"no {limit_name} from {place.leaf} up to {place.top}")
    else:
        out["memory_limit_bytes"] = limit
        if limit is None:
            reader.missing("cgroup.memory_limit_bytes", NO_LIMIT)
    if place.version == 2:
        high = _smallest(reader, place, "memory.high")
        out["memory_high_bytes"] = None if high is _NOT_FOUND else high
        if out["memory_high_bytes"] is None:
            reader.missing("cgroup.memory_high_bytes", NO_LIMIT if high is None else "no memory.high")
    else:
        reader.missing("cgroup.memory_high_bytes", "cgroup v1 has no memory.high")
    usage = _first_line(reader, place.leaf / usage_name)
    if usage is not None and usage.isdigit():
        out["memory_usage_bytes"] = int(usage)
    else:
        reader.missing("cgroup.memory_usage_bytes", f"no {usage_name} in {place.leaf}")


_NOT_FOUND: Any = object()


def _smallest(reader: Reader, place: _Place, name: str) -> Any:
    """The smallest byte limit in file ``name`` on the way up; None when no level sets one; _NOT_FOUND without
    any such file."""
    best: int | None = None
    seen = False
    for level in place.levels():
        line = _first_line(reader, level / name)
        if line is None:
            continue
        seen = True
        if line == "max" or not line.isdigit() or int(line) >= V1_NO_LIMIT_BYTES:
            continue
        best = int(line) if best is None else min(best, int(line))
    return best if seen else _NOT_FOUND


# ----------------------------------------------------------------------------------------------------------
# /dev/shm


def shm_size(reader: Reader, mounts: list[Mount] | None) -> dict[str, Any]:
    """The size of ``/dev/shm``: the ``size=`` option of its tmpfs mount, else the file system's own size."""
    mount = next((m for m in reversed(mounts or []) if m.mount_point == "/dev/shm"), None)
    if mount is not None:
        for option in mount.super_options:
            if option.startswith("size="):
                size = _parse_size(option[len("size="):])
                if size is not None:
                    return {"size_bytes": size, "source": "mount option"}
    try:
        stats = os.statvfs(reader.path("/dev/shm"))
    except OSError as exc:
        where = ("/proc/self/mountinfo unreadable" if mounts is None else "/dev/shm not mounted" if mount is None
                 else "no size in the mount options of /dev/shm")
        reader.missing("shm.size_bytes", f"{where}, and statvfs failed: {exc.strerror or exc}")
        reader.missing("shm.source", reader.unavailable["container.shm.size_bytes"])
        return {"size_bytes": None, "source": None}
    return {"size_bytes": stats.f_blocks * stats.f_frsize, "source": "statvfs"}


def _parse_size(text: str) -> int | None:
    """tmpfs sizes as mountinfo shows them: ``65536k``; also ``64m``, ``1g`` and plain bytes."""
    match = re.fullmatch(r"(\d+)([kKmMgG]?)", text.strip())
    if match is None:
        return None
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[match.group(2).lower()]
    return int(match.group(1)) * scale
