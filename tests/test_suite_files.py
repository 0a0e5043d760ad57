"""Suite files: ``clsbench run --suite my.yaml`` measures a suite a user wrote (core/suites.py reads and checks its
structure, api.get_suite checks its names against the registries).

A valid file runs with the tiny test model inline under the fake clock; every invalid file is one ``error:`` line
and one ``hint:`` line with exit code 2 and nothing written; a run of a suite file resumes after the file is gone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clsbench import api
from clsbench.core.suites import SUITE_FILE_EXAMPLE, SUITES, is_suite_file, load_suite_file
from clsbench.errors import EXIT_INVALID_INPUT, InvalidInputError
from clsbench.results import io as result_io
from test_cli import SHORT, TINY, assert_clean_error, invoke, table_rows

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "suite-edge.yaml"

VALID = f"""\
name: tiny-pair
description: the tiny test model, two workloads
models: ["{TINY}"]
batch_sizes:
  infer-latency: 1
  infer-throughput: 2
modes: [fp32]
"""


def write(tmp_path: Path, text: str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_suite_file_runs_and_the_result_names_the_suite_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    out = tmp_path / "run.json"
    result = invoke("run", "--suite", str(path), *SHORT, "-q", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert set(table_rows(result.stdout)) == {(TINY, "infer-latency"), (TINY, "infer-throughput")}
    stored = result_io.load(out)
    assert stored.settings["suite"] == f"tiny-pair ({path.resolve()})"
    assert [(m.workload, m.batch_size, m.mode) for m in stored.measurements] == [
        ("infer-latency", 1, "fp32"), ("infer-throughput", 2, "fp32")]


def test_options_given_replace_the_suite_files_axes(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    plan = api.plan_run(suite=str(path), workloads=["infer-throughput"], batch_sizes=[4], device="cpu",
                        environment={})
    assert [(c.model, c.workload, c.batch_size) for c in plan.cells] == [(TINY, "infer-throughput", 4)]


def test_name_and_description_are_optional(tmp_path: Path) -> None:
    path = write(tmp_path, f"models: [{TINY}]\nbatch_sizes: {{train: 2}}\nmodes: [fp32]\n", "my-edge.yml")
    suite = api.get_suite(str(path))
    assert (suite.name, suite.description, suite.batch_sizes) == ("my-edge", "", {"train": 2})
    assert suite.label == f"my-edge ({path.resolve()})"
    plan = api.plan_run(suite=str(path), device="cpu", environment={})
    assert plan.suite == suite.label


def test_resume_of_a_suite_file_run_needs_no_file(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    out = tmp_path / "run.json"
    first = invoke("run", "--suite", str(path), *SHORT, "-q", "-o", str(out))
    assert first.exit_code == 0, first.output
    full = result_io.load(out)
    result_io.save(dataclasses.replace(full, measurements=full.measurements[:1]), out)  # as if interrupted
    path.unlink()

    resumed = invoke("run", "--resume", str(out), "--isolation", "inline", "--clock", "fake:1ms")
    assert resumed.exit_code == 0, resumed.output
    after = result_io.load(out)
    assert [m.workload for m in after.measurements] == ["infer-latency", "infer-throughput"]
    assert after.settings == full.settings


def test_named_suites_are_not_files_and_yaml_names_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick").write_text("not a suite file", encoding="utf-8")
    (tmp_path / "mine").write_text(VALID, encoding="utf-8")
    assert not is_suite_file("quick")  # a named suite wins over a file of the same name
    assert is_suite_file("./quick") and is_suite_file("mine") and is_suite_file("absent.yaml")
    assert not is_suite_file("absent")
    assert api.get_suite("mine").name == "tiny-pair"


@pytest.mark.parametrize("text", [SUITE_FILE_EXAMPLE, EXAMPLE.read_text(encoding="utf-8")],
                         ids=["clsbench-suites-example", "examples/suite-edge.yaml"])
def test_the_documented_examples_are_valid_suites(tmp_path: Path, text: str) -> None:
    suite = api.get_suite(str(write(tmp_path, text, "edge.yaml")))
    assert suite.name == "edge" and suite.models and suite.batch_sizes and suite.modes


def test_clsbench_suites_lists_the_named_suites_and_the_file_format() -> None:
    result = invoke("suites")
    assert result.exit_code == 0, result.output
    for name in SUITES:
        assert f"\n{name}: " in "\n" + result.stdout
    assert "clsbench run --suite FILE.yaml" in result.stdout
    for line in SUITE_FILE_EXAMPLE.splitlines():
        assert line in result.stdout


def test_clsbench_suites_file_checks_it_and_shows_what_it_measures(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    result = invoke("suites", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"tiny-pair ({path.resolve()}): the tiny test model")
    assert "infer-latency bs1, infer-throughput bs2" in result.stdout
    assert_clean_error(invoke("suites", str(tmp_path / "absent.yaml")), 2, "does not exist")


#: (file text, words of the error line and hint). None: no file at all.
BAD = [
    pytest.param(None, ["does not exist"], id="missing-file"),
    pytest.param("", ["is empty"], id="empty-file"),
    pytest.param("models: [a, b\nmodes: [fp32]\n", ["YAML syntax error at line 2", "column"], id="yaml-syntax"),
    pytest.param("name: x\n  models: [a]\n", ["YAML syntax error at line 2"], id="yaml-indentation"),
    pytest.param("- resnet18\n- resnet50\n", ["holds a list, not a mapping"], id="not-a-mapping"),
    pytest.param(VALID + "model: [x]\n", ["unknown key 'model'", "did you mean 'models'"], id="unknown-key"),
    pytest.param(VALID.replace("modes: [fp32]\n", ""), ["modes is missing"], id="missing-key"),
    pytest.param(VALID.replace("modes: [fp32]", "modes: fp32"), ["modes must be a list, got a string"],
                 id="modes-a-string"),
    pytest.param(VALID.replace("modes: [fp32]", "modes: []"), ["modes is empty"], id="modes-empty"),
    pytest.param(VALID.replace(f'models: ["{TINY}"]', "models: []"), ["models is empty"], id="models-empty"),
    pytest.param(VALID.replace(f'models: ["{TINY}"]', "models: [resnet18, 50]"),
                 ["models holds a whole number (50), not a name"], id="model-a-number"),
    pytest.param(VALID.replace(f'models: ["{TINY}"]', "models: ['resnet*']"), ["pattern", "clsbench models"],
                 id="model-pattern"),
    pytest.param(VALID.replace("name: tiny-pair", "name: [a, b]"), ["name must be one line of text, got a list"],
                 id="name-a-list"),
    pytest.param(VALID.replace("  infer-latency: 1\n  infer-throughput: 2\n", " {}\n"), ["batch_sizes is empty"],
                 id="batch-sizes-empty"),
    pytest.param(VALID.replace("  infer-latency: 1\n  infer-throughput: 2\n", " [1, 2]\n"),
                 ["batch_sizes must be a mapping", "got a list"], id="batch-sizes-a-list"),
    pytest.param(VALID.replace("infer-latency: 1", "infer-latency: one"),
                 ["batch_sizes.infer-latency must be a whole number, got a string"], id="batch-size-a-string"),
    pytest.param(VALID.replace("infer-latency: 1", "infer-latency: 2.5"),
                 ["batch_sizes.infer-latency must be a whole number, got a number"], id="batch-size-a-float"),
    pytest.param(VALID.replace("infer-latency: 1", "infer-latency: 0"), ["batch_sizes.infer-latency must be 1.."],
                 id="batch-size-0"),
    pytest.param(VALID.replace("infer-latency: 1", "inference: 1"), ["unknown workload 'inference'"],
                 id="unknown-workload"),
    pytest.param(VALID.replace("modes: [fp32]", "modes: [fp33]"), ["fp33"], id="unknown-mode"),
    pytest.param(VALID.replace("modes: [fp32]", "modes: [FP32]"), ["'FP32' is written 'fp32'"],
                 id="mode-spelling"),
    pytest.param(VALID.replace(f'models: ["{TINY}"]', "models: [resnt50]"),
                 ["unknown model 'resnt50'", "did you mean", "resnet50"], id="unknown-model"),
]


@pytest.mark.parametrize(("text", "words"), BAD)
def test_a_bad_suite_file_is_one_error_line_and_exit_2(tmp_path: Path, text: str | None, words: list[str]) -> None:
    path = tmp_path / "suite.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    out = tmp_path / "run.json"
    error = assert_clean_error(invoke("run", "--suite", str(path), *SHORT, "-o", str(out)), EXIT_INVALID_INPUT,
                               *words)
    assert f"suite file {path}" in error
    assert not out.exists()  # rejected before anything was measured or written


def test_a_directory_or_non_utf8_file_is_one_error_line(tmp_path: Path) -> None:
    folder = tmp_path / "suite.yaml"
    folder.mkdir()
    with pytest.raises(InvalidInputError, match="is a directory"):
        load_suite_file(folder)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00models")
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        load_suite_file(binary)


def test_the_yaml_loader_is_the_safe_one(tmp_path: Path) -> None:
    path = write(tmp_path, "!!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(InvalidInputError, match="YAML that names a Python object at line 1"):
        load_suite_file(path)


def test_an_unknown_name_hints_at_suite_files() -> None:
    result = invoke("run", "--suite", "huge", *SHORT)
    assert_clean_error(result, 2, "unknown suite 'huge'", "seed, quick", "FILE.yaml", "clsbench suites")
