"""``clsbench export --triton-repo``: the repository's files, the artifacts at other batch sizes, ``--from`` a serve
result, every refusal, and that a failed export leaves nothing behind.

CPU only, tiny: the test model ``clsbench_testmodels:tiny`` at 32x32. Most exports build in this process
(``isolate=False``); one goes through the command line with the real isolated build process. The configuration is
parsed with Triton's own protobuf definition (tritonclient's ``model_config_pb2``) when tritonclient is installed.

Not here: loading the repository in a real tritonserver. The only one installable on these machines is the server
PyTriton embeds (nvidia-pytriton 0.7.0), whose ``tritonserver/backends`` folder holds the python backend alone: no
onnxruntime and no pytorch backend to load these formats with.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner, Result

from clsbench.backends.base import BackendRequest, Loaded
from clsbench.backends.parity import PARITY_TOLERANCE, parity_figures
from clsbench.cli import main
from clsbench.deploy import FORMATS, ExportFailedError, TritonExportSettings, export_triton_repo, resolve
from clsbench.deploy.base import TensorSpec
from clsbench.deploy.triton_repo import Batching, render_config
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.models import get_model_spec
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement
from clsbench.serving.analysis import scenario_summary

#: torch.jit's deprecation warnings: TorchScript is deployed as legacy on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")

TINY = "clsbench_testmodels:tiny"
SIZE = 32
MS = 1_000_000  # ns per ms
SERVE_SETTINGS = {"model": TINY, "device": "cuda", "latency_bound_ms": 15.0, "latency_percentile": 0.99,
                  "min_duration_s": 10.0, "seed": 3, "input_size": SIZE}


def model_config(path: Path) -> Any:
    """``config.pbtxt`` parsed by Triton's own message definition (skips without tritonclient)."""
    pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                              reason="tritonclient is not installed: pip install 'tritonclient[grpc,http]'")
    from google.protobuf import text_format

    return text_format.Parse(path.read_text(encoding="utf-8"), pb2.ModelConfig())


def export(tmp: Path, **fields: Any) -> Any:
    fields = {"model": TINY, "input_size": SIZE, "isolate": False, **fields}
    return export_triton_repo(TritonExportSettings(repo_dir=str(tmp), **fields))


def eager_logits(images: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """fp32 eager logits of the tiny model from ``seed``, the check's reference, built independently here."""
    model = get_model_spec(TINY).build(seed=seed, input_size=SIZE).eval()
    with torch.inference_mode():
        return model(images)


@pytest.fixture(scope="module")
def onnx_repo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("onnxruntime")
    root = tmp_path_factory.mktemp("repo")
    return export(root, mode="fp16", backend="onnxruntime", name="tiny_onnx", max_batch=32, max_delay_ms=0.5,
                  instances=3, preferred_batch=(8, 16), device="cuda")


@pytest.fixture(scope="module")
def torchscript_repo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("repo")
    return export(root, mode="fp32+cl", backend="torchscript", device="cpu", seed=5)


# ------------------------------------------------------------------------------------------------ the files


def test_the_onnx_config_is_what_triton_reads(onnx_repo: Any) -> None:
    path = onnx_repo.path
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) == [
        "1", "1/model.onnx", "README.txt", "config.pbtxt"]
    config = model_config(path / "config.pbtxt")
    assert config.name == "tiny_onnx" and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 32
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert len(config.instance_group) == 1
    group = config.instance_group[0]
    assert group.count == 3 and group.kind == group.KIND_GPU
    (source,), (target,) = config.input, config.output
    assert (source.name, list(source.dims)) == ("images", [3, SIZE, SIZE])
    assert (target.name, list(target.dims)) == ("logits", [1000])
    from tritonclient.grpc import model_config_pb2

    assert source.data_type == model_config_pb2.TYPE_FP16 and target.data_type == model_config_pb2.TYPE_FP16


def test_the_torchscript_config_names_tensors_by_position(torchscript_repo: Any) -> None:
    config = model_config(torchscript_repo.path / "config.pbtxt")
    from tritonclient.grpc import model_config_pb2

    assert config.name == "clsbench_testmodels_tiny" and config.platform == "pytorch_libtorch"
    assert config.max_batch_size == 64 and config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert list(config.dynamic_batching.preferred_batch_size) == []
    group = config.instance_group[0]
    assert group.count == 1 and group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU  # the default count
    assert [(t.name, t.data_type) for t in (*config.input, *config.output)] == [
        ("images__0", model_config_pb2.TYPE_FP32), ("logits__0", model_config_pb2.TYPE_FP32)]


def test_the_onnx_file_takes_any_batch_and_matches_eager(onnx_repo: Any) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_repo.path / "1" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    assert isinstance(session.get_inputs()[0].shape[0], str)  # a symbol: the batch is dynamic
    for batch in (1, 5):
        images = torch.randn(batch, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(batch))
        out = session.run(None, {"images": images.half().numpy()})[0]
        assert out.shape == (batch, 1000) and str(out.dtype) == "float16"
        error, _, _ = parity_figures(torch.from_numpy(out).float(), eager_logits(images))
        assert error <= PARITY_TOLERANCE["fp16"]


def test_the_torchscript_file_takes_any_batch_and_matches_eager(torchscript_repo: Any) -> None:
    module = torch.jit.load(str(torchscript_repo.path / "1" / "model.pt"), map_location="cpu")
    for batch in (1, 5):
        images = torch.randn(batch, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(batch))
        with torch.inference_mode():
            out = module(images)
        assert out.shape == (batch, 1000)
        error, _, _ = parity_figures(out, eager_logits(images, seed=5))
        assert error <= PARITY_TOLERANCE["fp32"]


def test_the_readme_says_what_was_checked_and_how_to_start(onnx_repo: Any, torchscript_repo: Any) -> None:
    text = (onnx_repo.path / "README.txt").read_text(encoding="utf-8")
    assert text == onnx_repo.readme
    assert [p["batch"] for p in onnx_repo.parity] == [1, 3] and all(p["passed"] for p in onnx_repo.parity)
    figure = f"batch 3: {onnx_repo.parity[1]['max_abs_err_rel']:.2e}"
    assert figure in text and "(tolerance 0.005 for fp16)" in text
    assert f"tritonserver --model-repository={onnx_repo.path.parent.resolve()}" in text
    assert onnx_repo.start_command in text and "docker run --gpus all" in onnx_repo.start_command
    assert "seeded random initialisation (seed 0)" in text
    legacy = (torchscript_repo.path / "README.txt").read_text(encoding="utf-8")
    assert "legacy" in legacy.splitlines()[0] and "docker run --rm" in torchscript_repo.start_command


def test_render_config_without_preferred_sizes_on_cpus() -> None:
    tensors = (TensorSpec("x", "TYPE_FP32", (3, 8, 8)), TensorSpec("y", "TYPE_FP32", (10,)))
    text = render_config("m", "onnxruntime_onnx", tensors, Batching(8, 1.25, 1, kind="KIND_CPU"))
    assert "preferred_batch_size" not in text and "max_queue_delay_microseconds: 1250" in text
    assert "kind: KIND_CPU" in text and 'name: "x"' in text and "dims: [ 3, 8, 8 ]" in text


# ------------------------------------------------------------------------------------------------ --from


def server_step(index: int, setting: tuple[int, float, int], target: float, valid: bool, mode: str) -> dict[str, Any]:
    batch, delay, instances = setting
    return {"index": index, "mode": mode, "scenario": "server", "role": "bisect",
            "setting": {"max_batch": batch, "max_delay_ms": delay, "instances": instances, "buckets": [batch],
                        "cuda_graphs": False},
            "params": {"scenario": "Server", "target_qps": target},
            "loadgen": {"validity": "VALID" if valid else "INVALID", "perf_constraints_met": valid,
                        "latency_ns": {"p99": (10 if valid else 20) * MS}, "completed_qps": target,
                        "query_count": 1000},
            "server": {}, "error": None, "log_dir": f"serve.loadgen/{index:03d}", "wall_s": 10.0}


def serve_file(tmp: Path, lines: dict[tuple[str, str], list[dict[str, Any]]]) -> Path:
    """A serve result with one server measurement per (mode, backend), saved as clsbench saves it."""
    measurements = tuple(
        Measurement(model=TINY, workload="serve-server", mode=mode, batch_size=64, device="cuda", status="ok",
                    input_size=SIZE, repeats=tuple(steps), backend=backend,
                    summary=scenario_summary("server", steps, SERVE_SETTINGS))
        for (mode, backend), steps in lines.items())
    result = BenchmarkResult(environment={}, settings={"serve": {"format": 1, "settings": SERVE_SETTINGS}},
                             measurements=measurements)
    path = tmp / "serve.json"
    result_io.save(result, path)
    return path


def test_from_a_serve_result_takes_its_winners_setting_and_mode(tmp_path: Path) -> None:
    fp16 = [server_step(1, (32, 1.0, 2), 900, True, "fp16"), server_step(2, (16, 4.0, 3), 1500, True, "fp16"),
            server_step(3, (16, 4.0, 3), 1800, False, "fp16")]
    fp32 = [server_step(4, (64, 2.0, 1), 1200, True, "fp32")]
    path = serve_file(tmp_path, {("fp16", "onnxruntime"): fp16, ("fp32", "eager"): fp32})
    outcome = export(tmp_path / "repo", model=None, input_size=None, from_result=str(path))
    plan = outcome.plan
    assert plan.backend == "onnxruntime" and plan.request.mode == "fp16" and plan.request.seed == 3
    assert plan.winner is not None and plan.winner.qps == 1500
    config = model_config(outcome.path / "config.pbtxt")
    assert config.max_batch_size == 16 and config.dynamic_batching.max_queue_delay_microseconds == 4000
    assert config.instance_group[0].count == 3
    assert "from: " + str(path) in outcome.readme and "1,500 qps" in outcome.readme
    # an option given on the command line wins over the file
    override = resolve(TritonExportSettings(repo_dir=str(tmp_path / "repo"), from_result=str(path), instances=1,
                                            name="other"))
    assert (override.batching.instances, override.batching.max_batch) == (1, 16)


def test_from_a_winner_on_eager_names_the_formats(tmp_path: Path) -> None:
    path = serve_file(tmp_path, {("fp16", "eager"): [server_step(1, (32, 1.0, 2), 900, True, "fp16")]})
    with pytest.raises(InvalidInputError) as caught:
        resolve(TritonExportSettings(repo_dir=str(tmp_path / "repo"), from_result=str(path)))
    assert "ran on eager" in caught.value.message and "onnxruntime (onnxruntime_onnx)" in caught.value.message
    assert "--backend onnxruntime" in caught.value.hint
    chosen = resolve(TritonExportSettings(repo_dir=str(tmp_path / "repo"), from_result=str(path),
                                          backend="torchscript"))
    assert chosen.backend == "torchscript" and chosen.batching.max_batch == 32 and chosen.request.mode == "fp16"


# ------------------------------------------------------------------------------------------------ refusals


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, ["export", *args])


def one_error(result: Result, code: int, *words: str) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--backend", "onnxrt"], 2, ["unknown backend 'onnxrt'"]),
    (["--backend", "eager"], 2, ["--backend eager has no Triton model format", "onnxruntime (onnxruntime_onnx)"]),
    (["--backend", "export"], 2, ["--backend export has no Triton model format", "torchscript (pytorch_libtorch)"]),
    (["--backend", "tensorrt"], 2, ["tensorrt_plan", "no TensorRT here"]),
    (["--mode", "amp-fp16"], 2, ["amp-fp16 is autocast", "use fp16"]),
    (["--mode", "fp32+compile"], 2, ["+compile is torch.compile"]),
    (["--mode", "bf16"], 2, ["no bfloat16 convolution kernel", "--backend torchscript"]),
    (["--max-batch", "0"], 2, ["--max-batch must be at least 1"]),
    (["--preferred-batch", "16,x"], 2, ["--preferred-batch 'x' is not a whole number"]),
    (["--preferred-batch", "128"], 2, ["outside 1..64"]),
    (["--device", "tpu"], 2, ["--device 'tpu'"]),
    (["--name", "../up"], 2, ["not a usable model name"]),
])
def test_every_refusal_is_one_line(tmp_path: Path, args: list[str], code: int, words: list[str]) -> None:
    result = invoke("--triton-repo", str(tmp_path / "repo"), "--model", TINY, "--input-size", str(SIZE), *args)
    one_error(result, code, *words)
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_an_existing_model_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "repo" / "tiny").mkdir(parents=True)
    (tmp_path / "repo" / "tiny" / "keep.txt").write_text("mine")
    result = invoke("--triton-repo", str(tmp_path / "repo"), "--model", TINY, "--name", "tiny")
    one_error(result, 3, "already exists", "never overwrites")
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["tiny"]
    assert (tmp_path / "repo" / "tiny" / "keep.txt").read_text() == "mine"


def test_a_serve_file_without_a_server_answer_is_refused(tmp_path: Path) -> None:
    path = serve_file(tmp_path, {("fp16", "onnxruntime"): [server_step(1, (32, 1.0, 2), 900, False, "fp16")]})
    one_error(invoke("--triton-repo", str(tmp_path / "repo"), "--from", str(path)), 2,
              "has no Server answer: none of its server runs met the latency bound")
    other = tmp_path / "run.json"
    result_io.save(BenchmarkResult(environment={}, settings={}), other)
    one_error(invoke("--triton-repo", str(tmp_path / "repo"), "--from", str(other)), 2, "is not a `clsbench serve`")
    one_error(invoke("--triton-repo", str(tmp_path / "repo")), 2, "--model is required without --from")


# ------------------------------------------------------------------------------------------------ failure, the axis


class ScaledTorchScript:
    """A format registered by this test module: TorchScript of the network times 1.5, which the check must catch."""

    name = "test-scaled"
    platform = "pytorch_libtorch"
    artifact = "model.pt"
    legacy = False
    summary = "test only"
    build_imports = ()

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        return None

    def tensors(self, request: BackendRequest) -> tuple[TensorSpec, TensorSpec]:
        return (TensorSpec("images__0", "TYPE_FP32", (3, request.input_size, request.input_size)),
                TensorSpec("logits__0", "TYPE_FP32", (request.num_classes,)))

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return ("only",)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        scaled = torch.jit.trace(torch.nn.Sequential(model, Scale()), example, check_trace=False)
        torch.jit.save(scaled, str(path / self.artifact))
        return {"method": "trace"}

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        return Loaded(forward=torch.jit.load(str(path / self.artifact)))

    def readme_notes(self, request: BackendRequest) -> list[str]:
        return []


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 1.5


@pytest.fixture
def scaled_format() -> Any:
    FORMATS.register("test-scaled", ScaledTorchScript())
    yield
    FORMATS.unregister("test-scaled")


def test_a_format_registered_here_is_used_and_its_wrong_outputs_write_nothing(tmp_path: Path,
                                                                               scaled_format: None) -> None:
    with pytest.raises(ExportFailedError) as caught:
        export(tmp_path, backend="test-scaled")
    assert "at batch 1: outputs differ from fp32 eager by 0.5 of the logits' scale" in caught.value.message
    assert caught.value.exit_code == 4
    assert list(tmp_path.iterdir()) == []  # no model folder, no staging folder left behind


def test_resolve_refuses_before_building(tmp_path: Path) -> None:
    (tmp_path / "clsbench_testmodels_tiny").mkdir()
    with pytest.raises(ResultFileError, match="already exists"):
        resolve(TritonExportSettings(repo_dir=str(tmp_path), model=TINY))
    plan = resolve(TritonExportSettings(repo_dir=str(tmp_path), model=TINY, mode="fp16+cl+cudagraph", name="x"))
    assert plan.request.mode == "fp16+cl" and "+cudagraph dropped" in plan.notes[0]
    assert dataclasses.replace(plan.request, batch_size=2) == plan.request  # traced at batch 2


# ------------------------------------------------------------------------------------------------ end to end


def test_the_command_builds_in_a_child_process_and_prints_how_to_start(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    repo = tmp_path / "models"
    result = invoke("--triton-repo", str(repo), "--model", TINY, "--input-size", str(SIZE), "--max-batch", "8",
                    "--device", "cpu")
    assert result.exit_code == 0, result.output
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"start Triton on it: tritonserver --model-repository={repo.resolve()}")
    assert "--gpus" not in last
    assert "in a child process" in result.stderr and "wrote " in result.stderr
    model = repo / "clsbench_testmodels_tiny"
    assert (model / "1" / "model.onnx").is_file() and not (model / "1" / "build.log").exists()
    assert last.removeprefix("start Triton on it: ") in (model / "README.txt").read_text(encoding="utf-8")
    assert model_config(model / "config.pbtxt").max_batch_size == 8


# ------------------------------------------------------------------------------------------------ a real tritonserver


def tritonserver_binary() -> Path | None:
    """A tritonserver binary: ``$CLSBENCH_TRITONSERVER``, else the one PyTriton embeds, else None."""
    import importlib.util
    import os

    given = os.environ.get("CLSBENCH_TRITONSERVER")
    if given:
        return Path(given)
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "tritonserver" / "bin" / "tritonserver"
    return binary if binary.is_file() else None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_real_tritonserver_reads_both_configs(onnx_repo: Any, torchscript_repo: Any, tmp_path: Path) -> None:
    """The server parses each config.pbtxt and resolves its platform to a backend; where that backend is installed
    the model must load. PyTriton's server (the one these machines can install) has neither backend, so there the
    test stops at the backend lookup, past the configuration: a field it did not know would fail the parse first."""
    import os
    import shutil
    import subprocess
    import sysconfig

    binary = tritonserver_binary()
    if binary is None:
        pytest.skip("no tritonserver: pip install nvidia-pytriton (needs numpy<2), or set CLSBENCH_TRITONSERVER")
    repo = tmp_path / "models"
    repo.mkdir()
    for outcome in (onnx_repo, torchscript_repo):
        shutil.copytree(outcome.path, repo / outcome.path.name)
    backends = binary.parent.parent / "backends"
    env = {**os.environ, "LD_LIBRARY_PATH": str(sysconfig.get_config_var("LIBDIR"))}  # see ../shared/FACTS.md
    command = [str(binary), f"--model-repository={repo}", f"--backend-directory={backends}",
               f"--http-port={free_port()}", f"--grpc-port={free_port()}", f"--metrics-port={free_port()}",
               "--exit-on-error=true", "--exit-timeout-secs=5"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    log = done.stdout + done.stderr
    assert "Error parsing text-format" not in log, log[-3000:]
    for outcome, backend in ((onnx_repo, "onnxruntime"), (torchscript_repo, "pytorch")):
        name = outcome.path.name
        if (backends / backend).is_dir():
            assert f"successfully loaded '{name}'" in log, log[-3000:]
        else:
            assert f"failed to load '{name}' version 1: Invalid argument: unable to find backend library for " \
                   f"backend '{backend}'" in log, log[-3000:]
