"""Kinds of requirement ``clsbench select`` answers, one module each, registered in :data:`REQUIREMENTS`:
``throughput`` (``--throughput``), ``served`` (``--qps`` with ``--p99-ms``), ``training`` (``--epochs``,
``--dataset-images``, ``--deadline``).

A kind says which options it takes (the command picks the one kind whose options were given), turns them into the
images per second the cards must deliver, names what its latency column holds, gathers each card's candidate
configurations from the results, and says at what rate the chosen cards process images (the served rate, or for a
training job the cards' whole capacity: the job ends early).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.core.registry import Registry
from clsbench.errors import InvalidInputError
from clsbench.procedures.select.candidates import CardCells, Filters, Source


class RequirementKind:
    """The interface of a requirement kind (subclass it and register an instance in :data:`REQUIREMENTS`).

    Attributes:
        options: the requirement's options (their settings names), all required for this kind.
        workloads: the workloads ``--workload`` may name for it (empty: it takes none).
        default_workload: the workload when none is given.
        latency_heading: the heading of the table's latency column (what that p99 is of).
        scaling: whether cards needed uses measured scaling efficiency (training).
    """

    options: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    default_workload: str | None = None
    latency_heading = "p99 ms"
    scaling = False

    def requirement(self, given: Mapping[str, Any], workload: str | None) -> dict[str, Any]:
        """The stored requirement: the options checked, ``target_img_s``, ``workload`` and ``text``.

        Raises:
            InvalidInputError: a value out of range.
        """
        raise NotImplementedError

    def gather(self, sources: Sequence[Source], filters: Filters, requirement: Mapping[str, Any],
               cells: dict[str, CardCells]) -> list[str]:
        """Fill each card's candidates; return notes for the output (estimates made, ...)."""
        raise NotImplementedError

    def rate(self, requirement: Mapping[str, Any], cards: int, capacity: float, efficiency: float) -> float:
        """Images per second the ``cards`` process when they answer the requirement."""
        return float(requirement["target_img_s"])


REQUIREMENTS: Registry[RequirementKind] = Registry("requirement", package="clsbench.procedures.select.kinds")

#: The command-line spelling of each requirement option, for the messages.
OPTION_FLAGS = {"throughput": "--throughput", "qps": "--qps", "p99_ms": "--p99-ms", "epochs": "--epochs",
                "dataset_images": "--dataset-images", "deadline": "--deadline"}


def flag(option: str) -> str:
    return OPTION_FLAGS.get(option, "--" + option.replace("_", "-"))


def kind_for(given: Mapping[str, Any]) -> tuple[str, RequirementKind]:
    """The one kind whose options are exactly those given (None values are not given).

    Raises:
        InvalidInputError: no requirement, options of two kinds, or a kind's options only in part.
    """
    present = {name for name, value in given.items() if value is not None}
    kinds = REQUIREMENTS.items()
    usage = "; ".join(" ".join(f"{flag(o)} N" for o in kind.options) for _, kind in kinds)
    touched = [(name, kind) for name, kind in kinds if present & set(kind.options)]
    if not touched:
        raise InvalidInputError("no requirement given", f"give one of: {usage}")
    if len(touched) > 1:
        raise InvalidInputError(f"options of two requirements given ({', '.join(flag(o) for o in sorted(present))})",
                                "ask one question at a time: " + usage)
    name, kind = touched[0]
    missing = [flag(o) for o in kind.options if o not in present]
    if missing:
        raise InvalidInputError(f"the {name} requirement also needs {', '.join(missing)}",
                                "give " + " ".join(f"{flag(o)} N" for o in kind.options))
    return name, kind


def positive(value: Any, option: str, example: str) -> float:
    """A number above 0 and finite, or one error line naming the option."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{flag(option)} {value!r} is not a number", f"e.g. {flag(option)} {example}") from None
    if not number > 0 or number == float("inf"):
        raise InvalidInputError(f"{flag(option)} must be above 0, not {value}", f"e.g. {flag(option)} {example}")
    return number


def workload_for(kind_name: str, kind: RequirementKind, workload: str | None) -> str | None:
    """The workload the kind answers: ``workload`` if it takes it, else its default.

    Raises:
        InvalidInputError: a workload the kind does not take.
    """
    if workload is None:
        return kind.default_workload
    if workload not in kind.workloads:
        takes = ", ".join(kind.workloads) if kind.workloads else "no --workload (it reads its own results)"
        raise InvalidInputError(f"--workload {workload} does not apply to the {kind_name} requirement",
                                f"it takes {takes}")
    return workload
