"""The artifact cache: one build per (model, weights, mode, backend, shape, device, library versions).

Repeats run in fresh processes; without a cache each would export and compile again (minutes for AOTInductor or
TensorRT on a large network). An entry is a folder named by the key (:func:`cache_key`, a SHA-256 of the fields
that decide the artifact) holding the backend's files and ``manifest.json``: the key's fields, every file's size
and SHA-256, the build's time and facts. A build is written into a staging folder and renamed into place, so a
crash mid-build leaves no entry that looks complete.

Location: ``$CLSBENCH_CACHE``, else ``~/.cache/clsbench/artifacts`` (:data:`DEFAULT_CACHE_DIR`). Nothing is ever
downloaded into it; deleting it only costs rebuilds.

An entry whose manifest is missing, unreadable or of another format is *stale*; one whose files do not match their
recorded sizes and hashes is *corrupt*; one that fails to load is *unloadable*. Each is rebuilt, and the result
says so once (``rebuilt_reason``). Changing a library version changes the key, so an old entry is never reused.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clsbench.backends.base import BackendRequest

if TYPE_CHECKING:
    import torch

#: Environment variable that moves the cache.
CACHE_ENV = "CLSBENCH_CACHE"
DEFAULT_CACHE_DIR = Path("~/.cache/clsbench/artifacts")
MANIFEST = "manifest.json"
#: Version of the manifest's layout; an entry written with another is stale (rebuilt).
MANIFEST_FORMAT = 1
#: Bumped when what a backend writes changes meaning without a library version changing; part of every key.
ARTIFACT_FORMAT = 1
#: Files are hashed in chunks of this size (memory stays flat for a multi-GB engine).
HASH_CHUNK_BYTES = 1 << 20


def default_cache_dir() -> Path:
    """``$CLSBENCH_CACHE`` if set, else ``~/.cache/clsbench/artifacts``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else DEFAULT_CACHE_DIR.expanduser()


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of the model's state (names, dtypes, shapes and values of every parameter and buffer).

    The model name and seed decide the weights only as long as the builder and torch's initialisation do not
    change; the digest makes "same weights" exact (and a deliberately perturbed model another artifact). Values
    are hashed in their logical (contiguous) order, so the memory format, which the key carries separately, does
    not change the digest. A ResNet-50 (25.6 M parameters) takes about 0.1 s.
    """
    import torch

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        if tensor.device.type == "meta":
            raise ValueError(f"model state {name!r} is on the meta device (the model was released)")
        flat = tensor.reshape(-1).contiguous().cpu()
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def device_identity(device: str) -> str:
    """What a compiled artifact is specific to: the GPU's name and compute capability, or the CPU's model.

    An AOTInductor package or TensorRT engine holds kernels for one GPU architecture (and AOTInductor's CPU code
    for one instruction set), so a cache shared between machines must not hand one machine's build to another.
    """
    if device.startswith("cuda"):
        import torch

        index = int(device.partition(":")[2] or 0)
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda|{torch.cuda.get_device_name(index)}|sm_{major}{minor}"
    return f"cpu|{platform.machine()}|{_cpu_model()}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cache_key(fields: Mapping[str, Any]) -> str:
    """SHA-256 of the key fields, serialised canonically (sorted keys)."""
    text = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def key_fields(request: BackendRequest, backend: str, versions: Mapping[str, str], weights: str, device: str,
               variant: str | None = None) -> dict[str, Any]:
    """Everything that decides an artifact: model and weights, mode (without ``+cudagraph``, which wraps a loaded
    artifact), backend (and a forced build variant), input shape and dtype, device identity, library versions."""
    fields: dict[str, Any] = {
        "artifact_format": ARTIFACT_FORMAT,
        "backend": backend,
        "model": request.model,
        "mode": request.artifact_mode,
        "input_shape": list(request.input_shape),
        "dtype": request.dtype_name,
        "seed": request.seed,
        "num_classes": request.num_classes,
        "weights_sha256": weights,
        "device": device,
        "versions": dict(sorted(versions.items())),
    }
    if variant is not None:
        fields["variant"] = variant
    return fields


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheEntry:
    """A complete, verified cache entry."""

    key: str
    path: Path  # the entry's folder; the backend's files live in it
    manifest: dict[str, Any]

    @property
    def artifact_bytes(self) -> int:
        return sum(int(f["bytes"]) for f in self.manifest.get("files", {}).values())


class ArtifactCache:
    """Artifacts on disk, one folder per key.

    Args:
        root: the cache folder; None: :func:`default_cache_dir`.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_cache_dir()

    def __repr__(self) -> str:
        return f"ArtifactCache({str(self.root)!r})"

    def entry_path(self, key: str) -> Path:
        return self.root / key

    def lookup(self, key: str) -> tuple[CacheEntry | None, str | None]:
        """The verified entry for ``key``, or None and why an existing entry cannot be used.

        Returns:
            ``(entry, None)`` for a usable entry; ``(None, None)`` when there is none; ``(None, reason)`` when
            one exists but is stale or corrupt (the caller rebuilds it and reports the reason).
        """
        path = self.entry_path(key)
        if not path.exists():
            return None, None
        manifest_path = path / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None, "stale: the entry has no manifest (an interrupted build)"
        except (OSError, ValueError) as exc:
            return None, f"corrupt: unreadable manifest ({type(exc).__name__})"
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else None
            return None, f"stale: manifest format {found!r}, this clsbench writes {MANIFEST_FORMAT}"
        if manifest.get("key") != key:
            return None, "corrupt: the manifest belongs to another key"
        files = manifest.get("files")
        if not isinstance(files, dict) or not files:
            return None, "corrupt: the manifest lists no files"
        for name, info in files.items():
            file = path / name
            try:
                size = file.stat().st_size
            except OSError:
                return None, f"corrupt: {name} is missing"
            if size != info.get("bytes"):
                return None, f"corrupt: {name} has {size} bytes, the manifest says {info.get('bytes')}"
            if file_sha256(file) != info.get("sha256"):
                return None, f"corrupt: {name} does not match its recorded SHA-256"
        return CacheEntry(key=key, path=path, manifest=manifest), None

    def staging(self, key: str) -> Path:
        """A fresh, empty folder next to the entries to build into (same filesystem, so the rename is atomic)."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", suffix=".building", dir=self.root))

    def commit(self, key: str, staging: Path, fields: Mapping[str, Any], *, backend: str, variant: str,
               build_s: float | None, build_facts: Mapping[str, Any], exclude: tuple[str, ...] = ()) -> CacheEntry:
        """Write the manifest into ``staging`` and move it into place as the entry for ``key``.

        An existing entry for the key (stale, corrupt, or built meanwhile by another process) is replaced.

        Args:
            exclude: file names in ``staging`` that are not part of the artifact (build logs, the weights file).
        """
        files = {}
        for file in sorted(p for p in staging.rglob("*") if p.is_file()):
            name = file.relative_to(staging).as_posix()
            if name == MANIFEST or name in exclude:
                continue
            files[name] = {"bytes": file.stat().st_size, "sha256": file_sha256(file)}
        manifest = {
            "format": MANIFEST_FORMAT,
            "key": key,
            "fields": dict(fields),
            "backend": backend,
            "variant": variant,
            "build_s": build_s,
            "build_facts": dict(build_facts),
            "files": files,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        tmp = staging / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str), encoding="utf-8")
        os.replace(tmp, staging / MANIFEST)
        target = self.entry_path(key)
        if target.exists():
            self.evict(key)
        try:
            os.replace(staging, target)
        except OSError:  # another process committed the same key between the two lines above: keep theirs
            shutil.rmtree(staging, ignore_errors=True)
            entry, reason = self.lookup(key)
            if entry is None:
                raise OSError(f"the cache entry {target} could not be committed ({reason})") from None
            return entry
        return CacheEntry(key=key, path=target, manifest=manifest)

    def evict(self, key: str) -> None:
        """Remove the entry for ``key`` (renamed aside first, so no reader sees half a folder)."""
        target = self.entry_path(key)
        if not target.exists():
            return
        aside = target.with_name(f".{key[:16]}-{os.getpid()}.evicted")
        try:
            os.replace(target, aside)
        except OSError:
            aside = target
        shutil.rmtree(aside, ignore_errors=True)

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)
