"""Containers: whether clsbench runs in one, which image, the limits it sets, and the classic ways they break a run.

A number measured in a container depends on the image (its torch, CUDA and cuDNN) and on the limits the runtime
imposes: a CPU quota the kernel enforces every period, a memory limit the OOM killer enforces, a ``/dev/shm`` that
Docker makes 64 MB by default, GPUs that are visible only when the container toolkit (or a CDI device) passes them
in. This module reads those facts from files, so that every result can say where it came from and so that the
pre-flight checks can name the fix before a run fails.

Everything is read under ``root`` (``/`` on a real machine; a fixture tree in the tests) and from ``environ``
(``os.environ`` unless given), nothing is run and nothing is changed:

* **Markers**: ``/run/.containerenv`` (Podman, and Buildah during builds; it names the image only for
  ``--privileged`` containers), ``/.dockerenv`` (Docker), the ``container`` variable (Podman, LXC,
  systemd-nspawn; systemd copies it to ``/run/systemd/container``), Apptainer/Singularity variables and
  ``/.singularity.d``, Kubernetes' service variables and service-account folder, and runtime names in this
  process's cgroup paths (cgroup v1 without a cgroup namespace shows ``/docker/<id>``, ``/libpod_parent/...``,
  ``/kubepods/...``). A virtual machine built from a Docker image keeps ``/.dockerenv`` and is then reported as
  Docker: the markers found are recorded, so a reader can judge.
* **The image**: its name and id where the runtime exposes them (Podman's ``/run/.containerenv``, Apptainer's
  variables, or ``CLSBENCH_IMAGE`` set by whoever starts the container: Docker exposes neither), the labels that
  clsbench's own Containerfile writes to ``/etc/clsbench/image.json`` (labels themselves are not visible inside
  a container), and the variables the common PyTorch and CUDA images set (``NVIDIA_PYTORCH_VERSION`` in NGC's,
  ``PYTORCH_VERSION`` in pytorch/pytorch, ``CUDA_VERSION`` ...).
* **Limits**: the cgroup (v1, v2 or both) CPU quota, cpuset, memory limit and usage, found through
  ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` and taken as the smallest limit on the way from this
  process's cgroup up to the top of the mounted hierarchy; the ``/dev/shm`` size from its mount options.
* **GPUs through the toolkit**: ``/dev/nvidia<N>`` device nodes, ``NVIDIA_VISIBLE_DEVICES`` and
  ``NVIDIA_DRIVER_CAPABILITIES``, the driver version and GPU list under ``/proc/driver/nvidia``, and whether
  the driver's ``libcuda.so.1`` was mounted in.

As in :mod:`clsbench.results.environment`, every fact that is ``None`` has its dotted path and the reason under
``unavailable``: a limit that is not set says :data:`NO_LIMIT`, so "no limit" and "unknown" differ.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from clsbench.errors import InvalidInputError

__all__ = [
    "CLSBENCH_IMAGE_ENV",
    "DEFAULT_LOADER_BATCH_SIZE",
    "IMAGE_LABELS_FILE",
    "KEY_FIELDS",
    "MEMORY_HEADROOM_BYTES",
    "NO_LIMIT",
    "PYTORCH_DEFAULT_PREFETCH",
    "container_checks",
    "container_facts",
    "container_lines",
    "loader_batch_bytes",
    "shm_bytes_needed",
]

KEY_FIELDS: tuple[str, ...] = (
    "container.runtime",
    "container.image.name",
    "container.image.id",
    "container.image.base",
)
"""Dotted paths, under the environment, of the container facts that make two results not comparable.

A different runtime (or none: the value is ``None`` outside a container, as in files written before these facts
existed, so those still compare and resume) and a different image or base image mean a different software stack;
torch, CUDA and cuDNN differences are caught by the environment's own key fields, the rest of an image (its C
library, its other libraries) only here. Limits are not listed: they are settings of one run, reported by the
pre-flight checks, and change from one ``docker run`` to the next."""

IMAGE_LABELS_FILE = "etc/clsbench/image.json"
"""Where clsbench's Containerfile records what the image is (relative to the root): the labels themselves live in
the image's configuration, which a process inside the container cannot read."""

NO_LIMIT = "no limit set"
"""The reason recorded for a cgroup limit that is not set (as opposed to one that could not be read)."""

NOT_IN_A_CONTAINER = "not in a container"
"""The reason recorded for the image's facts (and the container id) outside a container."""

CLSBENCH_IMAGE_ENV = "CLSBENCH_IMAGE"
"""Set it when starting a container (``docker run -e CLSBENCH_IMAGE=clsbench:2025-06 ...``) to record the image's
name where the runtime does not expose it (Docker never does)."""

BASE_IMAGE_ENV_VARS: tuple[str, ...] = (
    "NVIDIA_PYTORCH_VERSION",
    "NVIDIA_BUILD_ID",
    "PYTORCH_VERSION",
    "PYTORCH_BUILD_VERSION",
    "CUDA_VERSION",
    "CUDNN_VERSION",
    "NV_CUDNN_VERSION",
    "NCCL_VERSION",
)
"""Variables the common PyTorch and CUDA images set, recorded when present: NGC's PyTorch images set
``NVIDIA_PYTORCH_VERSION`` (their release, e.g. ``25.04``, the tag of ``nvcr.io/nvidia/pytorch:25.04-py3``) and
``NVIDIA_BUILD_ID``; the official pytorch/pytorch images set ``PYTORCH_VERSION``; NVIDIA's CUDA images set
``CUDA_VERSION`` and ``NV_CUDNN_VERSION``. They name the image where nothing else does."""

PYTORCH_DEFAULT_PREFETCH = 2
"""``torch.utils.data.DataLoader``'s default ``prefetch_factor``: each worker keeps up to two finished batches
waiting for the training process."""

DEFAULT_LOADER_BATCH_SIZE = 32
"""The batch assumed for the ``/dev/shm`` estimate when the caller gives none: the seed suite's training batch."""

# One image as a cpu-pipeline worker hands it over: 3 x 224 x 224 (most torchvision models' input), float32 when
# normalised in the worker, uint8 when normalised on the device (--normalize-on device).
IMAGE_SIZE = 224
CHANNELS = 3
FLOAT32_BYTES = 4
UINT8_BYTES = 1

MEMORY_HEADROOM_BYTES = 2 * 2**30
"""What the training process needs in RAM besides an in-memory dataset: Python with torch and its libraries loaded,
the model, and batches in flight. The quick suite's CPU workers peaked at 444-878 MiB resident (ResNet-18 training
at batch 8 the most); a CUDA context adds a few hundred MiB more. Two GiB leaves room for that, not for a second
copy of the dataset."""

V1_NO_LIMIT_BYTES = 2**60
"""cgroup v1 reports "no memory limit" as the largest page-aligned value of its signed 64-bit counter
(9223372036854771712 with 4 KiB pages). Any limit of an exbibyte or more means none."""

SHM_SUGGESTION_STEP_BYTES = 2**30
"""``--shm-size`` suggestions are rounded up to whole GiB, with room for one more batch per worker."""

_DEVICE_NODE = re.compile(r"nvidia(\d+)")
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
_CGROUP_RUNTIMES: tuple[tuple[str, str], ...] = (
    ("libpod", "podman"),
    ("docker", "docker"),
    ("kubepods", "kubernetes"),
    ("cri-containerd", "containerd"),
    ("containerd", "containerd"),
    ("lxc", "lxc"),
    ("machine.slice/systemd-nspawn", "systemd-nspawn"),
)
"""Runtime names as they appear in cgroup paths, most specific first (Kubernetes pods also show ``containerd``)."""

_LIBCUDA_DIRS: tuple[str, ...] = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/nvidia/lib64",
    "usr/local/nvidia/lib",
    "usr/lib/wsl/lib",
)
"""Where the NVIDIA Container Toolkit and CDI mount the driver's ``libcuda.so.1`` (Debian/Ubuntu, RHEL-like and
the older ``/usr/local/nvidia`` layout that pytorch/pytorch's ``LD_LIBRARY_PATH`` still names; WSL's own place)."""

_NOT_AVAILABLE = "n/a"


# ----------------------------------------------------------------------------------------------------------
# Reading files under a root


class _Unavailable(Exception):
    """A fact that cannot be read, with the reason to record."""


class _Reader:
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
        try:
            return self.path(absolute).exists()
        except OSError:
            return False

    def missing(self, dotted: str, reason: str) -> None:
        self.unavailable[f"container.{dotted}"] = reason


# ----------------------------------------------------------------------------------------------------------
# /proc/self/mountinfo and /proc/self/cgroup


@dataclass(frozen=True)
class _Mount:
    """One line of ``/proc/self/mountinfo`` (proc(5)): what is mounted where, from which sub-tree of its source."""

    root: str
    mount_point: str
    fstype: str
    source: str
    super_options: tuple[str, ...]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _parse_mountinfo(text: str) -> list[_Mount]:
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        options = tuple(tail[2].split(",")) if len(tail) > 2 else ()
        mounts.append(_Mount(_unescape(fields[3]), _unescape(fields[4]), tail[0], _unescape(tail[1]), options))
    return mounts


@dataclass(frozen=True)
class _CgroupEntry:
    """One line of ``/proc/self/cgroup``: hierarchy id, its controllers (empty for v2), this process's path."""

    hierarchy: str
    controllers: tuple[str, ...]
    path: str


def _parse_proc_cgroup(text: str) -> list[_CgroupEntry]:
    entries = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            controllers = tuple(c for c in parts[1].split(",") if c)
            entries.append(_CgroupEntry(parts[0], controllers, parts[2]))
    return entries


# ----------------------------------------------------------------------------------------------------------
# The facts


def container_facts(root: str | os.PathLike[str] = "/", environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Reads whether this process runs in a container, which image, the limits it is under and the GPUs it sees.

    Never raises for a fact it cannot read (its value becomes ``None`` and ``unavailable`` says why) and changes
    nothing. Fast: a few small files under ``/proc``, ``/sys/fs/cgroup``, ``/run`` and ``/dev``.

    Args:
        root: the file system to read, ``/`` on a real machine; the tests point it at fixture trees.
        environ: the process environment to read (default: ``os.environ``).

    Returns:
        A JSON-serialisable dict meant for ``environment["container"]``: ``in_container``, ``runtime``,
        ``markers``, ``id``, ``image`` (``name``, ``id``, ``source``, ``labels``, ``base_env``), ``cgroup``
        (``version``, ``cpu_quota_cpus``, ``cpu_period_us``, ``cpuset_cpus``, ``cpuset_count``,
        ``memory_limit_bytes``, ``memory_high_bytes``, ``memory_usage_bytes``, ``cpu_throttled_periods``),
        ``shm`` (``size_bytes``, ``source``), ``gpu`` (``device_nodes``, ``count``, ``nvidia_visible_devices``,
        ``nvidia_driver_capabilities``, ``driver_version``, ``libcuda``, ``gpus``) and ``unavailable``, a map
        from the dotted path of each fact that could not be read (``container.cgroup.memory_limit_bytes``) to
        the reason.
    """
    reader = _Reader(root, os.environ if environ is None else environ)
    mountinfo_text = reader.text("/proc/self/mountinfo")
    mounts = _parse_mountinfo(mountinfo_text) if mountinfo_text is not None else None
    cgroup_text = reader.text("/proc/self/cgroup")
    entries = _parse_proc_cgroup(cgroup_text) if cgroup_text is not None else None

    facts: dict[str, Any] = {"in_container": None, "runtime": None, "markers": [], "id": None}
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("detection", lambda: _detect(reader, mounts, entries)),
        ("image", lambda: _image(reader, bool(facts["in_container"]))),
        ("cgroup", lambda: _cgroup(reader, mounts, entries)),
        ("shm", lambda: _shm(reader, mounts)),
        ("gpu", lambda: _gpu(reader)),
    ]
    for name, collect in sections:
        try:
            value = collect()
        except Exception as exc:  # a bug here must cost one section, never the benchmark run
            reader.missing(name, f"collection failed: {type(exc).__name__}: {exc}")
            value = {}
        if name == "detection":
            facts.update(value)
        else:
            facts[name] = value
    for path in _none_leaves(facts, "container."):
        # Every None carries its reason, as in the environment; a reader that forgot one is a bug the tests catch.
        reader.unavailable.setdefault(path, "not reported")
    facts["unavailable"] = dict(sorted(reader.unavailable.items()))
    return facts


def _none_leaves(node: Any, prefix: str) -> list[str]:
    """Dotted paths of the None values in nested dicts (lists are leaves, as in the environment)."""
    if isinstance(node, dict):
        return [path for key, value in node.items() for path in _none_leaves(value, f"{prefix}{key}.")]
    return [prefix[:-1]] if node is None else []


def _detect(
    reader: _Reader, mounts: list[_Mount] | None, entries: list[_CgroupEntry] | None
) -> dict[str, Any]:
    """Container markers, the runtime they point to (most specific first) and the container's id when shown."""
    found, container_id = _file_and_variable_markers(reader)
    cgroup = _cgroup_marker(entries)
    if cgroup is not None:
        needle, runtime, cgroup_id = cgroup
        found.append((f"cgroup path names {needle}", runtime))
        if container_id is None:
            container_id = cgroup_id
    if reader.environ.get("KUBERNETES_SERVICE_HOST") or reader.exists("/var/run/secrets/kubernetes.io"):
        found.append(("kubernetes", "kubernetes"))
    markers = [marker for marker, _ in found]
    runtimes = [runtime for _, runtime in found]

    if container_id is None and markers:
        container_id = _id_from_mounts(mounts or [])
    if not markers:
        reader.missing("runtime", "no container marker found")
        reader.missing("id", NOT_IN_A_CONTAINER)
    elif container_id is None:
        reader.missing("id", "the runtime shows no container id here")
    # Ordered by what names the runtime best: Podman's own file, then the container variable, then the rest.
    runtime = runtimes[0] if runtimes else None
    return {"in_container": bool(markers), "runtime": runtime, "markers": markers, "id": container_id}


def _file_and_variable_markers(reader: _Reader) -> tuple[list[tuple[str, str]], str | None]:
    """The markers runtimes leave in files and environment variables, each as ``(marker, runtime)``, in the order
    :func:`_detect` ranks them: Podman's ``/run/.containerenv``, the ``container`` variable, systemd's file,
    Apptainer's and Singularity's variables and folder, then Docker's ``/.dockerenv``.

    Returns:
        ``(markers, container id)``: the id from ``/run/.containerenv`` when it shows one (privileged Podman
        containers only), else None.
    """
    found: list[tuple[str, str]] = []
    container_id: str | None = None

    containerenv = reader.text("/run/.containerenv")
    if containerenv is not None:
        fields = _containerenv(containerenv)
        engine = fields.get("engine", "")
        found.append(("/run/.containerenv", engine.split("-", 1)[0] if engine else "podman"))
        container_id = fields.get("id") or None

    variable = reader.environ.get("container", "").strip()
    if variable:
        found.append((f"container={variable}", variable))
    systemd_file = reader.text("/run/systemd/container")
    if systemd_file is not None and systemd_file.strip():
        found.append((f"/run/systemd/container={systemd_file.strip()}", systemd_file.strip()))

    for name in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
        if reader.environ.get(name):
            found.append((name, name.split("_", 1)[0].lower()))
    if reader.exists("/.singularity.d"):
        found.append(("/.singularity.d", "apptainer"))

    if reader.exists("/.dockerenv"):
        found.append(("/.dockerenv", "docker"))
    return found, container_id


def _cgroup_marker(entries: list[_CgroupEntry] | None) -> tuple[str, str, str | None] | None:
    """The first ``/proc/self/cgroup`` line whose path names a runtime (one line says it; the others repeat it).

    Returns:
        ``(the name found in the path, its runtime, the container id in that path or None)``, or None when no
        line names a runtime.
    """
    for entry in entries or []:
        for needle, runtime in _CGROUP_RUNTIMES:
            if needle in entry.path:
                match = _CONTAINER_ID.search(entry.path)
                return needle, runtime, match.group(1) if match else None
    return None


def _containerenv(text: str) -> dict[str, str]:
    """``key="value"`` lines of Podman's ``/run/.containerenv`` (empty unless the container is privileged)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def _id_from_mounts(mounts: list[_Mount]) -> str | None:
    """Docker bind-mounts ``/etc/hostname`` and friends from ``.../containers/<id>/``; the id is in the root."""
    for mount in mounts:
        if "/containers/" in mount.root:
            match = _CONTAINER_ID.search(mount.root)
            if match:
                return match.group(1)
    return None


def _image(reader: _Reader, inside: bool) -> dict[str, Any]:
    """The image's name and id where exposed, clsbench's label file, and the base image's own variables.

    Outside a container there is no image: its facts are None for that reason.
    """
    name = image_id = source = None
    containerenv = reader.text("/run/.containerenv")
    fields = _containerenv(containerenv) if containerenv is not None else {}
    if fields.get("image"):
        name, image_id, source = fields["image"], fields.get("imageid") or None, "/run/.containerenv"
    else:
        for variable in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
            if reader.environ.get(variable):
                name, source = reader.environ[variable], variable
                break
    stated = reader.environ.get(CLSBENCH_IMAGE_ENV, "").strip()
    if name is None and stated:
        name, source = stated, CLSBENCH_IMAGE_ENV
    if name is None:
        why = "the runtime does not expose it (Podman only to --privileged containers, Docker never)"
        why = f"{why}; set {CLSBENCH_IMAGE_ENV} when starting the container" if inside else NOT_IN_A_CONTAINER
        reader.missing("image.name", why)
        reader.missing("image.source", why)
    if image_id is None:
        reader.missing("image.id", "not exposed by the runtime" if inside else NOT_IN_A_CONTAINER)

    labels: dict[str, str] | None = None
    raw = reader.text(f"/{IMAGE_LABELS_FILE}")
    if raw is None:
        why = f"no /{IMAGE_LABELS_FILE} (not an image built from clsbench's Containerfile)"
        reader.missing("image.labels", why if inside else NOT_IN_A_CONTAINER)
    else:
        try:
            loaded = json.loads(raw)
        except ValueError as exc:
            reader.missing("image.labels", f"/{IMAGE_LABELS_FILE} is not JSON: {exc}")
        else:
            if isinstance(loaded, dict):
                labels = {str(k): str(v) for k, v in sorted(loaded.items()) if isinstance(v, (str, int, float))}
            else:
                reader.missing("image.labels", f"/{IMAGE_LABELS_FILE} holds no object")
    base = labels.get("base_image") or None if labels else None
    if base is None:
        reader.missing("image.base", "no base image in the image's labels" if labels else
                       reader.unavailable.get("container.image.labels", NOT_IN_A_CONTAINER))
    base_env = {key: reader.environ[key] for key in BASE_IMAGE_ENV_VARS if reader.environ.get(key)}
    return {"name": name, "id": image_id, "source": source, "base": base, "labels": labels, "base_env": base_env}


# ----------------------------------------------------------------------------------------------------------
# cgroup limits


def _cgroup(reader: _Reader, mounts: list[_Mount] | None, entries: list[_CgroupEntry] | None) -> dict[str, Any]:
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

    def __init__(self, reader: _Reader, v1: list[_Mount], v2: list[_Mount], entries: list[_CgroupEntry]) -> None:
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


def _folder(mount: _Mount, path: str) -> PurePosixPath:
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


def _first_line(reader: _Reader, path: PurePosixPath) -> str | None:
    text = reader.text(path)
    return text.strip().splitlines()[0].strip() if text and text.strip() else None


def _cpu_quota(reader: _Reader, place: _Place) -> tuple[float, int] | None:
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


def _throttled(reader: _Reader, place: _Place) -> int | None:
    """Periods in which the quota stopped this cgroup, since it started (``nr_throttled`` in ``cpu.stat``)."""
    text = reader.text(place.leaf / "cpu.stat")
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_throttled" and value.strip().isdigit():
            return int(value)
    return None


def _cpuset(reader: _Reader, place: _Place) -> str | None:
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


def _cpu(reader: _Reader, place: _Place, out: dict[str, Any]) -> None:
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


def _memory(reader: _Reader, place: _Place, out: dict[str, Any]) -> None:
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


def _smallest(reader: _Reader, place: _Place, name: str) -> Any:
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
# /dev/shm and GPUs


def _shm(reader: _Reader, mounts: list[_Mount] | None) -> dict[str, Any]:
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


def _gpu(reader: _Reader) -> dict[str, Any]:
    """The GPUs passed into this file system: device nodes, the toolkit's variables, the driver the nodes belong to."""
    try:
        names = sorted(
            (int(m.group(1)), f"/dev/{entry.name}")
            for entry in reader.path("/dev").iterdir()
            if (m := _DEVICE_NODE.fullmatch(entry.name))
        )
    except OSError:
        names = []
    nodes = [name for _, name in names]

    driver_version = None
    version_text = reader.text("/proc/driver/nvidia/version")
    if version_text is not None:
        match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", version_text)
        driver_version = match.group(1) if match else None
    if driver_version is None:
        reader.missing("gpu.driver_version", "no NVIDIA kernel module version in /proc/driver/nvidia/version")

    gpus = []
    try:
        folders = sorted(reader.path("/proc/driver/nvidia/gpus").iterdir())
    except OSError:
        folders = []
    for folder in folders:
        info = _key_values(reader.text(f"/proc/driver/nvidia/gpus/{folder.name}/information") or "")
        gpus.append({"bus": info.get("Bus Location", folder.name), "model": info.get("Model"),
                     "uuid": info.get("GPU UUID")})

    libcuda = next(
        (f"/{directory}/libcuda.so.1" for directory in _LIBCUDA_DIRS if reader.exists(f"/{directory}/libcuda.so.1")),
        None,
    )
    if libcuda is None:
        reader.missing("gpu.libcuda", "no libcuda.so.1 where the driver or the container toolkit puts it")
    for variable in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"):
        if reader.environ.get(variable) is None:
            reader.missing(f"gpu.{variable.lower()}", f"{variable} not set")
    return {
        "device_nodes": nodes,
        "count": len(nodes),
        "nvidia_visible_devices": reader.environ.get("NVIDIA_VISIBLE_DEVICES"),
        "nvidia_driver_capabilities": reader.environ.get("NVIDIA_DRIVER_CAPABILITIES"),
        "driver_version": driver_version,
        "libcuda": libcuda,
        "gpus": gpus,
    }


def _key_values(text: str) -> dict[str, str]:
    """``Key:   value`` lines, as in ``/proc/driver/nvidia/gpus/<bus>/information``."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


# ----------------------------------------------------------------------------------------------------------
# Pre-flight checks


def loader_batch_bytes(batch_size: int, input_size: int = IMAGE_SIZE, *, uint8: bool = False) -> int:
    """The bytes of one batch as a DataLoader worker hands it over through shared memory.

    Args:
        batch_size: images per batch.
        input_size: the side of the square input (224 for most torchvision models).
        uint8: batches normalised on the device (``--normalize-on device``) cross as uint8, a quarter of float32.
    """
    per_value = UINT8_BYTES if uint8 else FLOAT32_BYTES
    return batch_size * CHANNELS * input_size * input_size * per_value


def shm_bytes_needed(num_workers: int, batch_bytes: int, prefetch_factor: int | None = None) -> int:
    """What the DataLoader workers keep in ``/dev/shm`` at once.

    Each worker returns its batches through shared memory (torch.multiprocessing's file-descriptor strategy creates
    them in ``/dev/shm``) and keeps up to ``prefetch_factor`` of them waiting; the batch being trained on stays
    there until the training process lets it go. So: ``(workers x prefetch + 1) x batch``. Exceeding the
    file system's size kills a worker with SIGBUS ("bus error") as it writes the batch.
    """
    if num_workers <= 0:
        return 0
    prefetch = PYTORCH_DEFAULT_PREFETCH if prefetch_factor is None else prefetch_factor
    return (num_workers * prefetch + 1) * batch_bytes


def container_checks(
    facts: Mapping[str, Any],
    *,
    device: str,
    num_workers: int = 0,
    prefetch_factor: int | None = None,
    batch_bytes: int | None = None,
    data_source: str | None = None,
    dataset_bytes: int | None = None,
    cpu_threads: int | None = None,
) -> list[dict]:
    """The container's classic failures, checked against what this run will ask for, each with its fix.

    Args:
        facts: a dict from :func:`container_facts` (or read back from a result file's ``environment.container``).
        device: ``cpu``, ``cuda`` or ``cuda:N``: the device the run measures on.
        num_workers: DataLoader worker processes per measurement (0 for the synthetic batch or ``--num-workers 0``).
        prefetch_factor: batches each worker keeps ready (None: PyTorch's default, 2).
        batch_bytes: bytes of the largest batch a worker hands over (:func:`loader_batch_bytes`); None assumes the
            seed suite's training batch of 32 ImageNet-sized float32 images.
        data_source: ``memory`` when the dataset is read into RAM first (``--data-source memory``).
        dataset_bytes: the dataset's size on disk, what ``--data-source memory`` holds in RAM.
        cpu_threads: the intra-op threads torch will use (``torch.get_num_threads()``); it sets the CPU demand of
            a run on the CPU.

    Returns:
        Entries ``{"check", "status", "message"}`` in the pre-flight format, in this order: ``container`` (info
        or ok), ``shm``, ``container_gpu`` (only in a container), ``cpu_quota``, ``memory_limit``. ``warn``
        means the run will fail or be slowed by the limit; the message names the flag that fixes it.

    Raises:
        InvalidInputError: a negative worker count, prefetch factor, batch or dataset size.
    """
    for name, value in (("num_workers", num_workers), ("prefetch_factor", prefetch_factor),
                        ("batch_bytes", batch_bytes), ("dataset_bytes", dataset_bytes), ("cpu_threads", cpu_threads)):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must not be negative, got {value}")
    inside = bool(facts.get("in_container"))
    checks = [_entry("container", *_container_check(facts))]
    checks.append(_entry("shm", *_shm_check(facts, inside, num_workers, prefetch_factor, batch_bytes)))
    if inside:
        checks.append(_entry("container_gpu", *_gpu_check(facts, device)))
    checks.append(_entry("cpu_quota", *_cpu_check(facts, inside, device, num_workers, cpu_threads)))
    checks.append(_entry("memory_limit", *_memory_check(facts, inside, data_source, dataset_bytes)))
    return checks


def _entry(check: str, status: str, message: str) -> dict:
    return {"check": check, "status": status, "message": message}


def _get(facts: Mapping[str, Any], dotted: str) -> Any:
    node: Any = facts
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _reason(facts: Mapping[str, Any], dotted: str) -> str:
    unavailable = facts.get("unavailable")
    reason = unavailable.get(f"container.{dotted}") if isinstance(unavailable, Mapping) else None
    return str(reason) if reason else "not recorded"


def _container_check(facts: Mapping[str, Any]) -> tuple[str, str]:
    if not facts.get("in_container"):
        return "ok", "not in a container (no marker found)"
    return "info", f"in a container: {_describe_container(facts)}"


def _shm_check(facts: Mapping[str, Any], inside: bool, num_workers: int, prefetch_factor: int | None,
               batch_bytes: int | None) -> tuple[str, str]:
    size = _get(facts, "shm.size_bytes")
    shown = _format_bytes(size) if isinstance(size, int) else None
    if num_workers == 0:
        return "ok", f"no DataLoader workers: /dev/shm ({shown or 'size unknown'}) carries no batches"
    if not isinstance(size, int):
        return "unavailable", f"/dev/shm size unknown ({_reason(facts, 'shm.size_bytes')})"
    batch = loader_batch_bytes(DEFAULT_LOADER_BATCH_SIZE) if batch_bytes is None else batch_bytes
    need = shm_bytes_needed(num_workers, batch, prefetch_factor)
    prefetch = PYTORCH_DEFAULT_PREFETCH if prefetch_factor is None else prefetch_factor
    workers = f"{num_workers} DataLoader worker{'s' if num_workers != 1 else ''}"
    estimate = f"{workers} with {prefetch} batches each in flight need about {_format_bytes(need)} " \
               f"({num_workers * prefetch + 1} batches of {_format_bytes(batch)})"
    if need <= size:
        return "ok", f"/dev/shm {shown} holds what {estimate}"
    suggested = math.ceil((need + num_workers * batch) / SHM_SUGGESTION_STEP_BYTES)
    fix = (f"start the container with --ipc=host (the host's /dev/shm) or --shm-size={suggested}g"
           if inside else f"enlarge it (mount -o remount,size={suggested}G /dev/shm)")
    return "warn", (f"/dev/shm is {shown} but {estimate}: the workers will die with \"bus error\"; {fix}, "
                    "or lower --num-workers")


def _gpu_check(facts: Mapping[str, Any], device: str) -> tuple[str, str]:
    nodes = _get(facts, "gpu.device_nodes") or []
    visible = _get(facts, "gpu.nvidia_visible_devices")
    capabilities = _get(facts, "gpu.nvidia_driver_capabilities")
    libcuda = _get(facts, "gpu.libcuda")
    fix = ("start it with --gpus all (Docker with the NVIDIA Container Toolkit) or --device nvidia.com/gpu=all "
           "(Podman or Docker with a CDI spec from `nvidia-ctk cdi generate`)")
    toolkit = f"NVIDIA_VISIBLE_DEVICES={visible}" if visible is not None else "NVIDIA_VISIBLE_DEVICES unset"
    if not nodes:
        if not device.startswith("cuda"):
            if visible is not None or _get(facts, "image.base_env.CUDA_VERSION"):
                return "info", f"no GPU visible in this container ({toolkit}); the run uses the CPU. To use the " \
                               f"GPUs, {fix}"
            return "ok", "device is cpu; no GPU passed into this container"
        hint = ""
        if visible in ("void", "none", ""):
            hint = f" ({toolkit} hides them even from the toolkit)"
        return "warn", f"no GPU visible in this container: no /dev/nvidia<N> device node{hint}; {fix}"
    shown = ", ".join(nodes)
    count = len(nodes)
    described = f"{count} GPU{'s' if count != 1 else ''} visible ({shown}), {toolkit}"
    driver = _get(facts, "gpu.driver_version")
    if driver:
        described += f", driver {driver}"
    if libcuda is None:
        caps = f"NVIDIA_DRIVER_CAPABILITIES={capabilities}" if capabilities is not None else \
            "NVIDIA_DRIVER_CAPABILITIES unset"
        return "warn", (f"{described}, but the driver library libcuda.so.1 was not mounted in ({caps}): CUDA cannot "
                        "start; set NVIDIA_DRIVER_CAPABILITIES=compute,utility (-e) and use --gpus all or the CDI "
                        "device rather than passing /dev/nvidia* by hand")
    return "ok", f"{described}, {libcuda}"


def _cpu_demand(device: str, num_workers: int, cpu_threads: int | None) -> tuple[int, str]:
    """How many CPUs the run keeps busy at once, and in words."""
    workers = f"{num_workers} DataLoader worker{'s' if num_workers != 1 else ''}" if num_workers else ""
    if not device.startswith("cuda") and cpu_threads:
        parts = [f"{cpu_threads} torch thread{'s' if cpu_threads != 1 else ''}"] + ([workers] if workers else [])
        return cpu_threads + num_workers, " + ".join(parts)
    parts = ([workers] if workers else []) + ["the training process"]
    return num_workers + 1, " + ".join(parts)


def _cpu_check(facts: Mapping[str, Any], inside: bool, device: str, num_workers: int,
               cpu_threads: int | None) -> tuple[str, str]:
    demand, who = _cpu_demand(device, num_workers, cpu_threads)
    quota = _get(facts, "cgroup.cpu_quota_cpus")
    cpuset = _get(facts, "cgroup.cpuset_count")
    where = f"cpuset {_get(facts, 'cgroup.cpuset_cpus')}: {cpuset} CPUs" if isinstance(cpuset, int) else "cpuset n/a"
    if quota is None:
        if _reason(facts, "cgroup.cpu_quota_cpus") != NO_LIMIT:
            return "unavailable", f"CPU quota unknown ({_reason(facts, 'cgroup.cpu_quota_cpus')}); {where}"
        return "ok", f"no CPU quota ({where})"
    throttled = _get(facts, "cgroup.cpu_throttled_periods")
    history = f"; throttled in {throttled} periods so far" if isinstance(throttled, int) and throttled else ""
    if quota + 1e-9 >= demand:
        return "ok", f"CPU quota {quota:g} CPUs covers {who} ({demand}){history}"
    fix = f"give it --cpus={demand}" if inside else f"raise the cgroup's CPU quota to {demand} CPUs"
    if not device.startswith("cuda") and cpu_threads:
        # torch sizes its thread pool from the CPUs it may run on (the cpuset), not from the quota.
        fix += f", or set OMP_NUM_THREADS={max(1, math.floor(quota) - num_workers)}"
    if num_workers:
        fix += f", or lower --num-workers to {max(0, math.floor(quota) - 1)}"
    return "warn", (f"CPU quota of {quota:g} CPUs is below the {demand} that {who} keep busy: the kernel stops the "
                    f"whole cgroup for the rest of each {(_get(facts, 'cgroup.cpu_period_us') or 100000) / 1000:g} ms "
                    f"period once the quota is spent, so the run is throttled{history}; {fix}")


def _memory_check(facts: Mapping[str, Any], inside: bool, data_source: str | None,
                  dataset_bytes: int | None) -> tuple[str, str]:
    hard, high = _get(facts, "cgroup.memory_limit_bytes"), _get(facts, "cgroup.memory_high_bytes")
    usage = _get(facts, "cgroup.memory_usage_bytes")
    now = f", {_format_bytes(usage)} in use" if isinstance(usage, int) else ""
    # memory.high (v2) does not kill: the kernel reclaims and stalls the cgroup above it, which an in-memory dataset
    # (anonymous memory, no swap in containers as a rule) turns into a crawl. The lower of the two is what counts.
    limits = [v for v in (hard, high) if isinstance(v, int)]
    limit = min(limits) if limits else None
    shown = (f"memory limit {_format_bytes(limit)}" + (" (memory.high)" if limit == high and limit != hard else "")
             if limit is not None else "")
    if limit is None and _reason(facts, "cgroup.memory_limit_bytes") != NO_LIMIT:
        return "unavailable", f"memory limit unknown ({_reason(facts, 'cgroup.memory_limit_bytes')})"
    if data_source != "memory":
        return ("info", f"{shown}{now}") if limit is not None else ("ok", f"no memory limit{now}")
    if dataset_bytes is None:
        return "unavailable", "--data-source memory with a dataset of unknown size: the limit cannot be checked"
    if limit is None:
        return "ok", f"no memory limit for the {_format_bytes(dataset_bytes)} dataset cache (--data-source memory)"
    need = dataset_bytes + MEMORY_HEADROOM_BYTES
    if need <= limit:
        return "ok", (f"{shown} holds the {_format_bytes(dataset_bytes)} dataset cache (--data-source memory) and "
                      f"about {_format_bytes(MEMORY_HEADROOM_BYTES)} for the training process")
    suggested = math.ceil(need / 2**30)
    fix = f"start the container with --memory={suggested}g" if inside else \
        f"raise the cgroup's limit to {suggested} GiB"
    ending = "the OOM killer will end the run" if limit == hard else "the kernel will stall the run reclaiming memory"
    return "warn", (f"{shown} is below the {_format_bytes(dataset_bytes)} dataset cache (--data-source memory) plus "
                    f"about {_format_bytes(MEMORY_HEADROOM_BYTES)} for the training process: {ending}; {fix} or use "
                    "--data-source folder")


# ----------------------------------------------------------------------------------------------------------
# clsbench env


def container_lines(facts: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """Turns container facts into ``(label, value)`` rows for ``clsbench env``, in a fixed order.

    Args:
        facts: a dict from :func:`container_facts` or a result file's ``environment.container`` (None or partial
            for older files: they print as not recorded).

    Returns:
        Rows such as ``("Container", "podman (markers: /run/.containerenv, container=podman), id 0f8f72d8c3e6")``,
        ``("Image", ...)``, ``("Image labels", ...)``, ``("Base image env", ...)``, ``("Limits", ...)`` and
        ``("Container GPUs", ...)``; outside a container only ``Container`` and ``Limits``.
    """
    if not facts:
        return [("Container", "not recorded")]
    rows: list[tuple[str, str]] = []
    if not facts.get("in_container"):
        rows.append(("Container", "none (no marker found)"))
    else:
        rows.append(("Container", _describe_container(facts, image=False)))
        name, image_id, source = (_get(facts, f"image.{key}") for key in ("name", "id", "source"))
        if name or image_id:
            image = ", ".join(str(v) for v in (name, _short_id(image_id)) if v)
            rows.append(("Image", f"{image} (from {source})" if source else image))
        else:
            rows.append(("Image", f"name {_NOT_AVAILABLE} ({_reason(facts, 'image.name')})"))
        labels = _get(facts, "image.labels")
        if isinstance(labels, Mapping) and labels:
            rows.append(("Image labels", _describe_labels(labels)))
        base_env = _get(facts, "image.base_env")
        if isinstance(base_env, Mapping) and base_env:
            rows.append(("Base image env", ", ".join(f"{k}={v}" for k, v in base_env.items())))
    rows.append(("Limits", _describe_limits(facts)))
    if facts.get("in_container"):
        rows.append(("Container GPUs", _describe_gpus(facts)))
    return rows


def _describe_container(facts: Mapping[str, Any], *, image: bool = True) -> str:
    """The runtime, its markers, the container's id and (with ``image``) the image's name and labels."""
    markers = facts.get("markers") or []
    text = f"{facts.get('runtime') or 'unknown runtime'} (markers: {', '.join(markers) or 'none'})"
    if facts.get("id"):
        text += f", id {str(facts['id'])[:12]}"
    if not image:
        return text
    labels = _get(facts, "image.labels")
    name = _get(facts, "image.name")
    if name:
        text += f", image {name}"
    if isinstance(labels, Mapping) and labels:
        text += f", labels: {_describe_labels(labels)}"
    return text


def _describe_labels(labels: Mapping[str, Any]) -> str:
    parts = []
    if labels.get("clsbench_version"):
        parts.append(f"clsbench {labels['clsbench_version']}")
    if labels.get("clsbench_commit"):
        parts.append(f"commit {str(labels['clsbench_commit'])[:12]}")
    if labels.get("target"):
        parts.append(f"target {labels['target']}")
    if labels.get("base_image"):
        parts.append(f"base {labels['base_image']}")
    known = {"clsbench_version", "clsbench_commit", "target", "base_image"}
    parts.extend(f"{k}={v}" for k, v in labels.items() if k not in known)
    return ", ".join(parts)


def _describe_limits(facts: Mapping[str, Any]) -> str:
    version = _get(facts, "cgroup.version")
    quota = _get(facts, "cgroup.cpu_quota_cpus")
    cpuset, count = _get(facts, "cgroup.cpuset_cpus"), _get(facts, "cgroup.cpuset_count")
    limit, high = _get(facts, "cgroup.memory_limit_bytes"), _get(facts, "cgroup.memory_high_bytes")
    shm = _get(facts, "shm.size_bytes")

    def unset(dotted: str) -> bool:
        return _reason(facts, dotted) == NO_LIMIT

    cpu = f"CPU quota {quota:g} CPUs" if isinstance(quota, (int, float)) else \
        "no CPU quota" if unset("cgroup.cpu_quota_cpus") else f"CPU quota {_NOT_AVAILABLE}"
    cpu += f" (cpuset {cpuset}: {count} CPUs)" if cpuset else ""
    memory = f"memory {_format_bytes(limit)}" if isinstance(limit, int) else \
        "no memory limit" if unset("cgroup.memory_limit_bytes") else f"memory limit {_NOT_AVAILABLE}"
    if isinstance(high, int):
        memory += f" (high {_format_bytes(high)})"
    shm_text = f"/dev/shm {_format_bytes(shm)}" if isinstance(shm, int) else f"/dev/shm {_NOT_AVAILABLE}"
    return f"cgroup {version or _NOT_AVAILABLE}, {cpu}, {memory}, {shm_text}"


def _describe_gpus(facts: Mapping[str, Any]) -> str:
    nodes = _get(facts, "gpu.device_nodes") or []
    visible = _get(facts, "gpu.nvidia_visible_devices")
    parts = [f"{len(nodes)} device node{'s' if len(nodes) != 1 else ''}" + (f" ({', '.join(nodes)})" if nodes else "")]
    if visible is not None:
        parts.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
    capabilities = _get(facts, "gpu.nvidia_driver_capabilities")
    if capabilities is not None:
        parts.append(f"NVIDIA_DRIVER_CAPABILITIES={capabilities}")
    if _get(facts, "gpu.driver_version"):
        parts.append(f"driver {_get(facts, 'gpu.driver_version')}")
    models = [g.get("model") for g in _get(facts, "gpu.gpus") or [] if isinstance(g, Mapping) and g.get("model")]
    if models:
        parts.append(", ".join(f"{m} ×{models.count(m)}" for m in dict.fromkeys(models)))
    libcuda = _get(facts, "gpu.libcuda")
    parts.append(f"libcuda.so.1 {'at ' + str(libcuda) if libcuda else 'not mounted'}")
    return ", ".join(parts)


def _short_id(image_id: Any) -> str | None:
    if not image_id:
        return None
    text = str(image_id)
    digest = text.split(":", 1)[1] if ":" in text else text
    return f"sha256:{digest[:12]}" if re.fullmatch(r"[0-9a-f]{64}", digest) else text


def _format_bytes(value: int | float) -> str:
    """Binary units, as the kernel counts them: ``64 MiB``, ``1.5 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{int(value)} B"
