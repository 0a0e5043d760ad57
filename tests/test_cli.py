"""The command line: golden output, exact tables under the fake clock, end to end, resume, every bad input.

Runs on a CPU. Measurements use the tiny test models inline (``--isolation inline``) with the fake clock,
under which every request and iteration takes exactly 1 ms, so printed figures are exact. One test runs the
real thing in a subprocess: default process isolation, real clock.

The golden table ``tests/data/result_v1.table.txt`` is the output of
``clsbench show tests/data/result_v1.json``; after an intended change to the table, regenerate it with that
command and read the diff before committing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner, Result

from clsbench.cli import main
from clsbench.results import io as result_io
from clsbench.results.schema import SCHEMA_VERSION
from terminal import as_a_terminal_starts_it

REPO = Path(__file__).resolve().parent.parent
TINY = "clsbench_testmodels:tiny"
FAKE = ["--device", "cpu", "--isolation", "inline", "--clock", "fake:1ms"]
#: A short inline run: 2 repeats of 5 timed iterations after 2 warm-up ones, no minimum time.
SHORT = [*FAKE, "--repeats", "2", "--iterations", "5", "--warmup", "2", "--min-time", "0"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def table_rows(stdout: str) -> dict[tuple[str, str], list[str]]:
    """(model, workload) -> the row's cells, from the table between the dashes and the first blank line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---"))
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[(cells[0], cells[1])] = cells
    return rows


def assert_clean_error(result: Result, code: int, *words: str) -> str:
    """Exit ``code`` with exactly one ``error:`` line and one ``hint:`` line on stderr, no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    hints = [line for line in lines if line.startswith("hint: ")]
    assert len(errors) == 1 and len(hints) == 1, result.stderr
    assert lines.index(hints[0]) == lines.index(errors[0]) + 1
    assert "internal error" not in errors[0]
    for word in words:
        assert word in errors[0] + hints[0], result.stderr
    assert result.stdout == ""
    return errors[0]


# ----------------------------------------------------------------------------------------------------------
# show: golden output of the old-format fixture


def test_show_matches_the_golden_table(data_dir: Path):
    result = invoke("show", str(data_dir / "result_v1.json"))
    assert result.exit_code == 0, result.output
    assert result.stdout == (data_dir / "result_v1.table.txt").read_text(encoding="utf-8")


def test_show_json_is_the_file_content(data_dir: Path):
    result = invoke("show", "--format", "json", str(data_dir / "result_v1.json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads((data_dir / "result_v1.json").read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------------------------------------
# run with the fake clock: exact figures


def test_run_with_fake_clock_prints_exact_figures_and_show_agrees(tmp_path: Path):
    out = tmp_path / "run.json"
    result = invoke("run", "--model", TINY, *SHORT, "--batch-size", "4", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    rows = table_rows(result.stdout)
    assert set(rows) == {(TINY, w) for w in ("infer-latency", "infer-throughput", "train")}
    for (_, workload), cells in rows.items():
        model, _, mode, batch, img_s, spread, p50, p99, mem, n, status = cells
        assert (mode, batch) == ("fp32", "4"), workload
        assert img_s == "4,000", workload  # 4 images per 1 ms
        assert (spread, p50, p99) == ("0.0%", "1.000", "-"), workload  # five timed iterations: too few for a p99
        assert mem.endswith("MiB rss"), workload
        assert (n, status) == ("2x5", "ok"), workload
    assert "3 measurements: 3 ok, 0 unstable, 0 failed, 0 skipped" in result.stdout
    assert "p99 -: 3 measurement(s) timed fewer than 100 iterations in a repeat" in result.stdout
    assert f"saved: {out}" in result.stderr

    assert out.is_file()
    stored = result_io.load(out)
    assert [m.workload for m in stored.measurements] == ["infer-latency", "infer-throughput", "train"]
    assert all(r["samples"].get("wall_ms", r["samples"].get("iteration_ms")) == [1.0] * 5
               for m in stored.measurements for r in m.repeats)
    shown = invoke("show", str(out))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == result.stdout


def test_run_defaults_batch_size_per_workload(tmp_path: Path):
    result = invoke("run", "--model", TINY, "--workload", "infer-latency,train", *SHORT, "-q",
                    "-o", str(tmp_path / "run.json"))
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    assert rows[(TINY, "infer-latency")][3:5] == ["1", "1,000"]
    assert rows[(TINY, "train")][3:5] == ["8", "8,000"]
    assert result.stderr.strip() == f"saved: {tmp_path / 'run.json'}"  # -q: no progress lines


def test_failed_measurement_exits_4_with_table_and_file(tmp_path: Path):
    out = tmp_path / "run.json"
    result = invoke("run", "--model", "clsbench_testmodels:nan_model", "--workload", "train", *SHORT,
                    "-o", str(out))
    assert result.exit_code == 4, result.output
    assert "Traceback" not in result.output
    row = table_rows(result.stdout)[("clsbench_testmodels:nan_model", "train")]
    assert row[-1] == "FAILED: nan_loss"
    assert "FAILED    clsbench_testmodels:nan_model train fp32 bs8: nan_loss" in result.stdout
    stored = result_io.load(out)
    (measurement,) = stored.measurements
    assert (measurement.status, measurement.reason) == ("failed", "nan_loss")
    assert len(measurement.repeats) == 1  # a NaN loss repeats: the second repeat is not run


def test_without_output_each_run_gets_a_new_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    args = ["run", "--model", TINY, "--workload", "infer-latency", *SHORT, "-q"]
    first, second = invoke(*args), invoke(*args)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    files = sorted(Path("clsbench-results").iterdir())
    assert len(files) == 2  # two runs in the same second must not share a file
    for result in (first, second):
        saved = Path(result.stderr.strip().removeprefix("saved: "))
        assert saved in files and result_io.load(saved).measurements[0].status == "ok"


def test_interrupted_run_exits_130_names_resume_and_prints_what_finished(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    from clsbench.cli import common

    def interrupt(self, event) -> None:
        if event.kind == "measurement":
            raise KeyboardInterrupt

    monkeypatch.setattr(common.Progress, "__call__", interrupt)
    out = tmp_path / "run.json"
    result = invoke("run", "--model", TINY, "--workload", "infer-latency,train", *SHORT, "-o", str(out))
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"--resume {out}" in errors[0], result.stderr
    assert set(table_rows(result.stdout)) == {(TINY, "infer-latency")}  # the finished part's table
    assert [m.workload for m in result_io.load(out).measurements] == ["infer-latency"]


# ----------------------------------------------------------------------------------------------------------
# resume


def test_resume_measures_only_the_missing_cell(tmp_path: Path):
    out = tmp_path / "run.json"
    first = invoke("run", "--model", TINY, "--workload", "infer-latency,infer-throughput", *SHORT, "-q",
                   "-o", str(out))
    assert first.exit_code == 0, first.output
    full = result_io.load(out)
    kept = full.measurements[0]
    # As if the run had been interrupted after its first measurement.
    result_io.save(dataclasses.replace(full, measurements=full.measurements[:1]), out)

    resumed = invoke("run", "--resume", str(out), "--isolation", "inline", "--clock", "fake:1ms")
    assert resumed.exit_code == 0, resumed.output
    repeat_lines = [line for line in resumed.stderr.splitlines() if " repeat " in line]
    assert len(repeat_lines) == 2, resumed.stderr
    assert all("infer-throughput" in line for line in repeat_lines)

    after = result_io.load(out)
    assert [m.workload for m in after.measurements] == ["infer-latency", "infer-throughput"]
    assert json.dumps(after.measurements[0].to_dict()) == json.dumps(kept.to_dict())  # not measured again
    assert after.measurements[1].status == "ok"
    assert after.created_utc == full.created_utc and after.settings == full.settings
    assert set(table_rows(resumed.stdout)) == {(TINY, "infer-latency"), (TINY, "infer-throughput")}


def test_resume_with_output_is_a_usage_error(tmp_path: Path):
    target = tmp_path / "run.json"
    result = invoke("run", "--resume", str(target), "-o", str(tmp_path / "other.json"))
    assert result.exit_code == 2, result.output
    assert "--resume" in result.stderr
    assert "Traceback" not in result.output
    assert not target.exists() and not (tmp_path / "other.json").exists()


# ----------------------------------------------------------------------------------------------------------
# End to end: a real subprocess, fresh worker processes, real clock


@pytest.mark.slow
def test_end_to_end_in_a_subprocess(tmp_path: Path):
    out = tmp_path / "e2e.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-m", "clsbench", "run", "--model", TINY, "--workload", "infer-latency,train",
         "--device", "cpu", "--repeats", "2", "--iterations", "3", "--min-time", "0.05", "-o", str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    shown = subprocess.run([sys.executable, "-m", "clsbench", "show", str(out)], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert set(table_rows(shown.stdout)) == {(TINY, "infer-latency"), (TINY, "train")}
    assert shown.stdout == run.stdout

    data = json.loads(out.read_text(encoding="utf-8"))
    measurements = data["measurements"]
    assert [m["status"] for m in measurements] == ["ok", "ok"], measurements
    pids = [r["pid"] for m in measurements for r in m["repeats"]]
    assert len(pids) == 4 and len(set(pids)) == 4  # every repeat in a fresh process
    for m in measurements:
        assert m["validity"]["stop_rule_met"] is True
        for r in m["repeats"]:
            samples = r["samples"].get("wall_ms") or r["samples"]["iteration_ms"]
            assert len(samples) >= 3
            assert r["samples"]["wall_s"] >= 0.05


# ----------------------------------------------------------------------------------------------------------
# Bad input: one error line, one hint line, a documented exit code, never a traceback

RUN = ["run", "-q", *FAKE, "--repeats", "1", "--iterations", "1", "--warmup", "0", "--min-time", "0"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(["--model", "resnt50"], ["unknown model 'resnt50'", "did you mean", "resnet50"],
                     id="unknown-model"),
        pytest.param(["--model", TINY, "--workload", "inference"], ["unknown workload", "infer-latency"],
                     id="unknown-workload"),
        pytest.param(["--model", TINY, "--mode", "fp33"], ["fp33", "fp32"], id="unknown-mode"),
        pytest.param(["--model", TINY, "--mode", "fp32+turbo"], ["turbo"], id="unknown-modifier"),
        pytest.param(["--model", TINY, "--batch-size", "0"], ["batch size"], id="batch-0"),
        pytest.param(["--model", TINY, "--batch-size", str(10**6)], ["batch size"], id="batch-huge"),
        pytest.param(["--model", TINY, "--batch-size", "-3"], ["batch size"], id="batch-negative"),
        pytest.param(["--model", TINY, "--repeats", "0"], ["repeats"], id="repeats-0"),
        pytest.param(["--model", TINY, "--iterations", "0"], ["iterations"], id="iterations-0"),
        pytest.param(["--model", TINY, "--timeout", "0"], ["timeout"], id="timeout-0"),
        pytest.param(["--model", TINY, "--input-size", "5"], ["input size"], id="input-size"),
        pytest.param(["--suite", "huge"], ["unknown suite"], id="unknown-suite"),
        pytest.param(["--model", TINY, "--device", "tpu"], ["tpu"], id="unknown-device"),
        pytest.param(["--model", TINY, "--device", "cuda:x"], ["cuda:x"], id="device-cuda-x"),
    ],
)
def test_bad_run_input_exits_2(args: list[str], words: list[str], tmp_path: Path):
    out = tmp_path / "run.json"
    assert_clean_error(invoke(*RUN, *args, "-o", str(out)), 2, *words)
    assert not out.exists()  # rejected before anything was measured or written


def test_non_integer_batch_size_exits_2_with_error_and_hint(tmp_path: Path):
    result = invoke(*RUN, "--model", TINY, "--batch-size", "eight", "-o", str(tmp_path / "r.json"))
    assert_clean_error(result, 2, "eight")


def test_non_integer_batch_size_is_rejected_without_traceback(tmp_path: Path):
    result = invoke(*RUN, "--model", TINY, "--batch-size", "eight", "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 2, result.output
    assert "'eight' is not a whole number" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "r.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cuda_on_a_machine_without_gpu_exits_2(tmp_path: Path):
    result = invoke(*RUN[:2], "--model", TINY, "--device", "cuda", "-o", str(tmp_path / "r.json"))
    assert_clean_error(result, 2, "no usable CUDA GPU", "--device cpu")


def test_existing_output_exits_3_and_is_untouched(tmp_path: Path):
    out = tmp_path / "run.json"
    out.write_text("precious\n", encoding="utf-8")
    before = out.stat()
    assert_clean_error(invoke(*RUN, "--model", TINY, "-o", str(out)), 3, "already exists", "--resume")
    assert out.read_text(encoding="utf-8") == "precious\n"
    assert out.stat().st_mtime_ns == before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_output_under_a_regular_file_exits_3(tmp_path: Path):
    blocker = tmp_path / "notadir"
    blocker.write_text("", encoding="utf-8")
    result = invoke(*RUN, "--model", TINY, "-o", str(blocker / "sub" / "run.json"))
    assert_clean_error(result, 3, str(blocker))
    assert blocker.read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("command", ["run", "show"])
def test_a_directory_as_result_file_exits_3(command: str, tmp_path: Path):
    args = [*RUN, "--model", TINY, "-o", str(tmp_path)] if command == "run" else ["show", str(tmp_path)]
    assert_clean_error(invoke(*args), 3, str(tmp_path))


def _bad_result_files(tmp_path: Path, data_dir: Path) -> dict[str, Path]:
    valid = json.loads((data_dir / "result_v1.json").read_text(encoding="utf-8"))
    files = {
        "corrupt": "{\"schema_version\": 1, \"tool\": ",
        "foreign": json.dumps({"benchmarks": [], "version": "1.0"}),
        "other-tool": json.dumps(dict(valid, tool={"name": "pyperf"})),
        "newer": json.dumps(dict(valid, schema_version=SCHEMA_VERSION + 1)),
    }
    paths = {name: tmp_path / f"{name}.json" for name in files}
    for name, text in files.items():
        paths[name].write_text(text, encoding="utf-8")
    paths["missing"] = tmp_path / "missing.json"
    return paths


@pytest.mark.parametrize(("name", "words"), [
    ("missing", ["does not exist"]),
    ("corrupt", ["not valid JSON"]),
    ("foreign", ["not a clsbench result file"]),
    ("other-tool", ["not a clsbench result file"]),
    ("newer", ["newer", "upgrade clsbench"]),
])
def test_show_of_a_bad_file_exits_3(name: str, words: list[str], tmp_path: Path, data_dir: Path):
    path = _bad_result_files(tmp_path, data_dir)[name]
    assert_clean_error(invoke("show", str(path)), 3, str(path), *words)


def test_resume_of_a_bad_file_exits_3(tmp_path: Path, data_dir: Path):
    path = _bad_result_files(tmp_path, data_dir)["newer"]
    result = invoke("run", "-q", "--resume", str(path), "--isolation", "inline")
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: {path} uses result schema {SCHEMA_VERSION + 1}, newer than this clsbench reads "
        f"(<= {SCHEMA_VERSION})"]


def test_models_without_match_exits_2():
    assert_clean_error(invoke("models", "zzz*"), 2, "zzz*")


# ----------------------------------------------------------------------------------------------------------
# models and env


def test_models_lists_matches():
    result = invoke("models", "resnet*")
    assert result.exit_code == 0, result.output
    names = result.stdout.split()
    assert "resnet50" in names and "resnet18" in names
    assert all(name.startswith("resnet") for name in names)
    assert re.search(r"^\d+ model\(s\)$", result.stderr, re.MULTILINE)


def test_models_long_is_a_table_with_source_and_input_size():
    result = invoke("models", "-l", "resnet1*")
    assert result.exit_code == 0, result.output
    header, rule, *rows = result.stdout.splitlines()
    assert header.split() == ["model", "source", "input", "px"] and set(rule) == {"-", " "}
    assert {tuple(r.split()) for r in rows} >= {("resnet18", "torchvision", "224"), ("resnet101", "torchvision", "224")}


def test_env_prints_rows():
    result = invoke("env", "--device", "cpu")
    assert result.exit_code == 0, result.output
    labels = [line.split("  ")[0] for line in result.stdout.splitlines()]
    assert "CPU" in labels and "torch" in labels and "GPU" in labels
    torch_row = next(line for line in result.stdout.splitlines() if line.startswith("torch "))
    assert torch.__version__ in torch_row


def test_env_json_is_what_results_record():
    result = invoke("env", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert {"cpu", "software", "gpu", "unavailable"} <= set(facts)
    assert facts["device"] == "cpu"
    assert facts["software"]["torch"] == torch.__version__


# ----------------------------------------------------------------------------------------------------------
# pipes and signals


def _subprocess_env(tmp_path: Path) -> dict[str, str]:
    tests = Path(__file__).resolve().parent
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "src"), str(tests)]),
            "CLSBENCH_DB": str(tmp_path / "index.sqlite3")}


@pytest.mark.slow
@pytest.mark.parametrize("args", [["models", "*"], ["models", "-l", "resnet*"], ["history"],
                                  ["show", "tests/data/result_v1.json"],
                                  ["show", "tests/data/result_v1.json", "--format", "csv"]])
def test_piping_a_listing_into_head_is_quiet(args: list[str], tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    command = " ".join([sys.executable, "-m", "clsbench", *(f"'{a}'" for a in args)])
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -1"], capture_output=True, text=True,
                          env=_subprocess_env(tmp_path), cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr.lower() and "Traceback" not in done.stderr


@pytest.mark.slow
def test_sigterm_ends_a_run_like_ctrl_c(tmp_path: Path) -> None:
    """The first measurement finishes, the second hangs; SIGTERM then gives the table of the first, the resume
    line, exit code 130 and a file holding the first measurement."""
    import signal
    import time

    out = tmp_path / "run.json"
    command = [sys.executable, "-m", "clsbench", "run", "--model", f"{TINY},clsbench_testmodels:hang_model",
               "--workload", "infer-throughput", *SHORT, "--repeats", "1", "--order", "cell", "-q", "-o", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_subprocess_env(tmp_path), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if out.exists() and result_io.load(out).measurements:
                break
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and f"--resume {out}" in stderr
    assert set(table_rows(stdout)) == {(TINY, "infer-throughput")}
    assert [m.model for m in result_io.load(out).measurements] == [TINY]


@pytest.mark.slow
def test_ctrl_c_while_the_forkserver_starts_prints_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group, the forkserver included, while it is still importing torch."""
    import signal
    import time

    import psutil

    command = [sys.executable, "-m", "clsbench", "run", "--model", TINY, "--workload", "infer-throughput", "--device",
               "cpu", "--repeats", "1", "--warmup", "1", "--iterations", "2", "--min-time", "0", "-q", "-o",
               str(tmp_path / "run.json")]  # worker processes: the forkserver starts
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_subprocess_env(tmp_path), cwd=tmp_path, start_new_session=True,
                               preexec_fn=as_a_terminal_starts_it)
    try:
        deadline = time.monotonic() + 60
        def command_line(child: psutil.Process) -> str:
            try:
                return " ".join(child.cmdline())
            except psutil.Error:  # a short-lived child (e.g. one the environment capture ran) already gone
                return ""

        while time.monotonic() < deadline:
            children = psutil.Process(process.pid).children()
            if any("forkserver" in command_line(child) for child in children):
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the forkserver is importing its preload modules now
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr



@pytest.mark.parametrize(("where", "value"), [("batch_size", "32"), ("batch_size", True), ("summary", [1]),
                                              ("summary.throughput_img_s", "fast"),
                                              ("summary.latency_ms.p50", {"ms": 1}), ("environment", [])])
def test_a_wrong_typed_value_is_a_damaged_file(tmp_path: Path, where: str, value: object) -> None:
    data = json.loads((REPO / "tests" / "data" / "result_v1.json").read_text(encoding="utf-8"))
    target = data if where == "environment" else data["measurements"][0]
    *path, last = where.split(".")
    for key in path:
        target = target[key]
    target[last] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    for args in (["show", str(bad)], ["import", str(bad)], ["report", str(bad), "-o", str(tmp_path / "r.html")]):
        result = invoke(*args)
        assert result.exit_code == 3, (args, result.output)
        assert "Traceback" not in result.output and "internal error" not in result.output
        assert "is damaged" in result.output, result.output


def test_resume_retry_failed_measures_the_failed_cells_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run.json"
    monkeypatch.setenv("CLSBENCH_TEST_FLAKY", "1")
    first = invoke("run", "--model", f"{TINY},clsbench_testmodels:flaky_model", "--workload", "infer-throughput",
                   *SHORT, "-o", str(out))
    assert first.exit_code == 4
    monkeypatch.setenv("CLSBENCH_TEST_FLAKY", "0")
    again = invoke("run", "--resume", str(out), "-q")  # nothing is missing: the failure stands
    assert again.exit_code == 4
    assert [m.status for m in result_io.load(out).measurements] == ["ok", "failed"]
    retried = invoke("run", "--resume", str(out), "--retry-failed", "-q")
    assert retried.exit_code == 0, retried.output
    assert [(m.model, m.status) for m in result_io.load(out).measurements] == [
        (TINY, "ok"), ("clsbench_testmodels:flaky_model", "ok")]
    alone = invoke("run", "--model", TINY, "--retry-failed", *SHORT)
    assert alone.exit_code == 2 and "--retry-failed goes with --resume" in alone.stderr


def test_a_file_another_process_is_writing_cannot_be_resumed(tmp_path: Path) -> None:
    from clsbench.results.io import writer_lock

    out = tmp_path / "run.json"
    assert invoke("run", "--model", TINY, "--workload", "infer-throughput", *SHORT, "-o", str(out)).exit_code == 0
    with writer_lock(out):  # as a live run holds it
        result = invoke("run", "--resume", str(out), "--retry-failed")
    assert result.exit_code == 3, result.output
    assert f"{out} is being written by another clsbench process (pid {os.getpid()})" in result.stderr
    assert invoke("run", "--resume", str(out), "-q").exit_code == 0  # released: it resumes (nothing to do)
    assert not (tmp_path / ".run.json.lock").exists()


@pytest.mark.parametrize("model", ["clsbench_testmodels:host_oom_model", "clsbench_testmodels:memory_error_model"])
def test_running_out_of_host_memory_is_oom(model: str, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke("run", "--model", model, "--workload", "infer-throughput", *SHORT, "-o", str(out))
    assert result.exit_code == 4
    (m,) = result_io.load(out).measurements
    assert (m.status, m.reason) == ("failed", "oom")


@pytest.mark.parametrize(("model", "words"), [
    ("clsbench_testmodels:ten_classes", "takes no num_classes"),
    ("os:getcwd", "takes no num_classes"),
    ("clsbench_testmodels:not_a_model", "returned a str, not a torch.nn.Module"),
])
def test_a_custom_builder_breaking_the_contract_is_one_line_before_anything_runs(model: str, words: str,
                                                                                tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke("run", "--model", model, "--workload", "train,infer-throughput", *SHORT, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert words in result.stderr and len([x for x in result.stderr.splitlines() if x.startswith("error:")]) == 1
    assert not out.exists()


@pytest.mark.parametrize("args", [["--model", ""], ["--model", "resnet18,"], ["--mode", ""], ["--workload", " "]])
def test_an_empty_list_value_is_an_error_not_the_default_suite(args: list[str]) -> None:
    result = invoke("run", *args, *SHORT)
    assert result.exit_code == 2 and "has an empty value" in result.stderr, result.output


def test_run_takes_model_patterns_as_models_does(tmp_path: Path) -> None:
    from clsbench.engine.planning import expand_models

    assert expand_models(["resnet1*"]) == ["resnet101", "resnet152", "resnet18"]
    result = invoke("run", "--model", "nosuchnet*", *SHORT)
    assert result.exit_code == 2 and "no model matches 'nosuchnet*'" in result.stderr



@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")
@pytest.mark.parametrize("device", ["cuda", "cpu", "auto"])
def test_probe_without_a_gpu_gives_one_consistent_hint(device: str) -> None:
    result = invoke("probe", "--device", device)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: the probe measures an NVIDIA GPU, and none is usable here",
                                          "hint: run it where `nvidia-smi` lists a GPU; `clsbench env` shows what "
                                          "this machine has"]


def test_a_forked_child_that_inherits_the_sigterm_handler_ends_as_sigterm_ends_it() -> None:
    """A pool worker forked from a command inherits its SIGTERM handler; SIGTERM must end it quietly (signal exit),
    not raise KeyboardInterrupt in it (a traceback on the user's screen when the pool closes)."""
    import multiprocessing
    import signal
    import time

    from clsbench.cli import app

    previous = signal.getsignal(signal.SIGTERM)
    app._COMMAND_PID[0] = os.getpid()
    signal.signal(signal.SIGTERM, app._terminated)
    try:
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        child.start()
        time.sleep(0.5)
        child.terminate()  # SIGTERM
        child.join(10)
        assert child.exitcode == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
