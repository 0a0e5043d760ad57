"""Find the usable images of an ImageFolder-style directory; name every file skipped and why. Pure Python.

Layout: ``ROOT/<class>/**/<image>``, one sub-folder per class (sorted by name; label = position), images anywhere
below it, as torchvision's ``ImageFolder`` reads it. Files directly in ROOT are ignored (the dataset manifest of
``clsbench data make`` lives there); hidden entries (``.name``) are ignored.

Each file is checked cheaply, without decoding, so that tens of thousands scan in about a second:

* a regular file (FIFOs, sockets and devices are skipped: reading one could block forever);
* an image extension (``.jpg``, ``.jpeg``, ``.png``, any case);
* not empty, and readable;
* a JPEG or PNG signature in its first bytes (the content decides, not the extension);
* an end marker in its last :data:`TAIL_BYTES` bytes (JPEG ``FF D9``; PNG ``IEND``): a truncated file lacks it.
  Inside a JPEG's entropy-coded data ``FF`` is always followed by ``00`` or a restart marker, so ``FF D9`` near the
  end means the stream reached its end.

A file that passes but still fails to decode (damage in the middle) is caught by the pipeline at decode time,
named in the result, and replaced by another image of the dataset.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from clsbench.data.errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
#: Bytes read from the end of each file to find its end marker.
TAIL_BYTES = 1024
JPEG_SIGNATURE = b"\xff\xd8\xff"
JPEG_END = b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND"
#: How many skipped files a warning names before it says "and N more".
NAMED_IN_WARNINGS = 5


@dataclass(frozen=True)
class Skipped:
    path: str  # relative to the dataset root
    reason: str


@dataclass(frozen=True)
class DatasetIndex:
    """The usable images of a dataset and what was left out.

    ``files``, ``labels``, ``kinds`` (``jpeg`` or ``png``) and ``sizes`` (bytes) are parallel, in class order and
    then path order; paths are relative to ``root``.
    """

    root: str
    classes: tuple[str, ...]
    files: tuple[str, ...]
    labels: tuple[int, ...]
    kinds: tuple[str, ...]
    sizes: tuple[int, ...]
    skipped: tuple[Skipped, ...] = ()
    empty_classes: tuple[str, ...] = ()
    ignored_top_level: int = 0
    fingerprint: str = field(default="")

    def __len__(self) -> int:
        return len(self.files)

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def path(self, i: int) -> str:
        return os.path.join(self.root, self.files[i])

    def warnings(self) -> list[str]:
        """What was left out, in words, naming the files (the first few of each kind)."""
        out = []
        if self.skipped:
            named = ", ".join(f"{s.path} ({s.reason})" for s in self.skipped[:NAMED_IN_WARNINGS])
            more = len(self.skipped) - NAMED_IN_WARNINGS
            out.append(f"skipped {len(self.skipped)} file(s) in {self.root}: {named}"
                       + (f" and {more} more" if more > 0 else ""))
        if self.empty_classes:
            names = ", ".join(self.empty_classes[:NAMED_IN_WARNINGS])
            more = len(self.empty_classes) - NAMED_IN_WARNINGS
            out.append(f"{len(self.empty_classes)} class folder(s) without a usable image, left out: {names}"
                       + (f" and {more} more" if more > 0 else ""))
        return out

    def facts(self, limit: int = 50) -> dict[str, object]:
        """The facts a result records about the dataset (the first ``limit`` skipped files by name)."""
        return {
            "directory": self.root,
            "images": len(self.files),
            "classes": len(self.classes),
            "bytes": self.total_bytes,
            "skipped_n": len(self.skipped),
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped[:limit]],
            "empty_classes": list(self.empty_classes[:limit]),
            "fingerprint": self.fingerprint,
        }


def check_file(path: str) -> tuple[str | None, str | None, int]:
    """(kind, reason, size) of one file: kind ``jpeg``/``png`` when usable, else the reason it is skipped."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return None, f"cannot stat: {exc.strerror or exc}", 0
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file", 0
    if not path.lower().endswith(IMAGE_EXTENSIONS):
        return None, f"not an image file (extension {Path(path).suffix or 'none'})", info.st_size
    if info.st_size == 0:
        return None, "empty file", 0
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
            if info.st_size > TAIL_BYTES:
                fh.seek(-TAIL_BYTES, os.SEEK_END)
                tail = fh.read()
            else:
                tail = head + fh.read()
    except PermissionError:
        return None, "unreadable: permission denied", info.st_size
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}", info.st_size
    if head.startswith(JPEG_SIGNATURE):
        if JPEG_END not in tail:
            return None, "truncated JPEG (no end-of-image marker)", info.st_size
        return "jpeg", None, info.st_size
    if head.startswith(PNG_SIGNATURE):
        if PNG_END not in tail[-32:]:
            return None, "truncated PNG (no IEND chunk)", info.st_size
        return "png", None, info.st_size
    return None, "not a JPEG or PNG image (unrecognised header)", info.st_size


def _walk(directory: str) -> list[str]:
    """Every non-hidden file below ``directory`` (following links, as ImageFolder does), in sorted path order."""
    out = []
    for current, dirs, files in os.walk(directory, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(os.path.join(current, f) for f in sorted(files) if not f.startswith("."))
    return out


def _class_folders(path: Path) -> tuple[list[os.DirEntry[str]], int]:
    """The class folders directly below ``path``, and how many other (ignored) entries it holds.

    Raises:
        DataError: ``path`` is missing, not a directory, unreadable, empty, or has no class folder.
    """
    hint = "create one with `clsbench data make DIR --images N --classes C`"
    if not path.exists():
        raise DataError(f"data directory {path} does not exist", hint)
    if not path.is_dir():
        raise DataError(f"data directory {path} is not a directory", "pass the dataset's root folder")
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except PermissionError:
        raise DataError(f"data directory {path} cannot be read: permission denied", "check its permissions") from None
    except OSError as exc:
        raise DataError(f"data directory {path} cannot be read: {exc.strerror or exc}") from None
    class_dirs = [e for e in entries if not e.name.startswith(".") and e.is_dir()]
    if not class_dirs:
        what = "is empty" if not entries else "has no class folders (ImageFolder layout: DIR/<class>/<image>)"
        raise DataError(f"data directory {path} {what}", hint)
    return class_dirs, sum(1 for e in entries if not e.name.startswith(".") and not e.is_dir())


def scan_folder(root: str | os.PathLike[str]) -> DatasetIndex:
    """Index the usable images below ``root``.

    Raises:
        DataError: ``root`` is missing, not a directory or unreadable; it has no class folder; or no usable image
            is left (the message names what was skipped).
    """
    path = Path(root).expanduser()
    class_dirs, ignored_top = _class_folders(path)
    classes: list[str] = []
    files: list[str] = []
    labels: list[int] = []
    kinds: list[str] = []
    sizes: list[int] = []
    skipped: list[Skipped] = []
    empty: list[str] = []
    for entry in class_dirs:
        found = 0
        for file_path in _walk(entry.path):
            kind, reason, size = check_file(file_path)
            relative = os.path.relpath(file_path, path)
            if kind is None:
                skipped.append(Skipped(relative, reason or "unusable"))
                continue
            if not found:
                classes.append(entry.name)
            found += 1
            files.append(relative)
            labels.append(len(classes) - 1)
            kinds.append(kind)
            sizes.append(size)
        if not found:
            empty.append(entry.name)
    digest = hashlib.sha256()
    for name, size in zip(files, sizes, strict=True):
        digest.update(f"{name}\0{size}\n".encode())
    index = DatasetIndex(root=str(path.resolve()), classes=tuple(classes), files=tuple(files), labels=tuple(labels),
                         kinds=tuple(kinds), sizes=tuple(sizes), skipped=tuple(skipped), empty_classes=tuple(empty),
                         ignored_top_level=ignored_top, fingerprint=f"{len(files)}:{digest.hexdigest()[:16]}")
    if not files:
        reasons = "; ".join(index.warnings()) or "no files"
        raise DataError(f"no usable image in {path}: {reasons}", "add JPEG or PNG files under DIR/<class>/")
    return index
