"""Exports: flat rows (one per measurement, units in the names) as CSV, JSON and Markdown; ``show --format``."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from clsbench.cli import main
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.report import export
from clsbench.results import io as result_io

#: Spelled out here, not imported: a change to the header must be a deliberate change to this test too.
HEADER = (
    "result_file,run_created_utc,gpu_name,device,model,workload,mode,backend,batch_size,input_size,data,world_size,"
    "status,reason,"
    "throughput_img_s,spread_pct,unstable,latency_p50_ms,latency_p90_ms,latency_p99_ms,latency_p999_ms,"
    "latency_mean_ms,latency_n,gpu_latency_p50_ms,peak_memory_allocated_bytes,peak_memory_reserved_bytes,"
    "power_avg_w,energy_j,joules_per_image,images_per_s_per_w,achieved_tflop_s,mfu_datasheet_pct,bound_by,throttled,"
    "backend_build_s,backend_load_s,artifact_bytes,backend_cache_hit,parity_max_abs_err_rel,"
    "parity_top1_agreement_pct,parity_passed,torch,clsbench_version"
)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def fixture_rows(data_dir: Path) -> list[dict]:
    result = result_io.load(data_dir / "result_v1.json")
    return export.rows([result], ["result_v1.json"])


def test_one_row_per_measurement_with_units_in_the_names(fixture_rows: list[dict], data_dir: Path):
    result = result_io.load(data_dir / "result_v1.json")
    assert len(fixture_rows) == len(result.measurements) == 5
    assert all(tuple(r) == export.COLUMNS for r in fixture_rows)
    latency = next(r for r in fixture_rows if r["workload"] == "infer-latency")
    m = next(m for m in result.measurements if m.workload == "infer-latency")
    assert latency["latency_p50_ms"] == m.summary["latency_ms"]["p50"]  # unrounded
    assert latency["gpu_latency_p50_ms"] == m.summary["gpu_latency_ms"]["p50"]
    assert latency["latency_n"] == 16 and latency["gpu_name"] == "NVIDIA H200"
    assert latency["torch"] == "2.11.0+cu130" and latency["clsbench_version"] == "0.1.0"
    assert latency["run_created_utc"] == "2026-11-30T12:00:00+00:00"
    oom = next(r for r in fixture_rows if r["status"] == "failed")
    assert (oom["model"], oom["reason"], oom["throughput_img_s"], oom["unstable"]) == ("resnet152", "oom", None, None)
    unstable = next(r for r in fixture_rows if r["workload"] == "infer-throughput")
    assert unstable["unstable"] is True and unstable["spread_pct"] > 10


def test_rows_say_what_compare_matches_on_input_size_data_and_world_size(fixture_rows: list[dict], data_dir: Path):
    # The fixture's run asked for no input size: resnet50's default is the 224 its measurements recorded, which the
    # skipped one (no size stored) ran at too; resnet152 failed before recording one, so its size is not known.
    sizes = {(r["model"], r["workload"], r["mode"]): r["input_size"] for r in fixture_rows}
    assert sizes[("resnet50", "train", "bf16")] == 224 and sizes[("resnet152", "train", "fp32")] is None
    assert {r["input_size"] for r in fixture_rows if r["model"] == "resnet50"} == {224}
    assert {(r["data"], r["world_size"]) for r in fixture_rows} == {("synthetic", 1)}
    markdown_header = export.to_markdown(fixture_rows).splitlines()[0]
    assert "input_size" in markdown_header and "| data |" not in markdown_header and "world_size" not in markdown_header
    # A scale run: the GPUs in total, also for a measurement skipped before it had figures (global batch / per GPU).
    scale = result_io.load(data_dir.parent / "golden" / "expected" / "scale.json")
    rows = export.rows([scale], ["scale.json"])
    assert [(r["workload"], r["status"], r["world_size"]) for r in rows] == [
        ("train-ddp", "ok", 1), ("train-ddp", "ok", 2), ("train-dp", "skipped", 1), ("train-dp", "skipped", 2)]
    assert "world_size" in export.to_markdown(rows).splitlines()[0]


def test_csv_header_is_exact_and_values_round_trip(fixture_rows: list[dict]):
    text = export.to_csv(fixture_rows)
    assert text.splitlines()[0] == HEADER
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert len(parsed) == len(fixture_rows)
    for row, original in zip(parsed, fixture_rows, strict=True):
        for column, value in original.items():
            if value is None:
                assert row[column] == ""
            elif isinstance(value, bool):
                assert row[column] == ("true" if value else "false")
            elif isinstance(value, float):
                assert float(row[column]) == value  # exact: never rounded
            else:
                assert row[column] == str(value)


def test_csv_quotes_commas_and_newlines():
    text = export.to_csv([{"model": "a,b", "reason": 'say "hi"\nnow'}], ["model", "reason"])
    assert list(csv.reader(io.StringIO(text))) == [["model", "reason"], ["a,b", 'say "hi"\nnow']]


def test_pandas_reads_the_csv_directly(fixture_rows: list[dict]):
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(io.StringIO(export.to_csv(fixture_rows)))
    assert list(frame.columns) == HEADER.split(",")
    assert len(frame) == 5
    assert frame["batch_size"].tolist() == [r["batch_size"] for r in fixture_rows]
    assert frame["throughput_img_s"].dtype.kind == "f"


def test_json_is_a_list_of_row_objects(fixture_rows: list[dict]):
    data = json.loads(export.to_json(fixture_rows))
    assert data == fixture_rows
    assert data[3]["throughput_img_s"] is None  # null, not a missing key


def test_markdown_is_a_pipe_table_without_empty_columns(fixture_rows: list[dict]):
    text = export.to_markdown(fixture_rows)
    lines = text.splitlines()
    assert len(lines) == 2 + len(fixture_rows)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:4] == ["result_file", "run_created_utc", "gpu_name", "device"]
    assert "power_avg_w" not in header  # no telemetry in the fixture: the column would be empty
    assert set(lines[1]) <= set("|-:") and "---:" in lines[1]
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:])
    assert lines[1].count("|") == lines[2].count("|") == len(header) + 1


def test_markdown_escapes_pipes_and_newlines():
    text = export.to_markdown([{"model": "a|b", "reason": "line\nbreak"}], ["model", "reason"])
    assert text.splitlines()[2] == "| a\\|b | line break |"


def test_unknown_format_is_invalid_input(data_dir: Path):
    result = result_io.load(data_dir / "result_v1.json")
    with pytest.raises(InvalidInputError):
        export.export_results([result], ["x"], "parquet")


def test_write_text_never_overwrites(tmp_path: Path):
    target = tmp_path / "out.csv"
    export.write_text(target, "a\n")
    assert target.read_text() == "a\n"
    with pytest.raises(ResultFileError, match="already exists"):
        export.write_text(target, "b\n")
    assert target.read_text() == "a\n"
    export.write_text(target, "b\n", force=True)  # --force replaces it, still atomically
    assert target.read_text() == "b\n"
    export.write_text(tmp_path / "made" / "out.csv", "c\n")  # a missing folder is made, as for result files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made", "out.csv"]  # no temporary file left behind


# ----------------------------------------------------------------------------------------------------------
# show --format / -o


def test_show_csv(data_dir: Path):
    out = invoke("show", "--format", "csv", str(data_dir / "result_v1.json"))
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == HEADER and len(lines) == 6
    assert lines[1].startswith(f"{data_dir / 'result_v1.json'},2026-11-30T12:00:00+00:00,NVIDIA H200,cuda,resnet50,")


def test_show_csv_of_several_files_is_one_table(data_dir: Path):
    path = str(data_dir / "result_v1.json")
    out = invoke("show", "--format", "csv", path, path)
    assert out.exit_code == 0, out.output
    assert out.stdout.count(HEADER) == 1 and len(out.stdout.splitlines()) == 11


def test_show_markdown(data_dir: Path):
    out = invoke("show", "--format", "markdown", str(data_dir / "result_v1.json"))
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("| result_file | run_created_utc |") and "| FAILED" not in out.stdout
    assert "| failed | oom |" in out.stdout


def test_show_json_of_several_files_is_one_list(data_dir: Path):
    path = str(data_dir / "result_v1.json")
    out = invoke("show", "--format", "json", path, path)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert isinstance(data, list) and len(data) == 2 and data[0]["schema_version"] == 1


def test_show_output_file_and_dash(data_dir: Path, tmp_path: Path):
    path = str(data_dir / "result_v1.json")
    target = tmp_path / "rows.csv"
    out = invoke("show", "--format", "csv", "-o", str(target), path)
    assert out.exit_code == 0, out.output
    assert out.stdout == "" and f"saved: {target}" in out.stderr
    assert target.read_text(encoding="utf-8") == invoke("show", "--format", "csv", "-o", "-", path).stdout
    again = invoke("show", "--format", "csv", "-o", str(target), path)
    assert again.exit_code == 3 and "already exists" in again.stderr and again.stdout == ""


def test_show_table_to_a_file_is_the_printed_table(data_dir: Path, tmp_path: Path):
    target = tmp_path / "table.txt"
    out = invoke("show", "--output", str(target), str(data_dir / "result_v1.json"))
    assert out.exit_code == 0, out.output
    assert target.read_text(encoding="utf-8") == (data_dir / "result_v1.table.txt").read_text(encoding="utf-8")


def test_throttled_is_unknown_without_telemetry_samples(fixture_rows: list[dict], data_dir: Path):
    # The fixture's summaries say throttled: False with zero samples; nothing could tell, so the row says None.
    assert {r["throttled"] for r in fixture_rows} == {None}
    telemetry = result_io.load(data_dir.parent.parent / "benchmarks/results/h200/telemetry-check-resnet50.json")
    rows = export.rows([telemetry], ["t.json"])
    assert {r["throttled"] for r in rows} == {False}
    assert all(r["power_avg_w"] > 100 and r["energy_j"] > 0 for r in rows)
