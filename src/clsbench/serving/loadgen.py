"""The adapter to MLPerf's LoadGen (``mlcommons-loadgen``, imported as ``mlperf_loadgen``): one call, one run.

LoadGen is the load generator; clsbench does not generate load of its own. :func:`run_loadgen` turns
:class:`~clsbench.serving.scenario.LoadGenParams` into LoadGen's ``TestSettings``, registers the server as a
"fast" SUT (LoadGen hands over plain lists of response ids and sample indices) and a sample library over the
preloaded pool, and runs the test with its logs written to a folder of their own. Answers go back through
``QuerySamplesComplete`` once per batch, each response pointing at the request's top-1 id in the instance's pinned
output buffer (LoadGen reads it only for accuracy logging, which a performance run leaves off).

``StartTest`` blocks in C++ with the GIL released, where Python cannot see Ctrl-C; so it runs in a helper thread
and this thread waits on it, with a SIGINT handler of its own for the run. The first Ctrl-C aborts the server
(every request answered at once, without computing), so the run ends as soon as LoadGen has issued its schedule,
and the caller is told; a second Ctrl-C gives up on the run (:class:`LoadGenGaveUp`).
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from clsbench.core.vocab import Reason
from clsbench.errors import InvalidInputError
from clsbench.serving.logs import DISPOSABLE_LOGS
from clsbench.serving.scenario import LoadGenParams
from clsbench.serving.server import Server, block_sigint

#: What to install when LoadGen is missing (the ``serve`` extra declares the same package).
INSTALL_HINT = "install it with: pip install 'clsbench[serve]'  (or: pip install mlcommons-loadgen)"
#: How often the waiting thread wakes to notice Ctrl-C (seconds).
JOIN_POLL_S = 0.1


class LoadGenGaveUp(KeyboardInterrupt):
    """A second Ctrl-C during a LoadGen run: the run was abandoned while LoadGen still ran."""


def import_loadgen() -> ModuleType:
    """The ``mlperf_loadgen`` module.

    Raises:
        InvalidInputError: LoadGen is not installed (the hint is the install command).
    """
    try:
        import mlperf_loadgen
    except ImportError:
        raise InvalidInputError("MLPerf LoadGen (mlperf_loadgen) is not installed", INSTALL_HINT) from None
    return mlperf_loadgen


def loadgen_version(lg: ModuleType) -> str | None:
    from importlib import metadata

    try:
        return metadata.version("mlcommons-loadgen")
    except metadata.PackageNotFoundError:
        return getattr(lg, "__version__", None)


def test_settings(lg: ModuleType, params: LoadGenParams) -> Any:
    """LoadGen's ``TestSettings`` for ``params`` (performance mode; the seeds derived from ``params.seed``)."""
    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, params.scenario)
    ts.mode = lg.TestMode.PerformanceOnly
    ts.min_duration_ms = int(params.min_duration_ms)
    ts.min_query_count = int(params.min_query_count)
    ts.qsl_rng_seed = params.seed
    ts.sample_index_rng_seed = params.seed + 1
    ts.schedule_rng_seed = params.seed + 2
    if params.target_qps is not None:
        ts.server_target_qps = float(params.target_qps)
        ts.server_coalesce_queries = bool(params.coalesce)
        ts.server_max_async_queries = int(params.max_async_queries)
    if params.target_latency_ns is not None:
        ts.server_target_latency_ns = int(params.target_latency_ns)
    if params.latency_percentile is not None:
        if params.scenario == "Server":
            ts.server_target_latency_percentile = float(params.latency_percentile)
        elif params.scenario == "SingleStream":
            ts.single_stream_target_latency_percentile = float(params.latency_percentile)
        elif params.scenario == "MultiStream":
            ts.multi_stream_target_latency_percentile = float(params.latency_percentile)
    if params.expected_qps is not None:
        ts.offline_expected_qps = float(params.expected_qps)
    if params.expected_latency_ns is not None:
        if params.scenario == "MultiStream":
            ts.multi_stream_expected_latency_ns = int(params.expected_latency_ns)
        else:
            ts.single_stream_expected_latency_ns = int(params.expected_latency_ns)
    if params.samples_per_query is not None and params.scenario == "MultiStream":
        ts.multi_stream_samples_per_query = int(params.samples_per_query)
    return ts


def make_sink(lg: ModuleType) -> Any:
    """The server's sink: all of a batch's responses to LoadGen in one ``QuerySamplesComplete``."""
    response = lg.QuerySampleResponse
    complete = lg.QuerySamplesComplete

    def sink(ids: Any, answers: Any) -> None:
        if answers is None:
            complete([response(i, 0, 0) for i in ids])
            return
        base, size = answers.data_ptr(), answers.element_size()
        complete([response(i, base + k * size, size) for k, i in enumerate(ids)])

    return sink


def run_loadgen(lg: ModuleType, server: Server, params: LoadGenParams, log_dir: Path, sample_count: int
                ) -> tuple[int, bool]:
    """Make one LoadGen run against ``server`` with its logs in ``log_dir`` (created).

    Returns:
        ``(wall_ns, interrupted)``: the run's wall time, and whether Ctrl-C aborted it.

    Raises:
        LoadGenGaveUp: a second Ctrl-C, while LoadGen was still running.
    """
    log_dir.mkdir(parents=True, exist_ok=False)
    server.set_sink(make_sink(lg))
    sut = lg.ConstructFastSUT(server.issue, server.flush)
    qsl = lg.ConstructQSL(sample_count, sample_count, _loaded, _loaded)
    log = lg.LogSettings()
    log.log_output.outdir = str(log_dir)
    log.log_output.copy_summary_to_stdout = False
    log.log_output.copy_detail_to_stdout = False
    log.enable_trace = False
    settings = test_settings(lg, params)
    failure: list[BaseException] = []

    def start() -> None:
        try:
            block_sigint()  # LoadGen's threads, started from this one, inherit the mask
            lg.StartTestWithLogSettings(sut, qsl, settings, log, "")
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            failure.append(exc)

    presses: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        # The first Ctrl-C only leaves a mark (the waiting loop aborts the server); raising here could land
        # anywhere in this thread, even inside Thread.start(), and leave LoadGen running while its SUT is freed.
        presses.append(signum)
        if len(presses) > 1:
            raise LoadGenGaveUp()

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    thread = threading.Thread(target=start, name="clsbench-loadgen", daemon=True)
    started = time.perf_counter_ns()
    try:
        thread.start()
        aborted = False
        while thread.is_alive():
            thread.join(JOIN_POLL_S)
            if presses and not aborted:
                aborted = True
                server.request_abort(str(Reason.INTERRUPTED))
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        if not thread.is_alive():
            lg.DestroyQSL(qsl)
            lg.DestroyFastSUT(sut)
    interrupted = bool(presses)
    wall_ns = time.perf_counter_ns() - started
    for name in DISPOSABLE_LOGS:
        path = log_dir / name
        if path.exists() and path.stat().st_size <= len("[]\n"):
            path.unlink()
    if failure:
        raise failure[0]
    return wall_ns, interrupted


def _loaded(indices: Any) -> None:
    """The pool is preloaded once for every run: LoadGen's load/unload calls have nothing to do."""
