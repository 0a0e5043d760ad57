"""What ``export --from serve.json`` deploys: the best Server answer of a stored ``clsbench serve`` result.

A serve result holds one measurement per (mode, backend, scenario); a Server measurement's answer is the highest
target QPS that met the latency bound, reached at one batching setting (max batch, max delay, instances). The
winner is the Server answer with the highest QPS over every mode and backend; its setting is read from the LoadGen
run the answer comes from (the scenario's headline, :func:`clsbench.serving.analysis.scenario_summary`, the same
one ``show`` prints), its backend from the measurement (``eager`` in files written before serve measured others).
Pure: reads the file's contents, runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError
from clsbench.results.schema import BenchmarkResult
from clsbench.serving import records
from clsbench.serving.analysis import is_serve_result, scenario_of, scenario_summary, serve_measurements

SERVER = "server"


@dataclass(frozen=True)
class ServeWinner:
    """The best Server answer of a serve result and where it was reached.

    Attributes:
        source: the file it was read from.
        model, mode, backend: the measurement's.
        max_batch, max_delay_ms, instances: the batching setting of the answer's LoadGen run.
        qps: the answer (queries per second at the bound).
        label: the answer's label (``server QPS (p99 <= 15 ms)``).
        input_size: the served input size (None: the model's own).
        seed: the weights' seed.
        device: the device served on (``cuda``, ``cuda:1``, ``cpu``), if recorded.
    """

    source: str
    model: str
    mode: str
    backend: str
    max_batch: int
    max_delay_ms: float
    instances: int
    qps: float
    label: str
    input_size: int | None = None
    seed: int | None = None
    device: str | None = None

    @property
    def setting(self) -> str:
        return records.setting_label({"max_batch": self.max_batch, "max_delay_ms": self.max_delay_ms,
                                      "instances": self.instances})

    def describe(self) -> str:
        """One line: ``fp16+cl on eager: 14,000 qps (server QPS (p99 <= 15 ms)) at b64 d2ms i2``."""
        return f"{self.mode} on {self.backend}: {self.qps:,.0f} qps ({self.label}) at {self.setting}"


def server_winner(result: BenchmarkResult, source: str) -> ServeWinner:
    """The best Server answer of ``result`` (read from ``source``).

    Raises:
        InvalidInputError: ``result`` is not a serve result, or holds no Server answer (no server scenario, or
            none of its runs met the latency bound).
    """
    if not is_serve_result(result):
        raise InvalidInputError(f"{source} is not a `clsbench serve` result (it has no serve settings)",
                                "give --from a file that `clsbench serve --scenario server` wrote")
    settings: dict[str, Any] = (result.settings.get("serve") or {}).get("settings") or {}
    best: tuple[Any, dict[str, Any], list[dict[str, Any]]] | None = None
    servers = [m for m in serve_measurements(result) if scenario_of(m) == SERVER]
    for m in servers:
        if m.status != Status.OK:
            continue
        steps = [dict(step) for step in m.repeats]
        answer = scenario_summary(SERVER, steps, settings).get("serve") or {}
        if answer.get("figure") is not None and (best is None or answer["figure"] > best[1]["figure"]):
            best = (m, answer, steps)
    if best is None:
        why = ("none of its server runs met the latency bound" if servers else "it measured no server scenario")
        raise InvalidInputError(f"{source} has no Server answer: {why}",
                                "serve with --scenario server until a run is VALID, or give --max-batch, "
                                "--max-delay-ms and --instances without --from")
    m, answer, steps = best
    step = next((s for s in steps if s.get("index") == answer.get("step_index")), None)
    setting = (step or {}).get("setting") or {}
    if not all(key in setting for key in ("max_batch", "max_delay_ms", "instances")):
        raise InvalidInputError(f"{source}: the Server answer's run records no batching setting",
                                "give --max-batch, --max-delay-ms and --instances")
    return ServeWinner(source=source, model=m.model, mode=m.mode, backend=getattr(m, "backend", None) or "eager",
                       max_batch=int(setting["max_batch"]), max_delay_ms=float(setting["max_delay_ms"]),
                       instances=int(setting["instances"]), qps=float(answer["figure"]),
                       label=str(answer.get("label") or "server QPS"),
                       input_size=m.input_size if m.input_size is not None else settings.get("input_size"),
                       seed=settings.get("seed"), device=m.device or settings.get("device"))
