"""``--epochs E --dataset-images N --deadline 24h``: a training job of E x N images done within the deadline,
turned into the images per second it needs, answered from the ``train`` cells; cards needed uses the card's
measured scaling efficiency from a ``scale`` result where one exists (:mod:`clsbench.procedures.select.scaling`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.core.durations import parse_duration
from clsbench.core.text_table import fmt_rate
from clsbench.procedures.select.candidates import CardCells, Filters, Source, gather_cells
from clsbench.procedures.select.kinds import REQUIREMENTS, RequirementKind, positive, workload_for


def hours_text(seconds: float) -> str:
    return f"{seconds / 3600:.3g} h"


class Training(RequirementKind):
    options = ("epochs", "dataset_images", "deadline")
    workloads = ("train",)
    default_workload = "train"
    latency_heading = "step p99 ms"
    scaling = True

    def requirement(self, given: Mapping[str, Any], workload: str | None) -> dict[str, Any]:
        epochs = positive(given["epochs"], "epochs", "90")
        images = positive(given["dataset_images"], "dataset_images", "1281167")
        deadline_s = parse_duration(given["deadline"], "--deadline")
        total = epochs * images
        target = total / deadline_s
        return {"kind": "training", "epochs": epochs, "dataset_images": images, "deadline_s": deadline_s,
                "total_images": total, "target_img_s": target, "workload": workload_for("training", self, workload),
                "text": (f"{epochs:g} epochs of {images:,.0f} images within {hours_text(deadline_s)} "
                         f"({fmt_rate(target)} img/s of train)")}

    def gather(self, sources: Sequence[Source], filters: Filters, requirement: Mapping[str, Any],
               cells: dict[str, CardCells]) -> list[str]:
        gather_cells(sources, filters, ["train"], cells)
        return []

    def rate(self, requirement: Mapping[str, Any], cards: int, capacity: float, efficiency: float) -> float:
        return cards * capacity * efficiency  # the cards train flat out: the job ends before the deadline


REQUIREMENTS.register("training", Training())
