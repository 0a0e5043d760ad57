"""Result files: schema round trip, atomic writes, refusing to overwrite, load errors, old-format fixture.

``tests/data/result_v1.json`` is a schema-1 file written by ``tests/data/make_fixture.py`` (library code from
hand-written repeat records). It must stay readable by every later clsbench, and its stored summaries must
equal what :mod:`clsbench.analysis.summary` recomputes from its raw samples.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from clsbench.analysis.summary import build_measurement, stop_rule_text, summarize
from clsbench.core.plan import Cell, StopRule
from clsbench.errors import EXIT_FILE, ResultFileError
from clsbench.results import io as result_io
from clsbench.results.schema import SCHEMA_VERSION, BenchmarkResult, Measurement

FIXTURE = "result_v1.json"
RULE = StopRule(warmup=1, min_iterations=3, min_seconds=0.0)


def ok_record(samples_ms: list[float], *, workload: str, batch: int, pid: int) -> dict:
    """A repeat record shaped like the worker's, with times in exact binary fractions."""
    key = "wall_ms" if workload == "infer-latency" else "iteration_ms"
    wall_s = sum(samples_ms) / 1000
    return {
        "status": "ok", "reason": None, "detail": None,
        "samples": {key: samples_ms, "images": len(samples_ms) * batch, "wall_s": wall_s,
                    **({"gpu_ms": None} if workload == "infer-latency" else {"iteration_clock": "host"})},
        "timings": {"prepare_s": 0.125, "setup_s": 0.0625, "first_iteration_s": 0.25, "warmup_iterations": 1},
        "validity": {"stop_rule_met": True, "stopped_by_maximum": False, "timed_iterations": len(samples_ms),
                     "timed_seconds": wall_s},
        "memory": {"peak_memory_allocated_bytes": None, "peak_memory_reserved_bytes": None,
                   "device_memory_used_bytes": None, "host_peak_rss_bytes": 123456789},
        "flags": {"num_threads": 2}, "mode_notes": {}, "input_size": 32, "pid": pid,
    }


@pytest.fixture
def result() -> BenchmarkResult:
    """Two measurements (one ok over two repeats, one failed) built by the library from repeat records."""
    latency = Cell("clsbench_testmodels:tiny", "infer-latency", "fp32", 1, "cpu")
    train = Cell("clsbench_testmodels:nan_model", "train", "fp32", 4, "cpu")
    records = [ok_record([1.5, 1.25, 1.75], workload="infer-latency", batch=1, pid=101),
               ok_record([1.0, 1.5, 1.125], workload="infer-latency", batch=1, pid=102)]
    failed = [{"status": "failed", "reason": "nan_loss",
               "detail": "NonFiniteLossError: loss became non-finite"}]
    environment = {"device": "cpu", "cpu": {"model": "Test CPU"}, "software": {"torch": "x"}}
    out = BenchmarkResult(environment=environment, settings={"repeats": 2},
                          created_utc="2026-01-02T03:04:05+00:00",
                          tool={"name": "clsbench", "version": "0.1.0"})
    out = out.with_measurement(build_measurement(latency, records, RULE))
    return out.with_measurement(build_measurement(train, failed, RULE))


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------------------
# Round trip and atomic writes


def test_round_trip_through_dict_and_file(result: BenchmarkResult, tmp_path: Path):
    assert result.measurements[0].summary["latency_ms"]["p50"] == 1.3125  # median of the p50s 1.5 and 1.125
    assert BenchmarkResult.from_dict(result.to_dict()) == result

    path = tmp_path / "run.json"
    result_io.save(result, path)
    loaded = result_io.load(path)
    assert loaded == result
    assert isinstance(loaded.measurements[0], Measurement)
    assert isinstance(loaded.measurements[0].repeats, tuple)
    # Standard JSON (no NaN/Infinity tokens), readable by any JSON parser.
    data = json.loads(path.read_text(encoding="utf-8"), parse_constant=lambda name: pytest.fail(name))
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["measurements"][0]["repeats"][1]["samples"]["wall_ms"] == [1.0, 1.5, 1.125]


def test_saving_a_loaded_file_gives_the_same_bytes(data_dir: Path, tmp_path: Path):
    """Nothing is rounded, reordered or dropped between load and save."""
    copy = tmp_path / FIXTURE
    result_io.save(result_io.load(data_dir / FIXTURE), copy)
    assert copy.read_bytes() == (data_dir / FIXTURE).read_bytes()


def test_save_leaves_no_temporary_files(result: BenchmarkResult, tmp_path: Path):
    path = tmp_path / "run.json"
    result_io.save(result, path)
    grown = result.with_measurement(dataclasses.replace(result.measurements[0], mode="amp-bf16"))
    result_io.save(grown, path)  # the runner rewrites the file after every measurement
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    assert len(result_io.load(path).measurements) == 3


def test_failed_save_raises_and_leaves_no_temporary_files(result: BenchmarkResult, tmp_path: Path):
    target = tmp_path / "taken"
    target.mkdir()  # the final rename cannot replace a directory
    with pytest.raises(ResultFileError, match="cannot write"):
        result_io.save(result, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert list(target.iterdir()) == []


def test_saved_file_honours_the_umask(result: BenchmarkResult, tmp_path: Path):
    """A result file is shared data: readable by the group and others under the usual umask, like any file."""
    old = os.umask(0o022)
    try:
        result_io.save(result, tmp_path / "run.json")
    finally:
        os.umask(old)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o644


# ----------------------------------------------------------------------------------------------------------
# check_writable


def test_check_writable_accepts_a_new_file_and_creates_its_directory(tmp_path: Path):
    path = tmp_path / "new" / "deeper" / "run.json"
    result_io.check_writable(path)
    assert path.parent.is_dir()
    assert not path.exists()


def test_check_writable_refuses_an_existing_file(tmp_path: Path):
    path = tmp_path / "run.json"
    path.write_text("precious", encoding="utf-8")
    with pytest.raises(ResultFileError, match="already exists") as info:
        result_io.check_writable(path)
    assert info.value.exit_code == EXIT_FILE
    assert "--resume" in info.value.hint
    assert path.read_text(encoding="utf-8") == "precious"


def test_check_writable_refuses_a_directory(tmp_path: Path):
    with pytest.raises(ResultFileError, match="is a folder, and the output is one file"):
        result_io.check_writable(tmp_path)
    with pytest.raises(ResultFileError, match="is a folder"):
        result_io.check_writable(tmp_path, overwrite=True)


def test_check_writable_refuses_a_path_under_a_regular_file(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(ResultFileError, match="cannot create directory"):
        result_io.check_writable(blocker / "sub" / "run.json")
    with pytest.raises(ResultFileError):
        result_io.check_writable(blocker / "run.json")


# ----------------------------------------------------------------------------------------------------------
# Load errors: each one ResultFileError with a one-line message naming the file


def _valid(data_dir: Path) -> dict:
    return json.loads((data_dir / FIXTURE).read_text(encoding="utf-8"))


def _bad_files(tmp_path: Path, data_dir: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, words the message must contain)."""
    valid = _valid(data_dir)
    text = (data_dir / FIXTURE).read_text(encoding="utf-8")
    directory = tmp_path / "adir"
    directory.mkdir()
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    invalid = tmp_path / "invalid.json"
    invalid.write_text("{'schema_version': 1}", encoding="utf-8")
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) // 2], encoding="utf-8")
    tool = dict(valid, tool={"name": "pyperf", "version": "2.6"})
    no_measurements = {k: v for k, v in valid.items() if k != "measurements"}
    bad_status = dict(valid, measurements=[dict(valid["measurements"][0], status="great")])
    return {
        "missing": (tmp_path / "missing.json", "does not exist"),
        "directory": (directory, "is a directory"),
        "binary": (binary, "not a text file"),
        "empty": (empty, "not valid JSON"),
        "invalid": (invalid, "not valid JSON"),
        "truncated": (truncated, "not valid JSON"),
        "object": (write_json(tmp_path / "object.json", {"foo": 1}), "not a clsbench result file"),
        "list": (write_json(tmp_path / "list.json", [1, 2, 3]), "not a clsbench result file"),
        "other_tool": (write_json(tmp_path / "pyperf.json", tool), "not a clsbench result file"),
        "newer": (write_json(tmp_path / "newer.json", dict(valid, schema_version=SCHEMA_VERSION + 1)),
                  "newer"),
        "version_0": (write_json(tmp_path / "v0.json", dict(valid, schema_version=0)), "schema 0"),
        "version_text": (write_json(tmp_path / "vtext.json", dict(valid, schema_version="1")),
                         "schema_version"),
        "no_measurements": (write_json(tmp_path / "nomeas.json", no_measurements), "damaged"),
        "bad_status": (write_json(tmp_path / "status.json", bad_status), "damaged"),
    }


BAD_FILES = ["missing", "directory", "binary", "empty", "invalid", "truncated", "object", "list",
             "other_tool", "newer", "version_0", "version_text", "no_measurements", "bad_status"]


@pytest.mark.parametrize("name", BAD_FILES)
def test_load_errors_are_one_clear_line(name: str, tmp_path: Path, data_dir: Path):
    path, words = _bad_files(tmp_path, data_dir)[name]
    with pytest.raises(ResultFileError) as info:
        result_io.load(path)
    error = info.value
    assert error.exit_code == EXIT_FILE
    assert str(path) in error.message
    assert words in error.message
    assert "\n" not in error.message and "\n" not in (error.hint or "")
    assert error.__cause__ is None  # raised `from None`: no chained traceback to print


def test_newer_schema_says_upgrade(tmp_path: Path, data_dir: Path):
    path = write_json(tmp_path / "newer.json", dict(_valid(data_dir), schema_version=SCHEMA_VERSION + 1))
    with pytest.raises(ResultFileError) as info:
        result_io.load(path)
    assert f"schema {SCHEMA_VERSION + 1}" in info.value.message
    assert "upgrade" in info.value.hint


# ----------------------------------------------------------------------------------------------------------
# The old-format fixture


def test_fixture_loads(data_dir: Path):
    result = result_io.load(data_dir / FIXTURE)
    assert result.schema_version == 1
    assert result.tool["name"] == "clsbench"
    assert result.created_utc == "2026-11-30T12:00:00+00:00"
    assert result.environment["gpu"]["name"] == "NVIDIA H200"
    statuses = [(m.workload, m.status, m.reason, bool(m.summary.get("unstable")))
                for m in result.measurements]
    assert statuses == [
        ("infer-latency", "ok", None, False),
        ("train", "ok", None, False),
        ("infer-throughput", "ok", None, True),
        ("train", "failed", "oom", False),
        ("train", "skipped", "unsupported_mode", False),
    ]
    latency = result.measurements[0]
    assert [len(r["samples"]["wall_ms"]) for r in latency.repeats] == [8, 8]
    assert all(len(r["samples"]["gpu_ms"]) == 8 for r in latency.repeats)
    assert "iteration_ms" in result.measurements[1].repeats[0]["samples"]
    assert len(result.measurements[3].repeats) == 1  # an oom is not repeated


def test_version_1_files_read_unchanged_under_version_2(data_dir: Path, tmp_path: Path):
    """Schema 2 added serve results only: a version-1 file loads as it did, keeps its version when saved again, and
    the same content stamped version 2 loads to the same measurements."""
    from clsbench.results.schema import READABLE_VERSIONS

    assert SCHEMA_VERSION == 2 and READABLE_VERSIONS == (1, 2)
    old = result_io.load(data_dir / FIXTURE)
    assert old.schema_version == 1
    result_io.save(old, tmp_path / "again.json")
    assert json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))["schema_version"] == 1
    stamped = result_io.load(write_json(tmp_path / "v2.json", dict(_valid(data_dir), schema_version=2)))
    assert stamped.schema_version == 2 and stamped.measurements == old.measurements


def test_fixture_summaries_match_a_recomputation_from_raw_samples(data_dir: Path):
    """Every statistic the file stores equals what analysis derives from its raw samples today.

    Later versions may derive more (new summary keys); what an old file has must not have changed meaning.
    """
    result = result_io.load(data_dir / FIXTURE)
    rules = {name: StopRule(**rule) for name, rule in result.settings["stop_rules"].items()}
    for m in result.measurements:
        label = Cell.of(m).label()
        summary, validity = summarize(list(m.repeats), m.workload)
        stored = {key: value for key, value in summary.items() if key in m.summary}  # new keys may be derived
        for key in ("latency_ms", "gpu_latency_ms"):
            if not isinstance(stored.get(key), dict):
                continue
            # Since the percentile rule, a tail too thin for its percentile is withheld (None) rather than
            # re-stated as the maximum; everything else the old file says is recomputed exactly.
            withheld = (stored.get(key) or {}).pop("withheld", {})
            assert all(stored[key][p] is None for p in withheld), label
            stored[key] = {p: v for p, v in stored[key].items() if p not in withheld}
        assert stored == {key: {p: v for p, v in m.summary[key].items() if p in stored[key]}
                          if isinstance(stored[key], dict) else m.summary[key] for key in stored}, label
        # The advice's words were rewritten since (one text per cause and device); the verdicts are the same.
        assert {k: v for k, v in validity.items() if k != "advice"} == \
            {key: m.validity[key] for key in validity if key != "advice"}, label
        assert ("advice" in validity) == ("advice" in m.validity), label
        assert m.validity["stop_rule"] == stop_rule_text(rules[m.workload]), label
        rebuilt = build_measurement(Cell.of(m), list(m.repeats), rules[m.workload])
        assert (rebuilt.status, rebuilt.reason, rebuilt.detail) == (m.status, m.reason, m.detail), label
    latency = result.measurements[0]
    assert latency.summary["latency_ms"]["n"] == 16
    assert latency.summary["gpu_latency_ms"]["n"] == 16
    assert result.measurements[2].summary["spread_pct"] > 10.0


@pytest.mark.parametrize("damage", ["measurement_number", "measurements_object", "summary_list"])
def test_load_rejects_measurements_of_the_wrong_type(damage: str, tmp_path: Path, data_dir: Path):
    valid = _valid(data_dir)
    first = valid["measurements"][0]
    measurements = {"measurement_number": [1], "measurements_object": {"first": first},
                    "summary_list": [dict(first, summary=[])]}[damage]
    path = write_json(tmp_path / "damaged.json", dict(valid, measurements=measurements))
    with pytest.raises(ResultFileError, match="damaged"):
        result_io.load(path)


def test_load_rejects_a_boolean_schema_version(tmp_path: Path, data_dir: Path):
    path = write_json(tmp_path / "bool.json", dict(_valid(data_dir), schema_version=True))
    with pytest.raises(ResultFileError, match="schema_version"):
        result_io.load(path)
