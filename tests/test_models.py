"""The model registry: names, suggestions, seeding, custom builders, and that every network builds and runs.

Everything here runs on the CPU. Full-size networks are built on the meta device (shapes only, no memory, no
arithmetic) so that all of torchvision's classification zoo is covered in seconds; the seed suite is built
for real and trained for one step on a tiny input.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from clsbench.errors import InvalidInputError, UnknownModelError
from clsbench.models import (
    ModelSpec,
    create_model,
    get_model_spec,
    list_models,
    register_model,
)
from clsbench.models.sources import custom_source

SEED_SUITE = ["resnet50", "resnet101", "mobilenet_v3_large", "efficientnet_b0", "timm/vit_tiny_patch16_224"]
TINY_SIDE = 64  # small enough to be fast, large enough for every seed-suite network's downsampling
NUM_CLASSES = 10
TORCHVISION_NAMES = list_models(source="torchvision")


def _needs_timm(name: str) -> None:
    if name.startswith("timm/"):
        pytest.importorskip("timm")


@pytest.fixture
def empty_registry(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fresh registry of custom names, so registrations do not leak between tests."""
    registry: dict = {}
    monkeypatch.setattr(custom_source, "_REGISTERED", registry)
    return registry


@pytest.fixture
def tiny_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module of small builders, good and bad; returns its name."""
    name = "clsbench_test_tinynets"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent('''
        import torch

        def build(num_classes=1000):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(num_classes))
        build.input_size = 32

        def sized(num_classes=1000, input_size=224):
            features = 3 * input_size * input_size
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(features, num_classes))

        def fixed_head():
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(1000))

        def not_a_module(num_classes=1000):
            return 3

        class Net(torch.nn.Module):
            def __init__(self, num_classes=1000):
                super().__init__()
                self.fc = torch.nn.Linear(4, num_classes)

        VALUE = 3
    '''))
    (tmp_path / "clsbench_test_broken.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in (name, "clsbench_test_broken"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    return name


@pytest.fixture
def regnet_on_meta(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let RegNets build on the meta device: they derive their widths from tensors and read them back with
    ``.tolist()``, which meta tensors cannot do, so that one computation is sent to the CPU."""
    from torchvision.models import regnet

    from_init_params = regnet.BlockParams.from_init_params.__func__

    def on_cpu(cls, *args, **kwargs):
        with torch.device("cpu"):
            return from_init_params(cls, *args, **kwargs)

    monkeypatch.setattr(regnet.BlockParams, "from_init_params", classmethod(on_cpu))


# --- names -------------------------------------------------------------------------------------------------


def test_list_models_filters_with_wildcards_and_sorts() -> None:
    assert list_models("resnet*", source="torchvision") == ["resnet101", "resnet152", "resnet18", "resnet34",
                                                             "resnet50"]
    assert list_models("RESNET5?") == ["resnet50"]  # case-insensitive; timm's are under timm/, not matched
    everything = list_models()
    assert everything == sorted(everything)
    assert "resnet50" in everything and "inception_v3" in everything
    assert list_models("no_such_model_*") == []


def test_list_models_excludes_non_classification_torchvision_models() -> None:
    names = set(TORCHVISION_NAMES)
    assert len(names) >= 70
    assert not names & {"fasterrcnn_resnet50_fpn", "deeplabv3_resnet50", "r3d_18", "raft_large",
                        "quantized_resnet50"}


def test_list_models_rejects_unknown_source() -> None:
    with pytest.raises(InvalidInputError, match="unknown model source 'hub'"):
        list_models(source="hub")


def test_list_models_lists_timm_names_with_prefix() -> None:
    pytest.importorskip("timm")
    timm_names = list_models("timm/vit_tiny_*", source="timm")
    assert "timm/vit_tiny_patch16_224" in timm_names
    assert all(name.startswith("timm/") for name in list_models(source="timm"))


def test_without_timm_nothing_is_listed_and_timm_names_say_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # makes `import timm` fail as if it were not installed
    assert list_models(source="timm") == []
    assert not [name for name in list_models() if name.startswith("timm/")]
    with pytest.raises(InvalidInputError) as info:
        get_model_spec("timm/vit_tiny_patch16_224")
    assert info.value.message == "timm is not installed"
    assert info.value.hint == "pip install 'clsbench[timm]'"


def test_unknown_name_suggests_the_closest_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model_spec("resnet5")
    assert info.value.suggestions[0] == "resnet50"
    assert 1 <= len(info.value.suggestions) <= 5
    assert "resnet50" in str(info.value)


def test_unknown_name_in_other_case_suggests_the_real_name_first() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model_spec("ResNet50")
    assert info.value.suggestions[0] == "resnet50"


def test_unknown_name_with_nothing_close_suggests_nothing() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model_spec("qqqqqqqqqqqqqqqqqqqq")
    assert info.value.suggestions == []


def test_bare_timm_name_suggests_the_prefixed_name() -> None:
    pytest.importorskip("timm")
    with pytest.raises(UnknownModelError) as info:
        get_model_spec("vit_tiny_patch16_224")
    assert info.value.suggestions[0] == "timm/vit_tiny_patch16_224"


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name_is_invalid(name: str) -> None:
    with pytest.raises(InvalidInputError, match="invalid model name"):
        get_model_spec(name)


def test_importing_the_package_imports_no_model_library() -> None:
    code = "import sys, clsbench.models; print(sorted({'torch', 'torchvision', 'timm'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- specs and input sizes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "size"), [("resnet50", 224), ("inception_v3", 299), ("efficientnet_b3", 300), ("vit_h_14", 518)]
)
def test_torchvision_default_input_size_comes_from_its_weights(name: str, size: int) -> None:
    spec = get_model_spec(name)
    assert (spec.name, spec.source, spec.input_size) == (name, "torchvision", size)


@pytest.mark.parametrize(("name", "size"), [("timm/vit_tiny_patch16_224", 224), ("timm/inception_v3", 299),
                                            ("timm/resnet50.a1_in1k", 224)])
def test_timm_spec_comes_from_its_pretrained_cfg(name: str, size: int) -> None:
    pytest.importorskip("timm")
    spec = get_model_spec(name)
    assert (spec.name, spec.source, spec.input_size) == (name, "timm", size)


@pytest.mark.parametrize("name", ["timm/no_such_net", "timm/resnet50.no_such_tag", "timm/"])
def test_unknown_timm_name_is_unknown(name: str) -> None:
    pytest.importorskip("timm")
    with pytest.raises(UnknownModelError):
        get_model_spec(name)


def test_spec_is_immutable() -> None:
    spec = get_model_spec("resnet18")
    with pytest.raises(AttributeError):
        spec.input_size = 32  # type: ignore[misc]


@pytest.mark.parametrize("kwargs", [{"seed": -1}, {"num_classes": 0}, {"input_size": 0}, {"seed": True}])
def test_build_rejects_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InvalidInputError):
        get_model_spec("resnet18").build(**kwargs)


def test_spec_without_factory_cannot_build() -> None:
    with pytest.raises(InvalidInputError, match="no builder"):
        ModelSpec("fake", "custom", 32).build()


# --- seeding -----------------------------------------------------------------------------------------------


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [tensor.detach().clone() for tensor in model.state_dict().values()]


def test_same_seed_gives_identical_weights_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    first = _weights(create_model("resnet18", seed=7, num_classes=NUM_CLASSES))
    again = _weights(create_model("resnet18", seed=7, num_classes=NUM_CLASSES))
    other = _weights(create_model("resnet18", seed=8, num_classes=NUM_CLASSES))
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


# --- custom builders ---------------------------------------------------------------------------------------


def test_module_function_builds_with_num_classes_and_its_input_size(tiny_module: str) -> None:
    spec = get_model_spec(f"{tiny_module}:build")
    assert (spec.source, spec.input_size) == ("custom", 32)
    model = spec.build(num_classes=7)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_module_function_gets_input_size_when_it_takes_it(tiny_module: str) -> None:
    spec = get_model_spec(f"{tiny_module}:sized")
    assert spec.input_size == 224  # no input_size attribute: the default
    model = spec.build(num_classes=5, input_size=16)
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 5)


def test_module_class_is_a_builder_too(tiny_module: str) -> None:
    assert create_model(f"{tiny_module}:Net", num_classes=3).fc.out_features == 3


def test_a_builder_without_num_classes_is_refused(tiny_module: str) -> None:
    """Its head need not have the classes the labels are drawn from: the contract asks for the parameter."""
    for classes in (1000, NUM_CLASSES):
        with pytest.raises(InvalidInputError, match="takes no num_classes"):
            create_model(f"{tiny_module}:fixed_head", num_classes=classes)


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        (":missing", "has no attribute 'missing'"),
        (":VALUE", "not a callable"),
        (":", "malformed model name"),
        (":not a name", "malformed model name"),
    ],
)
def test_module_function_errors_name_the_problem(tiny_module: str, suffix: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        get_model_spec(tiny_module + suffix)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("clsbench_no_such_module_xyz:build", "cannot import module 'clsbench_no_such_module_xyz'"),
        ("clsbench_test_broken:build", "cannot import module 'clsbench_test_broken'.*RuntimeError: boom"),
    ],
)
def test_module_that_does_not_import_is_invalid_input(tiny_module: str, name: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        get_model_spec(name)
    assert "\n" not in str(info.value)


def test_builder_returning_something_else_is_invalid_input(tiny_module: str) -> None:
    spec = get_model_spec(f"{tiny_module}:not_a_module")
    with pytest.raises(InvalidInputError, match="returned a int, not a torch.nn.Module"):
        spec.build()


def test_register_model_makes_a_listed_custom_model(empty_registry: dict) -> None:
    @register_model("clsbench_tiny_mlp", input_size=8)
    def tiny_mlp(num_classes: int = 1000, **kwargs: object) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, num_classes))

    assert list_models(source="custom") == ["clsbench_tiny_mlp"]
    assert list_models("clsbench_tiny*") == ["clsbench_tiny_mlp"]
    spec = get_model_spec("clsbench_tiny_mlp")
    assert (spec.source, spec.input_size) == ("custom", 8)
    assert create_model("clsbench_tiny_mlp", num_classes=4)(torch.randn(2, 3, 8, 8)).shape == (2, 4)

    register_model("clsbench_tiny_mlp", input_size=8)(tiny_mlp)  # the same function again: allowed
    with pytest.raises(InvalidInputError, match="already a custom model"):
        register_model("clsbench_tiny_mlp")(lambda num_classes=1000: torch.nn.Identity())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("resnet50", "already a torchvision model"),
        ("pkg.mod:fn", "reserved"),
        ("timm/x", "reserved"),
        ("", "invalid model name"),
        ("two words", "invalid model name"),
    ],
)
def test_register_model_rejects_names_it_cannot_own(empty_registry: dict, name: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        register_model(name)(lambda num_classes=1000: torch.nn.Identity())
    assert empty_registry == {}


# --- every network builds and runs -------------------------------------------------------------------------


@pytest.mark.parametrize("name", SEED_SUITE)
def test_seed_suite_trains_one_step_on_a_tiny_input(name: str) -> None:
    _needs_timm(name)
    model = create_model(name, num_classes=NUM_CLASSES, input_size=TINY_SIDE).train()
    images = torch.randn(2, 3, TINY_SIDE, TINY_SIDE)
    logits = model(images)
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, NUM_CLASSES)
    assert torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1])).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("name", TORCHVISION_NAMES)
@pytest.mark.usefixtures("regnet_on_meta")
def test_every_torchvision_model_builds_and_returns_plain_logits(name: str) -> None:
    spec = get_model_spec(name)
    with torch.device("meta"):
        model = spec.build(num_classes=NUM_CLASSES)
        assert isinstance(model, torch.nn.Module)
        # Training mode is where googlenet and inception_v3 would return auxiliary outputs too.
        logits = model.train()(torch.empty(2, 3, spec.input_size, spec.input_size))
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, NUM_CLASSES)


@pytest.mark.parametrize("name", ["googlenet", "inception_v3"])
def test_auxiliary_heads_are_off_in_eval_mode_too(name: str) -> None:
    spec = get_model_spec(name)
    with torch.device("meta"):
        model = spec.build(num_classes=NUM_CLASSES).eval()
        logits = model(torch.empty(2, 3, spec.input_size, spec.input_size))
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, NUM_CLASSES)


@pytest.mark.parametrize(("name", "side"), [("vit_b_16", 64), ("maxvit_t", 448), ("vit_h_14", 518)])
def test_fixed_size_torchvision_models_are_built_for_the_requested_size(name: str, side: int) -> None:
    with torch.device("meta"):
        model = create_model(name, num_classes=NUM_CLASSES, input_size=side).train()
        logits = model(torch.empty(2, 3, side, side))
    assert logits.shape == (2, NUM_CLASSES)


@pytest.mark.parametrize(("name", "side"), [("vit_b_16", 65), ("maxvit_t", 64)])
def test_fixed_size_torchvision_models_refuse_a_size_they_cannot_take(name: str, side: int) -> None:
    with torch.device("meta"), pytest.raises(InvalidInputError, match=f"for input size {side}:"):
        create_model(name, input_size=side)


@pytest.mark.parametrize(("name", "side"), [("timm/resnet18", 64), ("timm/vit_tiny_patch16_224", 32),
                                            ("timm/inception_v3", 299)])
def test_timm_models_run_at_the_requested_size(name: str, side: int) -> None:
    pytest.importorskip("timm")
    with torch.device("meta"):
        model = create_model(name, num_classes=NUM_CLASSES, input_size=side).train()
        logits = model(torch.empty(2, 3, side, side))
    assert logits.shape == (2, NUM_CLASSES)
