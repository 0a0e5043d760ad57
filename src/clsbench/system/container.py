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
* **Limits** (:mod:`clsbench.system.container_limits`): the cgroup (v1, v2 or both) CPU quota, cpuset, memory
  limit and usage, found through ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` and taken as the smallest
  limit on the way from this process's cgroup up to the top of the mounted hierarchy; the ``/dev/shm`` size
  from its mount options.
* **GPUs through the toolkit**: ``/dev/nvidia<N>`` device nodes, ``NVIDIA_VISIBLE_DEVICES`` and
  ``NVIDIA_DRIVER_CAPABILITIES``, the driver version and GPU list under ``/proc/driver/nvidia``, and whether
  the driver's ``libcuda.so.1`` was mounted in.

As in :mod:`clsbench.results.environment`, every fact that is ``None`` has its dotted path and the reason under
``unavailable``: a limit that is not set says :data:`~clsbench.system.container_limits.NO_LIMIT`, so "no limit"
and "unknown" differ.

What the facts mean for a run is elsewhere: the pre-flight checks in :mod:`clsbench.system.container_checks`,
``clsbench env``'s lines in :mod:`clsbench.system.container_text`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from clsbench.system.container_limits import (
    CgroupEntry,
    Mount,
    Reader,
    cgroup_limits,
    parse_mountinfo,
    parse_proc_cgroup,
    shm_size,
)

__all__ = [
    "CLSBENCH_IMAGE_ENV",
    "IMAGE_LABELS_FILE",
    "KEY_FIELDS",
    "container_facts",
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
    reader = Reader(root, os.environ if environ is None else environ)
    mountinfo_text = reader.text("/proc/self/mountinfo")
    mounts = parse_mountinfo(mountinfo_text) if mountinfo_text is not None else None
    cgroup_text = reader.text("/proc/self/cgroup")
    entries = parse_proc_cgroup(cgroup_text) if cgroup_text is not None else None

    facts: dict[str, Any] = {"in_container": None, "runtime": None, "markers": [], "id": None}
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("detection", lambda: _detect(reader, mounts, entries)),
        ("image", lambda: _image(reader, bool(facts["in_container"]))),
        ("cgroup", lambda: cgroup_limits(reader, mounts, entries)),
        ("shm", lambda: shm_size(reader, mounts)),
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
    reader: Reader, mounts: list[Mount] | None, entries: list[CgroupEntry] | None
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


def _file_and_variable_markers(reader: Reader) -> tuple[list[tuple[str, str]], str | None]:
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


def _cgroup_marker(entries: list[CgroupEntry] | None) -> tuple[str, str, str | None] | None:
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


def _id_from_mounts(mounts: list[Mount]) -> str | None:
    """Docker bind-mounts ``/etc/hostname`` and friends from ``.../containers/<id>/``; the id is in the root."""
    for mount in mounts:
        if "/containers/" in mount.root:
            match = _CONTAINER_ID.search(mount.root)
            if match:
                return match.group(1)
    return None


def _image(reader: Reader, inside: bool) -> dict[str, Any]:
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
# GPUs


def _gpu(reader: Reader) -> dict[str, Any]:
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
