"""A Triton model repository on disk: ``config.pbtxt``, the version folder, the README, written atomically.

Layout (Triton's, ``docs/user_guide/model_repository.md``)::

    DIR/<name>/config.pbtxt      the model configuration, protobuf text format (``model_config.proto``)
    DIR/<name>/1/model.onnx      the artifact, version 1, under the platform's default file name
    DIR/<name>/README.txt        what it is, its parity against fp32 eager, how to start Triton on it

Triton reads only the configuration and the numbered version folders; the README beside them is for people.

Nothing is overwritten: an existing ``DIR/<name>`` is an error. The model folder is assembled in a hidden staging
folder inside ``DIR`` (same file system) and renamed into place once complete, so ``DIR`` never holds half a model
that a running Triton (``--model-control-mode=poll``) could pick up.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from clsbench.deploy.base import TensorSpec
from clsbench.errors import InvalidInputError, ResultFileError

#: The version folder written (Triton serves the highest numbered version by default: the only one here).
VERSION = "1"
CONFIG_FILE = "config.pbtxt"
README_FILE = "README.txt"
#: Microseconds per millisecond: ``--max-delay-ms`` becomes ``max_queue_delay_microseconds``.
US_PER_MS = 1000.0
#: Triton's instance kinds by the device the instances run on (``model_config.proto``, ``InstanceGroup.Kind``).
INSTANCE_KINDS = {"cuda": "KIND_GPU", "cpu": "KIND_CPU"}
#: A model name Triton and every file system accept: letters, digits, ``_``, ``-``, ``.``, not starting with ``.``.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
#: The NGC container that runs Triton; ``<yy.mm>`` is its release (README.txt says how to choose it).
NGC_IMAGE = "nvcr.io/nvidia/tritonserver:<yy.mm>-py3"
#: Triton's ports: HTTP, gRPC, metrics.
PORTS = (8000, 8001, 8002)
STAGING_PREFIX = ".clsbench-export-"
#: Permissions of the model's folder: readable by the server's user (a container often runs as another one).
FOLDER_MODE = 0o755


@dataclass(frozen=True)
class Batching:
    """How Triton batches and runs the model: the config's batching and instance fields.

    Attributes:
        max_batch: ``max_batch_size``: the largest batch the dynamic batcher forms (> 0: the model takes a batch
            dimension).
        max_delay_ms: how long a request may wait in the queue for a batch to fill (``max_queue_delay_microseconds``;
            clsbench serve's ``--max-delay-ms``).
        instances: model instances on each device (``instance_group.count``; serve's ``--instances``).
        preferred: ``preferred_batch_size``: sizes the batcher tries to form. Empty by default: Triton's documentation
            advises leaving it unset for most models, so the batcher forms the largest batch available.
        kind: ``KIND_GPU`` or ``KIND_CPU``.
    """

    max_batch: int
    max_delay_ms: float
    instances: int
    preferred: tuple[int, ...] = ()
    kind: str = "KIND_GPU"

    @property
    def max_delay_us(self) -> int:
        return round(self.max_delay_ms * US_PER_MS)

    def validate(self) -> Batching:
        """Raise InvalidInputError naming the option, or return self."""
        if self.max_batch < 1:
            raise InvalidInputError(f"--max-batch must be at least 1, not {self.max_batch}",
                                    "Triton's dynamic batcher needs max_batch_size > 0, e.g. --max-batch 64")
        if self.max_delay_ms < 0:
            raise InvalidInputError(f"--max-delay-ms must be 0 or more, not {self.max_delay_ms:g}", "e.g. 2")
        if self.instances < 1:
            raise InvalidInputError(f"--instances must be at least 1, not {self.instances}", "e.g. --instances 2")
        wrong = [b for b in self.preferred if not 1 <= b <= self.max_batch]
        if wrong:
            raise InvalidInputError(f"--preferred-batch {','.join(map(str, wrong))} is outside 1..{self.max_batch}",
                                    "a preferred batch size is at most --max-batch")
        if self.kind not in INSTANCE_KINDS.values():
            raise InvalidInputError(f"unknown instance kind {self.kind!r}", ", ".join(INSTANCE_KINDS.values()))
        return self


def check_name(name: str) -> str:
    """``name`` if Triton and every file system accept it as a model name; else InvalidInputError."""
    if not NAME_PATTERN.match(name):
        raise InvalidInputError(f"--name {name!r} is not a usable model name",
                                "letters, digits, '_', '-' and '.', not starting with '.', e.g. --name resnet50")
    return name


def default_name(model: str) -> str:
    """A model name from clsbench's model name: ``timm/vit_tiny`` -> ``timm_vit_tiny``, ``pkg:fn`` -> ``pkg_fn``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", model).lstrip(".") or "model"


def _dims(values: Sequence[int]) -> str:
    return "[ " + ", ".join(str(v) for v in values) + " ]"


def _tensor(spec: TensorSpec) -> list[str]:
    return ["  {", f'    name: "{spec.name}"', f"    data_type: {spec.data_type}", f"    dims: {_dims(spec.dims)}",
            "  }"]


def render_config(name: str, platform: str, tensors: tuple[TensorSpec, TensorSpec], batching: Batching) -> str:
    """``config.pbtxt``: the model configuration in protobuf text format.

    Every field the server needs is written out rather than left to Triton's auto-complete, so the file is the
    contract: names, types and shapes (without the batch dimension, which ``max_batch_size`` > 0 adds), the dynamic
    batcher and the instances.
    """
    source, target = tensors
    lines = [f'name: "{check_name(name)}"', f'platform: "{platform}"', f"max_batch_size: {batching.max_batch}",
             "input [", *_tensor(source), "]", "output [", *_tensor(target), "]", "dynamic_batching {"]
    if batching.preferred:
        lines.append(f"  preferred_batch_size: {_dims(batching.preferred)}")
    lines += [f"  max_queue_delay_microseconds: {batching.max_delay_us}", "}",
              "instance_group [", "  {", f"    count: {batching.instances}", f"    kind: {batching.kind}", "  }", "]"]
    return "\n".join(lines) + "\n"


def start_command(repo_dir: Path, kind: str) -> str:
    """How to start Triton on ``repo_dir``: the server binary, or the NGC container (``--gpus all`` for GPUs)."""
    repo = repo_dir.resolve()
    gpus = "--gpus all " if kind == "KIND_GPU" else ""
    ports = " ".join(f"-p{p}:{p}" for p in PORTS)
    return (f"tritonserver --model-repository={repo}   or: docker run {gpus}--rm {ports} -v {repo}:/models "
            f"{NGC_IMAGE} tritonserver --model-repository=/models")


def model_path(repo_dir: Path, name: str) -> Path:
    return repo_dir / name


def check_free(repo_dir: Path, name: str) -> Path:
    """``DIR/<name>``, which must not exist yet (never overwritten); ``DIR`` must be a folder or not exist."""
    if repo_dir.exists() and not repo_dir.is_dir():
        raise ResultFileError(f"--triton-repo {repo_dir} is a file, not a folder", "name a folder (new or existing)")
    target = model_path(repo_dir, name)
    if target.exists():
        raise ResultFileError(f"{target} already exists; clsbench never overwrites a model",
                              "choose another --name, or move the old model away")
    return target


def staging_folder(repo_dir: Path, name: str) -> Path:
    """A new hidden folder inside ``repo_dir`` (created if missing) to assemble the model in; its ``1/`` exists."""
    try:
        repo_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{name}-", dir=repo_dir))
    except OSError as exc:
        raise ResultFileError(f"cannot write in {repo_dir}: {exc.strerror or exc}",
                              "check the folder's permissions") from None
    staging.chmod(FOLDER_MODE)  # mkdtemp's 0700 would hide the model from a server running as another user
    (staging / VERSION).mkdir()
    return staging


def discard(staging: Path) -> None:
    """Remove a staging folder (a failed or abandoned export)."""
    shutil.rmtree(staging, ignore_errors=True)


def commit(staging: Path, repo_dir: Path, name: str, config: str, readme: str) -> Path:
    """Write the config and README into ``staging`` and rename it to ``DIR/<name>``; the model's folder.

    Raises:
        ResultFileError: ``DIR/<name>`` appeared while the model was being built (never overwritten).
    """
    (staging / CONFIG_FILE).write_text(config, encoding="utf-8")
    (staging / README_FILE).write_text(readme, encoding="utf-8")
    target = check_free(repo_dir, name)
    staging.rename(target)
    return target
