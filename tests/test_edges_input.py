"""Issue 38, items 6-12: wrong input is refused in one line before anything is measured, and what can be known before
timing (a builder that raises, a head that does not match train's labels, an input size the network cannot take) is
checked before timing.

Every command runs in-process through click's CliRunner on a CPU; the only measurement (item 8's finished file) runs
inline under the fake clock. The custom builders below are named ``test_edges_input:<function>`` (tests/ is on
sys.path, see conftest.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner, Result

from clsbench import api
from clsbench.cli import main
from clsbench.core.plan import StopRule
from clsbench.errors import InvalidInputError
from clsbench.procedures.tune import TuneSettings
from clsbench.procedures.tune.budget import smallest_budget_s
from test_cli import assert_clean_error

TINY = "clsbench_testmodels:tiny"
FAKE = ["--device", "cpu", "--isolation", "inline", "--clock", "fake:1ms"]
SHORT = [*FAKE, "--repeats", "1", "--iterations", "2", "--warmup", "0", "--min-time", "0"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def ten_class_head(num_classes: int = 1000) -> torch.nn.Module:
    """Takes num_classes and ignores it: a 10-class head whatever clsbench asks for."""
    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 10))


ten_class_head.input_size = 32


def raising_builder(num_classes: int = 1000) -> torch.nn.Module:
    raise ValueError("weights file /nowhere/model.pt not found")


raising_builder.input_size = 32


# ----------------------------------------------------------------------------------------------------------
# 6: contradictory stop rules


@pytest.mark.parametrize(("args", "words"), [
    (["--min-time", "5", "--max-time", "1"], ["--max-time 1 is below --min-time 5", "raise --max-time to 5"]),
    (["--max-time", "0.5"], ["--max-time 0.5 is below the 1 s", "--min-time 0.5"]),
])
def test_a_maximum_time_below_the_minimum_is_refused(args: list[str], words: list[str], tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke("run", "--model", TINY, "--device", "cpu", "--isolation", "inline", *args, "-o", str(out))
    assert_clean_error(result, 2, *words)
    assert not out.exists()


# ----------------------------------------------------------------------------------------------------------
# 7, 8: run --resume


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run's file (the tests below only read it)."""
    out = tmp_path_factory.mktemp("finished") / "run.json"
    result = invoke("run", "--model", TINY, "--workload", "infer-throughput", *SHORT, "-q", "-o", str(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(("args", "flag"), [
    (["--model", "resnet18"], "--model"),
    (["--repeats", "5"], "--repeats"),
    (["--device", "cpu"], "--device"),
    (["--no-telemetry"], "--telemetry/--no-telemetry"),
])
def test_resume_refuses_what_the_file_decides(finished: Path, args: list[str], flag: str) -> None:
    before = finished.read_bytes()
    result = invoke("run", "--resume", str(finished), *args)
    assert_clean_error(result, 2, f"so {flag} would be ignored", "settings stored in it", f"drop {flag}")
    assert finished.read_bytes() == before


def test_resume_of_a_finished_file_says_there_is_nothing_to_resume(finished: Path) -> None:
    before = finished.stat().st_mtime_ns
    store = finished.parent / "index.sqlite3"
    result = invoke("run", "--resume", str(finished), "-q", "--isolation", "inline",
                    "--db", str(store))  # what --resume may take
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == (f"nothing to resume: all 1 measurement(s) of {finished} are finished; "
                                     f"`clsbench show {finished}` prints them")
    assert result.stdout == ""
    assert finished.stat().st_mtime_ns == before


# ----------------------------------------------------------------------------------------------------------
# 9: -o naming a folder


@pytest.mark.parametrize("command", [
    ["run", "--model", TINY, *SHORT],
    ["sweep", "--model", TINY, "--batch-size", "1,2", *SHORT],
    ["soak", "--model", TINY, "--duration", "10s", *FAKE],
])
def test_an_output_that_is_a_folder_is_named_a_folder(command: list[str], tmp_path: Path) -> None:
    result = invoke(*command, "-o", str(tmp_path))
    assert result.exit_code == 3, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert errors == [f"error: {tmp_path} is a folder, and the output is one file",
                      f"hint: name a file inside it, e.g. -o {tmp_path / 'result.json'}"], result.stderr
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------------------
# 10: a tune budget too small for one screening measurement


def test_a_tune_budget_too_small_for_one_screening_measurement_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "tune.json"
    result = invoke("tune", "--model", TINY, "--device", "cpu", "--budget", "1s", "-o", str(out))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    error = [line for line in result.stderr.splitlines() if line.startswith(("error:", "hint:"))]
    assert error == ["error: --budget 1.0s is too small for one screening measurement on cpu (about 2.2 s: a fresh "
                     "worker and its warm-up and timed minimum), so nothing would be measured",
                     "hint: give --budget 3s or more (the default on cpu is 3m00s)"], result.stderr
    assert not out.exists()


def test_the_smallest_budget_named_is_one_that_fits() -> None:
    # CPU infer-throughput: a 2 s worker, then the screening rule's quarter of the 1 s minimum (0.25 s).
    assert smallest_budget_s("cpu", StopRule(warmup=2, min_iterations=2, min_seconds=0.25)) == pytest.approx(2.25)
    assert TuneSettings(model=TINY, device="cpu", budget="3s").budget_s("cpu") == 3.0
    with pytest.raises(InvalidInputError, match="--budget 3s or more"):
        TuneSettings(model=TINY, device="cpu", budget="2s").budget_s("cpu")
    assert math.isinf(TuneSettings(model=TINY, device="cpu", exhaustive=True).budget_s("cpu"))


# ----------------------------------------------------------------------------------------------------------
# 11: serve takes one model


def test_serve_with_several_models_says_it_takes_one() -> None:
    result = invoke("serve", "--model", "resnet18,mobilenet_v3_small", "--device", "cpu")
    assert_clean_error(result, 2, "serve takes one model, got 2 in --model resnet18,mobilenet_v3_small",
                       "clsbench serve --model resnet18; clsbench serve --model mobilenet_v3_small")


# ----------------------------------------------------------------------------------------------------------
# 12: what can be known before timing


def test_an_input_size_the_network_cannot_take_is_refused_with_the_smallest_it_takes(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke("run", "--model", "alexnet", "--input-size", "16", *SHORT, "-o", str(out))
    error = assert_clean_error(result, 2, "alexnet cannot take 16x16 inputs", "Output size is too small",
                               "use --input-size 63 or more", "its own is 224")
    assert "crash" not in error
    assert not out.exists()
    # 63 is the smallest side: it is planned, one less is refused.
    api.plan_run(models=["alexnet"], workloads=["infer-latency"], device="cpu",
                 options=api.MeasureOptions(input_size=63))
    with pytest.raises(InvalidInputError, match="cannot take 62x62"):
        api.plan_run(models=["alexnet"], workloads=["infer-latency"], device="cpu",
                     options=api.MeasureOptions(input_size=62))


def test_a_head_that_does_not_match_the_train_labels_is_refused_before_training(tmp_path: Path) -> None:
    model = "test_edges_input:ten_class_head"
    out = tmp_path / "run.json"
    result = invoke("run", "--model", model, "--workload", "train", *SHORT, "-o", str(out))
    assert_clean_error(result, 2, "has a head of 10 classes", "draws labels from 1000 classes",
                       "num_classes argument its builder is given (1000)", "--workload infer-latency,infer-throughput")
    assert not out.exists()
    # Inference does not draw labels: the same network is planned for it.
    plan = api.plan_run(models=[model], workloads=["infer-latency", "infer-throughput"], device="cpu")
    assert {cell.workload for cell in plan.cells} == {"infer-latency", "infer-throughput"}


def test_a_builder_that_raises_is_one_line_before_any_worker(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke("run", "--model", "test_edges_input:raising_builder", "--workload", "infer-throughput", *SHORT,
                    "-o", str(out))
    assert_clean_error(result, 2, "model 'test_edges_input:raising_builder' cannot be built",
                       "its builder raised ValueError: weights file /nowhere/model.pt not found", "fix the builder")
    assert not out.exists()
