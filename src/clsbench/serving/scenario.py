"""The scenario interface: what one plug-in in :mod:`clsbench.scenarios` provides, and what it is given.

A scenario (MLPerf's Offline, SingleStream, MultiStream, Server) decides which LoadGen runs to make against a
running server and which of their figures is its answer. It is one file in ``clsbench/scenarios/`` that registers
an object with this shape in :data:`clsbench.scenarios.SCENARIOS`; the ``serve`` procedure and the analysis find
it there by name, so adding a scenario is adding that file. Plug-ins import neither torch nor LoadGen: they build
:class:`LoadGenParams` and read step records (plain dicts), which keeps the analysis of a stored result pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from clsbench.serving import records
from clsbench.serving.config import ServerConfig, ServeSettings

#: Every setting axis a scenario may depend on (the fields of ServerConfig that vary between settings).
AXES = ("max_batch", "max_delay_ms", "instances")


@dataclass(frozen=True)
class LoadGenParams:
    """One LoadGen run's test settings, in clsbench's terms (the adapter turns them into ``TestSettings``).

    Attributes:
        scenario: LoadGen's scenario name (``Offline``, ``SingleStream``, ``MultiStream``, ``Server``).
        min_duration_ms, min_query_count: the run's minimums (both must be met).
        target_qps: Server: the Poisson arrival rate.
        target_latency_ns, latency_percentile: Server: the bound and the percentile held to it.
        expected_qps: Offline: how many samples LoadGen generates (about min duration x this x 1.1).
        expected_latency_ns: SingleStream / MultiStream: sizes the pre-generated query list (smaller: more).
        samples_per_query: MultiStream: samples in each query.
        max_async_queries: Server: LoadGen ends a run early (INVALID) beyond this many outstanding queries.
        coalesce: Server: let LoadGen hand over several due queries in one call.
        seed: LoadGen's sample-choice and schedule seeds.
    """

    scenario: str
    min_duration_ms: int
    min_query_count: int
    target_qps: float | None = None
    target_latency_ns: int | None = None
    latency_percentile: float | None = None
    expected_qps: float | None = None
    expected_latency_ns: int | None = None
    samples_per_query: int | None = None
    max_async_queries: int = 0
    coalesce: bool = True
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass
class ScenarioContext:
    """What a scenario is given to run against one server at one batching setting.

    Attributes:
        settings: the whole serve call's settings.
        config: the batching setting being served (with any delay the scenario forces already applied).
        estimates: the server's own warm-up figures for this setting: ``max_batch_qps`` (samples/s of back-to-back
            full batches) and ``batch1_latency_ns`` (one request, alone); None where unknown.
        offline_qps: LoadGen's offline samples/s of the same max batch and instances, if that ran before.
        run_step: makes one LoadGen run and returns its stored record (``role`` names why it ran).
        facts: the scenario's own facts to store next to the steps (e.g. the search's outcome).
    """

    settings: ServeSettings
    config: ServerConfig
    estimates: dict[str, float | None]
    offline_qps: float | None
    run_step: Callable[[LoadGenParams, str], dict[str, Any]]
    facts: dict[str, Any] = field(default_factory=dict)


class Scenario(Protocol):
    """One scenario plug-in.

    Attributes:
        name: the ``--scenario`` name (``server``).
        loadgen_name: LoadGen's name of the scenario (``Server``).
        axes: which of :data:`AXES` change its answer; it runs once per distinct combination of those (none: once
            per mode, at the first setting).
        forced_delay_ms: a max queue delay the scenario imposes (one query at a time: waiting for company is pure
            loss), or None.
        order: scenarios run in ascending order per setting (offline first: the server search starts from it).
        description: one line for ``--help``.
    """

    name: str
    loadgen_name: str
    axes: tuple[str, ...]
    forced_delay_ms: float | None
    order: int
    description: str

    def run(self, ctx: ScenarioContext) -> None:
        """Make this scenario's LoadGen runs through ``ctx.run_step``."""

    def headline(self, steps: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        """The scenario's answer from its stored steps (all settings): ``figure`` (a number or None), ``unit``,
        ``label`` (what the figure is), ``step`` (the record it comes from, or None), ``note`` (why none, or a
        caveat)."""


# ------------------------------------------------------------------------------------ helpers for plug-ins

#: How far below the warm-up latency estimate a SingleStream/MultiStream run's ``expected_latency`` is set. LoadGen
#: pre-generates about 2 x min duration / expected latency queries and a run that exhausts them is INVALID, while
#: a longer list costs only memory; half the estimate covers a server up to 4x faster than its warm-up suggested.
EXPECTED_LATENCY_FRACTION = 0.5
#: The smallest expected latency handed to LoadGen (10 us), which bounds the pre-generated list of a fast server.
MIN_EXPECTED_LATENCY_NS = 10_000
#: Offline: LoadGen generates min duration x expected QPS x 1.1 samples; a run that ends before the min duration is
#: INVALID, so the retry after such a run asks for this much more than the samples/s it measured.
OFFLINE_RETRY_MARGIN = 1.25
#: Used when the server measured nothing during warm-up (never on a working server).
FALLBACK_LATENCY_NS = 1_000_000
#: Offline: the warm-up estimate of samples/s is discounted by this before sizing the run: too few samples cost one
#: short INVALID run and a retry at the measured rate, too many cost a run far longer than the minimum duration.
OFFLINE_ESTIMATE_DISCOUNT = 0.5
#: A run INVALID only for LoadGen's early-stopping rule is repeated at the same target with the queries it lacked
#: times this (its latency may get a little worse with more queries), at most EARLY_STOPPING_RETRIES times.
EARLY_STOPPING_MARGIN = 2.0
EARLY_STOPPING_RETRIES = 2


def duration_ms(settings: ServeSettings) -> int:
    return max(1, int(round(settings.min_duration_s * 1000)))


def min_queries(settings: ServeSettings, mlperf_default: int) -> int:
    """``--min-queries`` when given, else MLPerf's count for the scenario."""
    return settings.min_queries if settings.min_queries is not None else mlperf_default


def estimate_latency_ns(ctx: ScenarioContext, size: int) -> int:
    """The warm-up latency of a batch of ``size`` (its bucket), alone on one instance."""
    table = {int(b): float(ns) for b, ns in (ctx.estimates.get("bucket_latency_ns") or {}).items() if ns}
    fitting = sorted(b for b in table if b >= size)
    return int(table[fitting[0]]) if fitting else FALLBACK_LATENCY_NS


def expected_latency_ns(observed_ns: float) -> int:
    return max(MIN_EXPECTED_LATENCY_NS, int(observed_ns * EXPECTED_LATENCY_FRACTION))


def with_enough_queries(run: Callable[[LoadGenParams, str], dict[str, Any]], params: LoadGenParams,
                        role: str) -> dict[str, Any]:
    """Run ``params``; while LoadGen says the run lacked queries for its early-stopping rule (and nothing else was
    wrong), run again with that many more (see :data:`EARLY_STOPPING_MARGIN`). Returns the last run's record."""
    step = run(params, role)
    for _ in range(EARLY_STOPPING_RETRIES):
        lacking = records.early_stopping_shortfall(step)
        if lacking is None:
            break
        have = int((step.get("loadgen") or {}).get("query_count") or params.min_query_count)
        params = dataclasses.replace(params, min_query_count=int(have + lacking * EARLY_STOPPING_MARGIN))
        step = run(params, "retry")
    return step


def ran_short(step: dict[str, Any]) -> bool:
    """LoadGen ran out of pre-generated queries (its estimate was off), with no server failure: worth a retry."""
    loadgen = step.get("loadgen") or {}
    return (not step.get("error") and not step.get("interrupted") and loadgen.get("validity") != "VALID"
            and loadgen.get("min_duration_met") is False)
