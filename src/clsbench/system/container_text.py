"""Container facts in words: ``clsbench env``'s rows, and the phrases the pre-flight checks reuse.

The facts are a dict from :func:`clsbench.system.container.container_facts` or a result file's
``environment.container``, possibly partial (older files); what is missing prints as not recorded or ``n/a``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from clsbench.system.container_limits import NO_LIMIT

__all__ = ["container_lines", "describe_container", "fact_at", "fact_reason", "format_bytes"]

_NOT_AVAILABLE = "n/a"


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
        rows.append(("Container", describe_container(facts, image=False)))
        name, image_id, source = (fact_at(facts, f"image.{key}") for key in ("name", "id", "source"))
        if name or image_id:
            image = ", ".join(str(v) for v in (name, _short_id(image_id)) if v)
            rows.append(("Image", f"{image} (from {source})" if source else image))
        else:
            rows.append(("Image", f"name {_NOT_AVAILABLE} ({fact_reason(facts, 'image.name')})"))
        labels = fact_at(facts, "image.labels")
        if isinstance(labels, Mapping) and labels:
            rows.append(("Image labels", _describe_labels(labels)))
        base_env = fact_at(facts, "image.base_env")
        if isinstance(base_env, Mapping) and base_env:
            rows.append(("Base image env", ", ".join(f"{k}={v}" for k, v in base_env.items())))
    rows.append(("Limits", _describe_limits(facts)))
    if facts.get("in_container"):
        rows.append(("Container GPUs", _describe_gpus(facts)))
    return rows


def describe_container(facts: Mapping[str, Any], *, image: bool = True) -> str:
    """The runtime, its markers, the container's id and (with ``image``) the image's name and labels."""
    markers = facts.get("markers") or []
    text = f"{facts.get('runtime') or 'unknown runtime'} (markers: {', '.join(markers) or 'none'})"
    if facts.get("id"):
        text += f", id {str(facts['id'])[:12]}"
    if not image:
        return text
    labels = fact_at(facts, "image.labels")
    name = fact_at(facts, "image.name")
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
    version = fact_at(facts, "cgroup.version")
    quota = fact_at(facts, "cgroup.cpu_quota_cpus")
    cpuset, count = fact_at(facts, "cgroup.cpuset_cpus"), fact_at(facts, "cgroup.cpuset_count")
    limit, high = fact_at(facts, "cgroup.memory_limit_bytes"), fact_at(facts, "cgroup.memory_high_bytes")
    shm = fact_at(facts, "shm.size_bytes")

    def unset(dotted: str) -> bool:
        return fact_reason(facts, dotted) == NO_LIMIT

    cpu = f"CPU quota {quota:g} CPUs" if isinstance(quota, (int, float)) else \
        "no CPU quota" if unset("cgroup.cpu_quota_cpus") else f"CPU quota {_NOT_AVAILABLE}"
    cpu += f" (cpuset {cpuset}: {count} CPUs)" if cpuset else ""
    memory = f"memory {format_bytes(limit)}" if isinstance(limit, int) else \
        "no memory limit" if unset("cgroup.memory_limit_bytes") else f"memory limit {_NOT_AVAILABLE}"
    if isinstance(high, int):
        memory += f" (high {format_bytes(high)})"
    shm_text = f"/dev/shm {format_bytes(shm)}" if isinstance(shm, int) else f"/dev/shm {_NOT_AVAILABLE}"
    return f"cgroup {version or _NOT_AVAILABLE}, {cpu}, {memory}, {shm_text}"


def _describe_gpus(facts: Mapping[str, Any]) -> str:
    nodes = fact_at(facts, "gpu.device_nodes") or []
    visible = fact_at(facts, "gpu.nvidia_visible_devices")
    parts = [f"{len(nodes)} device node{'s' if len(nodes) != 1 else ''}" + (f" ({', '.join(nodes)})" if nodes else "")]
    if visible is not None:
        parts.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
    capabilities = fact_at(facts, "gpu.nvidia_driver_capabilities")
    if capabilities is not None:
        parts.append(f"NVIDIA_DRIVER_CAPABILITIES={capabilities}")
    if fact_at(facts, "gpu.driver_version"):
        parts.append(f"driver {fact_at(facts, 'gpu.driver_version')}")
    models = [g.get("model") for g in fact_at(facts, "gpu.gpus") or [] if isinstance(g, Mapping) and g.get("model")]
    if models:
        parts.append(", ".join(f"{m} ×{models.count(m)}" for m in dict.fromkeys(models)))
    libcuda = fact_at(facts, "gpu.libcuda")
    parts.append(f"libcuda.so.1 {'at ' + str(libcuda) if libcuda else 'not mounted'}")
    return ", ".join(parts)


def _short_id(image_id: Any) -> str | None:
    if not image_id:
        return None
    text = str(image_id)
    digest = text.split(":", 1)[1] if ":" in text else text
    return f"sha256:{digest[:12]}" if re.fullmatch(r"[0-9a-f]{64}", digest) else text


def format_bytes(value: int | float) -> str:
    """Binary units, as the kernel counts them: ``64 MiB``, ``1.5 GiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{int(value)} B"


def fact_at(facts: Mapping[str, Any], dotted: str) -> Any:
    """The fact at dotted path ``dotted`` (``shm.size_bytes``), or None where it is absent."""
    node: Any = facts
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def fact_reason(facts: Mapping[str, Any], dotted: str) -> str:
    """Why the fact at ``dotted`` is None, as ``unavailable`` records it, or ``not recorded``."""
    unavailable = facts.get("unavailable")
    reason = unavailable.get(f"container.{dotted}") if isinstance(unavailable, Mapping) else None
    return str(reason) if reason else "not recorded"
