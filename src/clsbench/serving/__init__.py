"""Serving benchmark: MLPerf LoadGen scenarios against a dynamic-batching server (``clsbench serve``).

The pieces, each in its own module:

- :mod:`.config`: the frozen settings of one ``serve`` call and of one batching setting, and their validation.
- :mod:`.batcher`: the request queue and the dynamic batcher (max batch, max queue delay, bucket padding); pure.
- :mod:`.counters`: the server's own counters (batch sizes, where a request's time went); pure.
- :mod:`.instance`: a model instance (torch): pinned host and device buffers per bucket, a CUDA stream, optional
  CUDA graphs per bucket.
- :mod:`.server`: the serving loop: instance threads pulling batches, completion in bulk, failure and watchdog.
- :mod:`.loadgen`: the adapter to MLPerf's LoadGen (the load generator) and its test settings.
- :mod:`.logs`: parsing LoadGen's ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt``; pure.
- :mod:`.records`: reading one stored LoadGen run (validity and why, latencies, the time split); pure.
- :mod:`.scenario`: the scenario plug-in interface and LoadGen's test settings in clsbench's terms; pure.
- :mod:`.search`: the server-QPS search (bracket, then bisect); pure.
- :mod:`.analysis`: what ``show`` / ``compare`` / ``report`` / ``history`` derive from a stored serve result; pure
  (no torch).

The ``serve`` procedure that drives these pieces (settings x scenarios, one result file, saved after every LoadGen
run) is :mod:`clsbench.procedures.serve`; the command is :mod:`clsbench.cli.serve_cmds`. Scenarios are plug-ins in
:mod:`clsbench.scenarios` (one file each), found through their registry. This package imports nothing from the
engine, the reports or the procedures, and importing it imports neither torch nor LoadGen.
"""
