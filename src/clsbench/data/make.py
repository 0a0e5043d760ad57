"""``clsbench data make``: a realistic JPEG dataset generated locally, seeded and reproducible.

Nothing can be downloaded, so the images are built from what installed packages ship: the photographs bundled with
scikit-image (``skimage/data``) and matplotlib (``mpl-data/sample_data``), when installed, at least
:data:`MIN_BASE_SIDE` pixels on their short side; plus :data:`PROCEDURAL_BASES` procedurally drawn pictures (colour
waves, blurred shapes, a fine texture), so the generator works with neither. Every image, from its own generator
seeded with (seed, image number):

1. picks a base (the class's own base 70% of the time, else any), crops a random box (20-100% of its area, aspect
   ratio around the output's), flips it horizontally half the time;
2. resizes the crop to the output size (default 500x375, portrait 375x500 a quarter of the time, each side scaled
   by a common random factor in 0.85-1.15: ImageNet-like sizes);
3. colour jitter: per-channel gains (the class's tint times a random factor), contrast, brightness, saturation;
4. Gaussian noise (sigma 8-16 grey levels), like sensor noise;
5. JPEG encoding with Pillow (baseline, 4:2:0), quality uniform in ``quality`` +- 5.

About 100 KB per image at the defaults. Image ``i`` belongs to class ``i mod classes`` and is written to
``DIR/class_<c>/img_<i>.jpg``; the work is spread over processes, and the bytes depend only on the seed, the options,
the base images found (the manifest lists them with their SHA-256) and the Pillow/libjpeg build, never on the number
of processes. ``DIR/clsbench-dataset.json`` (the manifest) records all of that. An existing non-empty ``DIR`` is
refused: a dataset is never overwritten.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.results.io import write_bytes_atomic, write_text_atomic

MANIFEST_NAME = "clsbench-dataset.json"
MANIFEST_FORMAT = 1
#: Base pictures smaller than this on their short side are not used (upscaled, they would compress too well).
MIN_BASE_SIDE = 256
#: Base pictures are shrunk to at most this on their long side once, when loaded.
MAX_BASE_SIDE = 1024
PROCEDURAL_BASES = 16
PROCEDURAL_SIDE = 768
#: Share of a class's images drawn from the class's own base picture.
OWN_BASE_SHARE = 0.7
CROP_AREA = (0.2, 1.0)
SCALE = (0.85, 1.15)
PORTRAIT_SHARE = 0.25
NOISE_SIGMA = (8.0, 16.0)
QUALITY_SPREAD = 5
MAX_IMAGES = 10_000_000
MAX_CLASSES = 100_000
#: Images handed to a process at a time.
CHUNK = 32


@dataclass(frozen=True)
class MakeSpec:
    images: int
    classes: int
    seed: int = 0
    width: int = 500
    height: int = 375
    quality: int = 90

    def validate(self) -> MakeSpec:
        if isinstance(self.images, bool) or not 1 <= self.images <= MAX_IMAGES:
            raise InvalidInputError(f"--images must lie in 1..{MAX_IMAGES}, got {self.images}", "e.g. --images 20000")
        if isinstance(self.classes, bool) or not 1 <= self.classes <= MAX_CLASSES:
            raise InvalidInputError(f"--classes must lie in 1..{MAX_CLASSES}, got {self.classes}",
                                    "e.g. --classes 100")
        if self.classes > self.images:
            raise InvalidInputError(f"{self.classes} classes need at least as many images, got {self.images}",
                                    "raise --images or lower --classes")
        if not (8 <= self.width <= 8192 and 8 <= self.height <= 8192):
            raise InvalidInputError(f"image size {self.width}x{self.height} is out of range", "use 8..8192, e.g. "
                                    "--size 500x375")
        if not 1 <= self.quality <= 100:
            raise InvalidInputError(f"--quality must lie in 1..100, got {self.quality}", "e.g. --quality 90")
        return self


@dataclass(frozen=True)
class MakeResult:
    directory: str
    images: int
    classes: int
    bytes: int
    seconds: float
    jobs: int
    sources: list[dict[str, Any]] = field(default_factory=list)

    @property
    def mean_bytes(self) -> float:
        return self.bytes / self.images if self.images else 0.0


def parse_size(text: str) -> tuple[int, int]:
    """``"500x375"`` -> (500, 375)."""
    parts = text.lower().replace(" ", "").split("x")
    try:
        width, height = (int(p) for p in parts)
    except ValueError:
        raise InvalidInputError(f"size {text!r} is not WIDTHxHEIGHT", "e.g. --size 500x375") from None
    return width, height


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def base_image_files() -> list[Path]:
    """Photographs shipped by installed packages (scikit-image, matplotlib), sorted by name within each."""
    found: list[Path] = []
    skimage = _package_dir("skimage")
    if skimage is not None:
        found += sorted(p for p in (skimage / "data").glob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    mpl = _package_dir("matplotlib")
    if mpl is not None:
        found += sorted(p for p in (mpl / "mpl-data" / "sample_data").glob("*")
                        if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    return found


def usable_base_files() -> list[tuple[Path, dict[str, Any]]]:
    """The bundled photographs large enough to use, each with its manifest entry (name, SHA-256, size)."""
    from PIL import Image

    out = []
    for path in base_image_files():
        try:
            data = path.read_bytes()
            with Image.open(io.BytesIO(data)) as image:
                size = image.size
        except Exception:  # noqa: BLE001 - an unreadable bundled file is simply not used
            continue
        if min(size) < MIN_BASE_SIDE:
            continue
        out.append((path, {"file": f"{path.parent.parent.name}/{path.parent.name}/{path.name}",
                           "sha256": hashlib.sha256(data).hexdigest()[:16], "size": list(size)}))
    return out


def describe_bases() -> list[dict[str, Any]]:
    """The manifest's list of base pictures: the bundled photographs, then the procedural ones."""
    return [entry for _, entry in usable_base_files()] + [{"procedural": k} for k in range(PROCEDURAL_BASES)]


def load_bases(seed: int) -> list[Any]:
    """The base pictures as RGB uint8 arrays, in :func:`describe_bases` order."""
    import numpy as np
    from PIL import Image

    bases: list[Any] = []
    for path, _ in usable_base_files():
        with Image.open(path) as image:
            picture = image.convert("RGB")
        if max(picture.size) > MAX_BASE_SIDE:
            factor = MAX_BASE_SIDE / max(picture.size)
            picture = picture.resize((round(picture.width * factor), round(picture.height * factor)),
                                     Image.BILINEAR)
        bases.append(np.asarray(picture))
    for k in range(PROCEDURAL_BASES):
        bases.append(procedural_picture(np.random.default_rng([seed, 7_000_000 + k]), PROCEDURAL_SIDE))
    return bases


def procedural_picture(rng: Any, side: int) -> Any:
    """A drawn picture: soft colour waves, blurred ellipses and rectangles in muted colours, a fine texture."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    canvas = np.empty((side, side, 3), np.float32)
    for c in range(3):
        a, b, phase = rng.uniform(-1.0, 1.0, 3)
        canvas[..., c] = 120.0 + 60.0 * np.sin(2 * np.pi * (2 * a * x + 2 * b * y) + 3 * phase)
    picture = Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    for _ in range(int(rng.integers(8, 30))):
        x0, y0 = (int(v) for v in rng.integers(0, side, 2))
        w, h = (int(v) for v in rng.integers(side // 30, side // 2, 2))
        grey = float(rng.uniform(40, 220))
        colour = tuple(int(np.clip(grey + d, 0, 255)) for d in rng.normal(0.0, 35.0, 3))
        box = [x0, y0, x0 + w, y0 + h]
        draw.ellipse(box, fill=colour) if rng.random() < 0.6 else draw.rectangle(box, fill=colour)
    picture = picture.filter(ImageFilter.GaussianBlur(float(rng.uniform(1.0, 4.0))))
    texture = rng.standard_normal((side // 2, side // 2)).astype(np.float32) * 14.0 + 128.0
    fine = Image.fromarray(np.clip(texture, 0, 255).astype(np.uint8)).resize((side, side), Image.BICUBIC)
    out = np.asarray(picture, np.float32) + (np.asarray(fine, np.float32)[..., None] - 128.0)
    return np.clip(out, 0, 255).astype(np.uint8)


def class_tints(spec: MakeSpec, bases: int) -> list[tuple[int, tuple[float, float, float]]]:
    """Per class: its own base picture and its colour tint."""
    import numpy as np

    out = []
    for c in range(spec.classes):
        rng = np.random.default_rng([spec.seed, 9_000_000 + c])
        out.append((int(rng.integers(bases)), tuple(float(g) for g in rng.uniform(0.8, 1.2, 3))))
    return out


def render(i: int, spec: MakeSpec, bases: list[Any], tints: list[tuple[int, tuple[float, float, float]]]) -> bytes:
    """The JPEG bytes of image ``i`` (module docstring)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng([spec.seed, i])
    own, tint = tints[i % spec.classes]
    base = bases[own] if rng.random() < OWN_BASE_SHARE else bases[int(rng.integers(len(bases)))]
    portrait = rng.random() < PORTRAIT_SHARE
    out_w, out_h = (spec.height, spec.width) if portrait else (spec.width, spec.height)
    scale = rng.uniform(*SCALE)
    out_w, out_h = max(8, round(out_w * scale)), max(8, round(out_h * scale))
    height, width = base.shape[:2]
    area = rng.uniform(*CROP_AREA) * height * width
    aspect = (out_w / out_h) * math.exp(rng.uniform(math.log(0.8), math.log(1.25)))
    crop_w = max(1, min(width, round(math.sqrt(area * aspect))))
    crop_h = max(1, min(height, round(math.sqrt(area / aspect))))
    top = int(rng.integers(0, height - crop_h + 1))
    left = int(rng.integers(0, width - crop_w + 1))
    picture = Image.fromarray(base[top:top + crop_h, left:left + crop_w])
    if rng.random() < 0.5:
        picture = picture.transpose(Image.FLIP_LEFT_RIGHT)
    picture = picture.resize((out_w, out_h), Image.BILINEAR)

    # Colour jitter as one 3x3 colour matrix and an offset, applied in a single pass: per-channel gains (tint x a
    # random factor), saturation (towards the pixel's grey), then contrast around the mean, and brightness.
    pixels = np.asarray(picture, np.float32).reshape(-1, 3)
    gains = np.asarray(tint, np.float32) * rng.uniform(0.9, 1.1, 3).astype(np.float32)
    contrast, brightness, saturation = rng.uniform(0.75, 1.25), rng.uniform(0.8, 1.2), rng.uniform(0.6, 1.4)
    towards_grey = saturation * np.eye(3, dtype=np.float32) + np.float32((1.0 - saturation) / 3.0)
    matrix = (np.diag(gains) @ towards_grey * contrast).astype(np.float32)
    mean = float(pixels[::17].mean()) * float(gains.mean())
    # Three broadcast multiply-adds rather than `pixels @ matrix`: a matrix product goes to BLAS, which runs its own
    # thread pool inside each of the generator processes (16 processes made only 105 images/s on a 16-core machine).
    pixels = (pixels[:, 0:1] * matrix[0] + pixels[:, 1:2] * matrix[1] + pixels[:, 2:3] * matrix[2]
              + np.float32(mean * (brightness - contrast)))
    pixels += rng.standard_normal(pixels.shape, dtype=np.float32) * np.float32(rng.uniform(*NOISE_SIGMA))
    np.clip(pixels, 0, 255, out=pixels)
    image = Image.fromarray(pixels.astype(np.uint8).reshape(out_h, out_w, 3))
    quality = int(np.clip(spec.quality + rng.integers(-QUALITY_SPREAD, QUALITY_SPREAD + 1), 1, 100))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def image_path(directory: Path, i: int, spec: MakeSpec) -> Path:
    digits = max(4, len(str(spec.classes - 1)))
    return directory / f"class_{i % spec.classes:0{digits}d}" / f"img_{i:07d}.jpg"


# State of each generator process, set once by the pool's initializer.
_STATE: dict[str, Any] = {}


def _init(spec: MakeSpec, directory: str) -> None:
    bases = load_bases(spec.seed)
    _STATE.update(spec=spec, directory=Path(directory), bases=bases, tints=class_tints(spec, len(bases)))


def _work(chunk: tuple[int, int]) -> tuple[int, int]:
    spec, directory = _STATE["spec"], _STATE["directory"]
    written = 0
    for i in range(*chunk):
        data = render(i, spec, _STATE["bases"], _STATE["tints"])
        write_bytes_atomic(image_path(directory, i, spec), data, durable=False)  # whole or absent, even on a full disk
        written += len(data)
    return chunk[1] - chunk[0], written


def check_target(directory: Path) -> None:
    """Refuse an existing non-empty directory, or a path that is a file."""
    if directory.exists() and not directory.is_dir():
        raise ResultFileError(f"{directory} exists and is not a directory", "choose another DIR")
    if directory.is_dir() and any(directory.iterdir()):
        raise ResultFileError(f"{directory} is not empty; clsbench never overwrites a dataset",
                              "choose a new DIR, or delete this one first")


def make_dataset(directory: str | os.PathLike[str], spec: MakeSpec, *, jobs: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> MakeResult:
    """Generate ``spec.images`` JPEGs under ``directory`` (module docstring) and write the manifest.

    Args:
        directory: the new dataset's root; it must not exist or be empty.
        spec: how many images and classes, the seed, the output size and quality.
        jobs: processes to use (default: the CPU count, at most one per chunk of images).
        progress: called with (images done, images in all) as chunks finish.

    Raises:
        InvalidInputError: a bad option. ResultFileError: ``directory`` is not empty, or cannot be written.
    """
    spec.validate()
    root = Path(directory).expanduser()
    check_target(root)
    t0 = time.perf_counter()
    try:
        for c in range(spec.classes):
            image_path(root, c, spec).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultFileError(f"cannot create {root}: {exc.strerror or exc}", "choose another DIR") from None
    chunks = [(start, min(start + CHUNK, spec.images)) for start in range(0, spec.images, CHUNK)]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(chunks)))
    done = written = 0
    try:
        done, written = _render_all(root, spec, chunks, workers, progress)
    except ResultFileError as exc:
        raise ResultFileError(f"{exc.message}; {root} holds an incomplete dataset without a manifest",
                              "free some space (or choose another DIR), delete this one, and make it again") from None
    seconds = time.perf_counter() - t0
    result = MakeResult(directory=str(root.resolve()), images=spec.images, classes=spec.classes, bytes=written,
                        seconds=seconds, jobs=workers, sources=describe_bases())
    write_manifest(root, spec, result)
    return result


def _render_all(root: Path, spec: MakeSpec, chunks: list[tuple[int, int]], workers: int,
                progress: Callable[[int, int], None] | None) -> tuple[int, int]:
    """Render and write every chunk (in ``workers`` processes); return (images, bytes) written."""
    done = written = 0
    if workers == 1:
        _init(spec, str(root))
        if progress:
            progress(0, spec.images)
        for count, size in map(_work, chunks):
            done, written = done + count, written + size
            if progress:
                progress(done, spec.images)
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        with context.Pool(workers, initializer=_init, initargs=(spec, str(root))) as pool:
            if progress:  # only now: a live progress bar runs a thread, and the pool must fork without one
                progress(0, spec.images)
            for count, size in pool.imap_unordered(_work, chunks):
                done, written = done + count, written + size
                if progress:
                    progress(done, spec.images)
    return done, written


def write_manifest(root: Path, spec: MakeSpec, result: MakeResult) -> None:
    import numpy
    import PIL


    manifest = {
        "format": MANIFEST_FORMAT,
        "tool": "clsbench data make",
        "spec": asdict(spec),
        "images": result.images,
        "classes": result.classes,
        "bytes": result.bytes,
        "generation_s": result.seconds,
        "processes": result.jobs,
        "bases": result.sources,
        "software": {"pillow": PIL.__version__, "numpy": numpy.__version__},
    }
    write_text_atomic(root / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")
