"""Named suites: which models, workloads, batch sizes and modes a plain ``clsbench run --suite NAME`` measures."""

from __future__ import annotations

from dataclasses import dataclass

from clsbench.errors import InvalidInputError


@dataclass(frozen=True)
class Suite:
    """A named cross product of models x workloads (each at its batch size) x modes.

    ``amp-bf16`` in ``modes`` becomes ``amp-fp16`` on a GPU without bfloat16 (see :func:`resolve_modes`).
    """

    name: str
    description: str
    models: tuple[str, ...]
    batch_sizes: dict[str, int]  # workload -> batch size
    modes: tuple[str, ...]


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            name="seed",
            description="the five networks of the seed articles: train bs32, latency bs1, throughput bs256",
            models=("resnet50", "resnet101", "mobilenet_v3_large", "efficientnet_b0", "timm/vit_tiny_patch16_224"),
            batch_sizes={"train": 32, "infer-latency": 1, "infer-throughput": 256},
            modes=("fp32", "amp-bf16"),
        ),
        Suite(
            name="quick",
            description="a small CPU default that finishes in about a minute on 2 cores",
            models=("mobilenet_v3_small", "resnet18"),
            batch_sizes={"infer-latency": 1, "infer-throughput": 8, "train": 8},
            modes=("fp32",),
        ),
    )
}


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        raise InvalidInputError(f"unknown suite {name!r}", "choose from: " + ", ".join(SUITES)) from None


def default_suite_name(device: str) -> str:
    """The suite ``clsbench run`` measures when given nothing: seed on a GPU, quick on a CPU."""
    return "seed" if device.startswith("cuda") else "quick"


def resolve_modes(modes: tuple[str, ...], *, bf16_supported: bool) -> tuple[str, ...]:
    """Replace bf16 autocast by fp16 autocast where the GPU lacks bfloat16, as the seed suite specifies."""
    if bf16_supported:
        return modes
    return tuple(m.replace("amp-bf16", "amp-fp16") for m in modes)
