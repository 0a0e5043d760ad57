"""Tests of container detection and the container pre-flight checks (``clsbench.system.container``).

The facts are read from fixture trees under ``tests/data/container/``, each a root file system as a process would
see it: Docker on cgroup v2 with a cgroup namespace and two GPUs through the toolkit, Podman on cgroup v1 (as seen
on this project's CI machine, privileged so that ``/run/.containerenv`` names the image), a bare host with the hybrid
layout and its limits on parent slices, a Kubernetes pod on cgroup v2 without a cgroup namespace, and an empty root.
The checks are driven by hand-made facts. The Containerfile and the CI checker are tested as text and as a program.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clsbench.errors import InvalidInputError
from clsbench.system import container, container_limits
from clsbench.system.container import IMAGE_LABELS_FILE, KEY_FIELDS, container_facts
from clsbench.system.container_checks import container_checks, loader_batch_bytes, shm_bytes_needed
from clsbench.system.container_limits import NO_LIMIT
from clsbench.system.container_text import container_lines

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "data" / "container"
GIB = 2**30
MIB = 2**20
STATUSES = {"ok", "warn", "info", "unavailable"}
NGC_ENV = {
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_PYTORCH_VERSION": "25.04",
    "PYTORCH_VERSION": "2.7.0a0+79aa174",
    "CUDA_VERSION": "12.9.0.043",
    "HOME": "/root",
}
DOCKER_ID = "4f3c2b1a0e9d8c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbbaa00"
PODMAN_ID = "85d6b14645c6c9b6d3cb284e7fcd5c19f5e482ba122be229dab97f54e9c33b46"


def facts_of(name: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    return container_facts(FIXTURES / name, environ or {})


def check(checks: list[dict], name: str) -> dict:
    found = [c for c in checks if c["check"] == name]
    assert len(found) == 1, f"{name}: {checks}"
    return found[0]


# ----------------------------------------------------------------------------------------------------------
# Detection on fixture trees


def test_docker_on_cgroup_v2_with_gpus_through_the_toolkit() -> None:
    facts = facts_of("docker-v2", NGC_ENV)
    assert facts["in_container"] is True
    assert facts["runtime"] == "docker"
    assert facts["markers"] == ["/.dockerenv"]
    assert facts["id"] == DOCKER_ID  # from the bind mount of /etc/hostname: v2 with a namespace shows "0::/"
    assert facts["image"]["name"] is None and facts["image"]["id"] is None  # Docker exposes neither
    assert facts["image"]["labels"] == {
        "base_image": "nvcr.io/nvidia/pytorch:25.04-py3",
        "clsbench_commit": "cf15c48bfc5bf6e982c437dac1ee78d65f5027f2",
        "clsbench_version": "0.1.0",
        "target": "gpu",
    }
    assert facts["image"]["base_env"] == {  # the image's own variables, nothing else from the environment
        "NVIDIA_PYTORCH_VERSION": "25.04",
        "PYTORCH_VERSION": "2.7.0a0+79aa174",
        "CUDA_VERSION": "12.9.0.043",
    }
    assert facts["cgroup"] == {
        "version": "v2",
        "cpu_quota_cpus": 2.0,
        "cpu_period_us": 100000,
        "cpuset_cpus": "0-7",
        "cpuset_count": 8,
        "memory_limit_bytes": 16 * GIB,
        "memory_high_bytes": None,  # "max": no limit, and no reason recorded for it
        "memory_usage_bytes": 734003200,
        "cpu_throttled_periods": 37,
    }
    assert facts["shm"] == {"size_bytes": 64 * MIB, "source": "mount option"}
    gpu = facts["gpu"]
    assert gpu["device_nodes"] == ["/dev/nvidia0", "/dev/nvidia1"]  # not nvidiactl, nvidia-uvm
    assert gpu["count"] == 2
    assert gpu["nvidia_visible_devices"] == "all"
    assert gpu["nvidia_driver_capabilities"] == "compute,utility"
    assert gpu["driver_version"] == "570.124.06"
    assert gpu["libcuda"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert [g["model"] for g in gpu["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert gpu["gpus"][0]["bus"] == "0000:19:00.0"
    assert gpu["gpus"][1]["uuid"].startswith("GPU-")
    assert facts["unavailable"] == {
        "container.cgroup.memory_high_bytes": NO_LIMIT,
        "container.image.id": "not exposed by the runtime",
        "container.image.name": facts["unavailable"]["container.image.source"],
        "container.image.source": facts["unavailable"]["container.image.name"],
    }
    assert "CLSBENCH_IMAGE" in facts["unavailable"]["container.image.name"]


def test_podman_on_cgroup_v1_names_its_image() -> None:
    facts = facts_of("podman-v1")
    assert facts["in_container"] is True
    assert facts["runtime"] == "podman"  # from engine="podman-4.3.1"
    assert facts["markers"] == ["/run/.containerenv", "cgroup path names libpod"]
    assert facts["id"] == PODMAN_ID
    assert facts["image"]["name"] == "localhost/clsbench:ci-cpu"
    assert facts["image"]["id"] == "798c897ef315f1a79c061747cca4b2d6ef628d8e6cf9eec89f9132ca68170027"
    assert facts["image"]["source"] == "/run/.containerenv"
    assert facts["image"]["labels"]["target"] == "cpu"
    cgroup = facts["cgroup"]
    # Without a cgroup namespace the mount's root is the container's own cgroup: its files are at the mount point.
    assert cgroup["version"] == "v1"
    assert cgroup["cpu_quota_cpus"] == 1.5
    assert cgroup["cpuset_count"] == 2
    assert cgroup["memory_limit_bytes"] == 3 * GIB
    assert cgroup["memory_usage_bytes"] == 15069184
    assert cgroup["cpu_throttled_periods"] == 0
    assert facts["shm"]["size_bytes"] == 64000 * 1024  # podman's default 64m is 64000k
    assert facts["gpu"]["device_nodes"] == [] and facts["gpu"]["libcuda"] is None


def test_bare_host_with_the_hybrid_layout_takes_limits_from_parent_slices() -> None:
    facts = facts_of("host-hybrid")
    assert facts["in_container"] is False and facts["runtime"] is None and facts["markers"] == []
    assert facts["image"] == {"name": None, "id": None, "source": None, "base": None, "labels": None, "base_env": {}}
    assert {path: reason for path, reason in facts["unavailable"].items() if path.startswith("container.image")} == {
        f"container.image.{key}": "not in a container" for key in ("name", "id", "source", "base", "labels")}
    cgroup = facts["cgroup"]
    assert cgroup["version"] == "hybrid"
    assert cgroup["cpu_quota_cpus"] == 4.0  # 400000/100000 on user.slice; -1 (none) at the other levels
    assert cgroup["memory_limit_bytes"] == 8 * GIB  # on user-1000.slice; v1's "no limit" sentinel elsewhere
    assert cgroup["cpuset_cpus"] == "0-15" and cgroup["cpuset_count"] == 16
    # /dev/shm mounted without a size option: its size comes from statvfs on the folder.
    assert facts["shm"]["source"] == "statvfs" and facts["shm"]["size_bytes"] > 0


def test_kubernetes_pod_takes_the_smallest_limit_on_the_way_up() -> None:
    facts = facts_of("k8s-v2", {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert facts["in_container"] is True
    assert facts["runtime"] == "kubernetes"
    assert facts["id"] == PODMAN_ID  # the 64-hex id in the cri-containerd scope name
    cgroup = facts["cgroup"]
    assert cgroup["cpu_quota_cpus"] == 0.5  # the pod's 50000/100000; the container's own cpu.max is "max"
    assert cgroup["memory_limit_bytes"] == 1 * GIB  # the container's 1 GiB under the pod's 2 GiB
    assert cgroup["memory_high_bytes"] == 768 * MIB
    assert cgroup["cpuset_count"] == 64
    assert cgroup["cpu_throttled_periods"] == 3


@pytest.mark.parametrize("name", ["docker-v2", "podman-v1", "host-hybrid", "k8s-v2", "empty"])
def test_every_none_has_its_own_reason(name: str) -> None:
    """As in the environment: a None says why, and every reader gives its own reason (no "not reported")."""
    facts = facts_of(name, NGC_ENV if name == "docker-v2" else {})
    nones = set(container._none_leaves({k: v for k, v in facts.items() if k != "unavailable"}, "container."))
    assert nones == set(facts["unavailable"])
    assert "not reported" not in facts["unavailable"].values()


def test_an_unreadable_root_gives_reasons_not_errors() -> None:
    facts = facts_of("empty")
    assert facts["in_container"] is False
    assert facts["cgroup"]["version"] is None
    assert facts["shm"]["size_bytes"] is None
    unavailable = facts["unavailable"]
    assert unavailable["container.cgroup.memory_limit_bytes"] == "/proc/self/mountinfo unreadable"
    assert "container.shm.size_bytes" in unavailable
    json.dumps(facts)  # stored in result files as it is


@pytest.mark.parametrize(
    ("environ", "runtime", "image"),
    [
        ({"container": "podman"}, "podman", None),
        ({"container": "lxc"}, "lxc", None),
        ({"APPTAINER_CONTAINER": "/scratch/pytorch_25.04.sif"}, "apptainer", "/scratch/pytorch_25.04.sif"),
        ({"SINGULARITY_CONTAINER": "/images/torch.sif"}, "singularity", "/images/torch.sif"),
        ({"container": "docker", "CLSBENCH_IMAGE": "clsbench:2025-06"}, "docker", "clsbench:2025-06"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "kubernetes", None),
    ],
)
def test_markers_from_the_environment(environ: dict[str, str], runtime: str, image: str | None) -> None:
    facts = facts_of("empty", environ)
    assert facts["in_container"] is True
    assert facts["runtime"] == runtime
    assert facts["image"]["name"] == image


def test_no_marker_means_not_in_a_container(tmp_path: Path) -> None:
    facts = container_facts(tmp_path, {"HOSTNAME": "0f8f72d8c3e6", "NVIDIA_VISIBLE_DEVICES": "all"})
    assert facts["in_container"] is False and facts["runtime"] is None and facts["id"] is None
    (tmp_path / ".dockerenv").write_text("")
    assert container_facts(tmp_path, {})["runtime"] == "docker"


def test_the_labels_file_is_read_and_bad_ones_are_reasons(tmp_path: Path) -> None:
    (tmp_path / ".dockerenv").write_text("")
    labels = tmp_path / IMAGE_LABELS_FILE
    labels.parent.mkdir(parents=True)
    labels.write_text("{not json")
    facts = container_facts(tmp_path, {})
    assert facts["image"]["labels"] is None
    assert "not JSON" in facts["unavailable"]["container.image.labels"]
    labels.write_text(json.dumps({"target": "cpu", "nested": {"dropped": True}}))
    assert container_facts(tmp_path, {})["image"]["labels"] == {"target": "cpu"}


def test_mountinfo_escapes_and_cpu_lists() -> None:
    mounts = container_limits.parse_mountinfo(
        r"40 30 0:41 / /mnt/with\040space rw - tmpfs tmpfs rw,size=1g" "\n"
        "garbage line\n"
    )
    assert [(m.mount_point, m.super_options) for m in mounts] == [("/mnt/with space", ("rw", "size=1g"))]
    assert container_limits._parse_size("1g") == GIB
    assert container_limits._parse_size("65536k") == 64 * MIB
    assert container_limits._parse_size("50%") is None
    assert container_limits._count_cpus("0-3,8,10-11") == 7
    assert container_limits._count_cpus("0-x") is None


def test_this_machine_reads_without_error() -> None:
    facts = container_facts()
    json.dumps(facts)
    assert isinstance(facts["in_container"], bool)
    assert container_lines(facts)[0][0] == "Container"


# ----------------------------------------------------------------------------------------------------------
# Pre-flight checks


def synthetic_facts(**overrides: Any) -> dict[str, Any]:
    """Facts of a Docker container with a 64 MiB /dev/shm, no limits and no GPU; keys overridden by dotted path."""
    facts: dict[str, Any] = {
        "in_container": True,
        "runtime": "docker",
        "markers": ["/.dockerenv"],
        "id": None,
        "image": {"name": None, "id": None, "source": None, "base": None, "labels": None, "base_env": {}},
        "cgroup": {"version": "v2", "cpu_quota_cpus": None, "cpu_period_us": None, "cpuset_cpus": "0-31",
                   "cpuset_count": 32, "memory_limit_bytes": None, "memory_high_bytes": None,
                   "memory_usage_bytes": None, "cpu_throttled_periods": 0},
        "shm": {"size_bytes": 64 * MIB, "source": "mount option"},
        "gpu": {"device_nodes": [], "count": 0, "nvidia_visible_devices": None, "nvidia_driver_capabilities": None,
                "driver_version": None, "libcuda": None, "gpus": []},
        "unavailable": {f"container.cgroup.{key}": NO_LIMIT for key in ("cpu_quota_cpus", "cpu_period_us",
                                                                         "memory_limit_bytes", "memory_high_bytes")},
    }
    for dotted, value in overrides.items():
        node = facts
        *parents, last = dotted.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return facts


def test_checks_have_the_preflight_format_and_order() -> None:
    checks = container_checks(facts_of("docker-v2", NGC_ENV), device="cuda", num_workers=4)
    assert [c["check"] for c in checks] == ["container", "shm", "container_gpu", "cpu_quota", "memory_limit"]
    for entry in checks:
        assert set(entry) == {"check", "status", "message"} and entry["status"] in STATUSES and entry["message"]
    outside = container_checks(facts_of("host-hybrid"), device="cuda")
    assert [c["check"] for c in outside] == ["container", "shm", "cpu_quota", "memory_limit"]
    assert check(outside, "container")["status"] == "ok"


def test_shm_estimate() -> None:
    batch = loader_batch_bytes(32)
    assert batch == 32 * 3 * 224 * 224 * 4
    assert loader_batch_bytes(32, uint8=True) * 4 == batch
    assert shm_bytes_needed(0, batch) == 0
    assert shm_bytes_needed(4, batch) == 9 * batch  # 4 workers x 2 prefetched + the batch in use
    assert shm_bytes_needed(4, batch, prefetch_factor=4) == 17 * batch


def test_docker_default_shm_is_too_small_for_several_workers() -> None:
    checks = container_checks(synthetic_facts(), device="cuda", num_workers=2)
    shm = check(checks, "shm")
    assert shm["status"] == "warn"  # 5 batches of 18.4 MiB do not fit in 64 MiB
    assert "bus error" in shm["message"] and "--ipc=host" in shm["message"] and "--shm-size=1g" in shm["message"]
    one = check(container_checks(synthetic_facts(), device="cuda", num_workers=1), "shm")
    assert one["status"] == "ok"  # 3 batches of 18.4 MiB fit
    none = check(container_checks(synthetic_facts(), device="cuda"), "shm")
    assert none["status"] == "ok" and "no DataLoader workers" in none["message"]
    big = check(container_checks(synthetic_facts(), device="cuda", num_workers=8,
                                 batch_bytes=loader_batch_bytes(256)), "shm")
    assert "--shm-size=4g" in big["message"]  # 17 x 147 MiB = 2.4 GiB, plus a batch per worker, rounded up


def test_shm_outside_a_container_suggests_a_remount() -> None:
    facts = synthetic_facts(in_container=False)
    shm = check(container_checks(facts, device="cuda", num_workers=2), "shm")
    assert shm["status"] == "warn" and "mount -o remount,size=1G /dev/shm" in shm["message"]
    assert "--ipc=host" not in shm["message"]


def test_no_gpu_in_a_container() -> None:
    warn = check(container_checks(synthetic_facts(), device="cuda"), "container_gpu")
    assert warn["status"] == "warn"
    assert "--gpus all" in warn["message"] and "nvidia.com/gpu=all" in warn["message"]
    hidden = check(container_checks(synthetic_facts(gpu__nvidia_visible_devices="void"), device="cuda:0"),
                   "container_gpu")
    assert "NVIDIA_VISIBLE_DEVICES=void" in hidden["message"]
    # A CUDA image started without GPUs on a run that resolved to the CPU: say so, without failing it.
    cpu = check(container_checks(synthetic_facts(gpu__nvidia_visible_devices="all"), device="cpu"), "container_gpu")
    assert cpu["status"] == "info" and "--gpus all" in cpu["message"]
    plain = check(container_checks(synthetic_facts(), device="cpu"), "container_gpu")
    assert plain["status"] == "ok"


def test_gpu_nodes_without_the_driver_library() -> None:
    facts = synthetic_facts(gpu__device_nodes=["/dev/nvidia0"], gpu__count=1, gpu__nvidia_driver_capabilities="utility")
    entry = check(container_checks(facts, device="cuda"), "container_gpu")
    assert entry["status"] == "warn"
    assert "libcuda.so.1" in entry["message"] and "NVIDIA_DRIVER_CAPABILITIES=utility" in entry["message"]
    facts["gpu"]["libcuda"] = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert check(container_checks(facts, device="cuda"), "container_gpu")["status"] == "ok"


def test_cpu_quota_below_the_workers() -> None:
    facts = synthetic_facts(cgroup__cpu_quota_cpus=2.0, cgroup__cpu_period_us=100000, cgroup__cpu_throttled_periods=5)
    entry = check(container_checks(facts, device="cuda", num_workers=8), "cpu_quota")
    assert entry["status"] == "warn"
    assert "8 DataLoader workers + the training process" in entry["message"]
    assert "--cpus=9" in entry["message"] and "--num-workers to 1" in entry["message"]
    assert "throttled in 5 periods" in entry["message"]
    assert check(container_checks(facts, device="cuda", num_workers=1), "cpu_quota")["status"] == "ok"
    assert check(container_checks(synthetic_facts(), device="cuda", num_workers=8), "cpu_quota")["status"] == "ok"


def test_cpu_quota_below_torch_threads_on_a_cpu_run() -> None:
    facts = synthetic_facts(cgroup__cpu_quota_cpus=2.0, cgroup__cpu_period_us=100000)
    entry = check(container_checks(facts, device="cpu", cpu_threads=32), "cpu_quota")
    assert entry["status"] == "warn" and "32 torch threads" in entry["message"]
    assert "OMP_NUM_THREADS=2" in entry["message"]


def test_cpu_quota_unknown_is_unavailable() -> None:
    facts = synthetic_facts(unavailable={"container.cgroup.cpu_quota_cpus": "no cpu.max"})
    entry = check(container_checks(facts, device="cuda", num_workers=2), "cpu_quota")
    assert entry["status"] == "unavailable" and "no cpu.max" in entry["message"]


def test_memory_limit_below_the_dataset_cache() -> None:
    facts = synthetic_facts(cgroup__memory_limit_bytes=8 * GIB)
    entry = check(container_checks(facts, device="cuda", data_source="memory", dataset_bytes=10 * GIB), "memory_limit")
    assert entry["status"] == "warn"
    assert "OOM killer" in entry["message"] and "--memory=12g" in entry["message"]
    assert "--data-source folder" in entry["message"]
    fits = check(container_checks(facts, device="cuda", data_source="memory", dataset_bytes=5 * GIB), "memory_limit")
    assert fits["status"] == "ok"
    folder = check(container_checks(facts, device="cuda", data_source="folder", dataset_bytes=10 * GIB),
                   "memory_limit")
    assert folder["status"] == "info"
    unknown = check(container_checks(facts, device="cuda", data_source="memory"), "memory_limit")
    assert unknown["status"] == "unavailable"


def test_memory_high_below_the_hard_limit_counts() -> None:
    facts = synthetic_facts(cgroup__memory_limit_bytes=32 * GIB, cgroup__memory_high_bytes=4 * GIB)
    entry = check(container_checks(facts, device="cuda", data_source="memory", dataset_bytes=10 * GIB), "memory_limit")
    assert entry["status"] == "warn" and "memory.high" in entry["message"] and "stall" in entry["message"]


def test_negative_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        container_checks(synthetic_facts(), device="cuda", num_workers=-1)
    with pytest.raises(InvalidInputError):
        container_checks(synthetic_facts(), device="cuda", dataset_bytes=-5)


# ----------------------------------------------------------------------------------------------------------
# clsbench env lines and key fields


def test_lines_of_a_gpu_container() -> None:
    assert container_lines(facts_of("docker-v2", NGC_ENV)) == [
        ("Container", f"docker (markers: /.dockerenv), id {DOCKER_ID[:12]}"),
        ("Image", "name n/a (the runtime does not expose it (Podman only to --privileged containers, Docker never); "
                  "set CLSBENCH_IMAGE when starting the container)"),
        ("Image labels", "clsbench 0.1.0, commit cf15c48bfc5b, target gpu, base nvcr.io/nvidia/pytorch:25.04-py3"),
        ("Base image env", "NVIDIA_PYTORCH_VERSION=25.04, PYTORCH_VERSION=2.7.0a0+79aa174, CUDA_VERSION=12.9.0.043"),
        ("Limits", "cgroup v2, CPU quota 2 CPUs (cpuset 0-7: 8 CPUs), memory 16 GiB, /dev/shm 64 MiB"),
        ("Container GPUs", "2 device nodes (/dev/nvidia0, /dev/nvidia1), NVIDIA_VISIBLE_DEVICES=all, "
                           "NVIDIA_DRIVER_CAPABILITIES=compute,utility, driver 570.124.06, NVIDIA H200 ×2, "
                           "libcuda.so.1 at /usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    ]


def test_lines_of_podman_and_of_a_host() -> None:
    rows = dict(container_lines(facts_of("podman-v1")))
    assert rows["Image"] == "localhost/clsbench:ci-cpu, sha256:798c897ef315 (from /run/.containerenv)"
    assert rows["Limits"] == "cgroup v1, CPU quota 1.5 CPUs (cpuset 0-1: 2 CPUs), memory 3 GiB, /dev/shm 62.5 MiB"
    host = container_lines(facts_of("host-hybrid"))
    assert [label for label, _ in host] == ["Container", "Limits"]
    assert host[0][1] == "none (no marker found)"
    empty = dict(container_lines(facts_of("empty")))
    assert empty["Limits"] == "cgroup n/a, CPU quota n/a, memory limit n/a, /dev/shm n/a"
    assert container_lines(None) == [("Container", "not recorded")]


def get_field(env: dict, dotted: str) -> Any:
    node: Any = env
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def test_key_fields_name_the_image_and_stay_none_outside_a_container() -> None:
    assert all(path.startswith("container.") for path in KEY_FIELDS)
    inside = {"container": facts_of("podman-v1")}
    assert all(get_field(inside, path) is not None for path in KEY_FIELDS)
    for path in KEY_FIELDS:  # the path exists even where its value is absent, as the environment's tests demand
        parent, _, key = path.rpartition(".")
        assert key in get_field({"container": facts_of("host-hybrid")}, parent), path
    # Outside a container every key field is None, as in result files written before these facts existed: those
    # still compare and resume against new ones.
    outside = {"container": facts_of("host-hybrid")}
    assert [get_field(outside, path) for path in KEY_FIELDS] == [None] * len(KEY_FIELDS)
    other_image = {"container": {**facts_of("podman-v1"), "image": {**facts_of("podman-v1")["image"], "id": "x"}}}
    assert [p for p in KEY_FIELDS if get_field(inside, p) != get_field(other_image, p)] == ["container.image.id"]


# ----------------------------------------------------------------------------------------------------------
# The Containerfile and the CI check


def stages(text: str) -> dict[str, list[str]]:
    """Instructions of each stage, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out: dict[str, list[str]] = {}
    current = None
    for line in joined.splitlines():
        if not line.strip():
            continue
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if match:
            current = match.group(1)
            out[current] = []
        elif current is not None:
            out[current].append(" ".join(line.split()))
    return out


def test_containerfile_targets_agree() -> None:
    text = (REPO / "Containerfile").read_text()
    parsed = stages(text)
    assert list(parsed) == ["cpu", "gpu"]  # gpu last: the default target of `docker build` and `podman build`
    for name, lines in parsed.items():
        keyword = {line.split()[0] for line in lines}
        assert {"USER", "VOLUME", "ENTRYPOINT", "LABEL", "WORKDIR"} <= keyword, name
        assert 'ENTRYPOINT ["clsbench"]' in lines and 'VOLUME ["/results"]' in lines and "USER clsbench" in lines
        labels = [line for line in lines if line.startswith("LABEL")][0]
        for key in ("org.opencontainers.image.version", "org.opencontainers.image.revision",
                    "org.opencontainers.image.base.name", "io.clsbench.target"):
            assert key in labels, (name, key)
        assert f"/{IMAGE_LABELS_FILE}" in " ".join(lines), name
    version = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    defaults = re.findall(r"^ARG CLSBENCH_VERSION=(\S+)$", text, re.MULTILINE)
    assert defaults == [version, version], "the Containerfile's default CLSBENCH_VERSION must follow pyproject.toml"
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base and base.group(1).startswith("pytorch/pytorch:") and "cuda" in base.group(1)


def test_per_build_arguments_come_after_the_heavy_layer() -> None:
    """A build argument in scope is part of every later RUN's cache key: declared before the torch layer, the commit
    (new with every build) would reinstall torch each time."""
    for name, lines in stages((REPO / "Containerfile").read_text()).items():
        first_run = next(i for i, line in enumerate(lines) if line.startswith("RUN"))
        for arg in ("CLSBENCH_COMMIT", "CLSBENCH_VERSION", "CLSBENCH_UID"):
            declared = [i for i, line in enumerate(lines) if re.match(rf"ARG {arg}\b", line)]
            assert declared and declared[0] > first_run, (name, arg)


def test_containerignore_keeps_what_the_build_copies() -> None:
    lines = [line for line in (REPO / ".containerignore").read_text().splitlines() if line and line[0] != "#"]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!src"} <= set(lines)


def write_outputs(tmp_path: Path, facts: dict, result: dict) -> list[str]:
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    (tmp_path / "quick.json").write_text(json.dumps(result))
    return [sys.executable, str(REPO / ".ci" / "container_check.py"), str(tmp_path / "quick.json"),
            str(tmp_path / "facts.json"), "--commit", "c0ffee" * 6 + "abcd", "--version", "0.1.0",
            "--image", "localhost/clsbench:ci-cpu", "--base", "localhost/clsbench-ci-base:bookworm"]


def podman_facts() -> dict:
    facts = facts_of("podman-v1", {"container": "podman"})
    facts["image"]["labels"]["clsbench_commit"] = "c0ffee" * 6 + "abcd"
    return facts


def test_ci_check_accepts_a_good_run_and_notes_missing_wiring(tmp_path: Path) -> None:
    result = {"environment": {"clsbench": {"git_commit": "c0ffee" * 6 + "abcd"}},
              "measurements": [{"model": "resnet18", "workload": "train", "status": "ok"}]}
    done = subprocess.run(write_outputs(tmp_path, podman_facts(), result), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "NOTE: the result file has no environment.container" in done.stdout
    result["environment"]["container"] = podman_facts()
    done = subprocess.run(write_outputs(tmp_path, podman_facts(), result), capture_output=True, text=True)
    assert done.returncode == 0 and "NOTE" not in done.stdout, done.stdout
    assert "container check: ok (in a podman container" in done.stdout


def test_ci_check_fails_on_wrong_labels_or_a_failed_run(tmp_path: Path) -> None:
    wrong = podman_facts()
    wrong["image"]["labels"]["clsbench_commit"] = "0" * 40
    result = {"environment": {"clsbench": {"git_commit": "c0ffee" * 6 + "abcd"}, "container": wrong},
              "measurements": [{"model": "resnet18", "workload": "train", "status": "crash"}]}
    done = subprocess.run(write_outputs(tmp_path, podman_facts(), result), capture_output=True, text=True)
    assert done.returncode == 1
    assert "result environment.container: image.labels.clsbench_commit" in done.stdout
    assert "1 of 1 measurements not ok" in done.stdout
    not_inside = {**podman_facts(), "in_container": False}
    done = subprocess.run(write_outputs(tmp_path, not_inside, {**result, "measurements": []}), capture_output=True,
                          text=True)
    assert done.returncode == 1 and "facts.json: in_container is False" in done.stdout


def test_the_environment_records_the_container_and_compare_treats_another_image_as_a_difference() -> None:
    """Wired in: ``collect_environment`` carries the container section, its image is a key field (compare and
    resume see it), and a file from before the section exists still resumes."""
    from clsbench.analysis.compare import environment_differences
    from clsbench.engine.runner import check_resume_compatible
    from clsbench.results.facts import KEY_FIELDS
    from clsbench.results.schema import BenchmarkResult
    from clsbench.system.environment import collect_environment

    env = collect_environment("cpu")
    assert "container" in env and "in_container" in env["container"]
    assert "container.image.base" in KEY_FIELDS
    a = BenchmarkResult(environment={"container": {"image": {"base": "pytorch/pytorch:2.11"}}}, settings={})
    b = BenchmarkResult(environment={"container": {"image": {"base": "nvcr.io/nvidia/pytorch:25.01"}}}, settings={})
    assert any(d.field == "container.image.base" for d in environment_differences([a, b]))
    old = BenchmarkResult(environment={"device": "cpu"}, settings={})  # written before containers were recorded
    check_resume_compatible(old, {"device": "cpu", "container": {"runtime": "docker"}}, "old.json")
