"""The export backend's build settings: which C++ compiler builds the AOTInductor wrapper, and the Inductor
settings ``CLSBENCH_AOTI_CONFIGS`` lays over every build.

The compiler rule exists because of a crash seen on the H200 image (2026-12-03): ``CXX=/opt/gcc/bin/g++`` there
links ``libstdc++`` statically into every shared object, and every package it built died at load beside the copy
PyTorch loads. The choice is tested with fake compilers (their reported libraries are injected); the real lookups
are checked on this machine's own g++ and process, and on a g++ wrapper that adds ``-static-libstdc++`` as that
image's does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from clsbench.backends import export as export_module
from clsbench.backends.base import FAILED_BUILD, BuildStepError

LOADED = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33"
NEWER = "/opt/gcc/lib64/libstdc++.so.6.0.34"


@pytest.fixture
def fake_compilers(monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """Compilers by name -> the C++ library each reports; this process 'loads' LOADED."""
    libs: dict[str, str | None] = {}
    monkeypatch.setattr(export_module, "runtime_libstdcxx", lambda: LOADED)
    monkeypatch.setattr(export_module, "compiler_libstdcxx", lambda cxx: libs.get(cxx))
    monkeypatch.setattr(export_module.shutil, "which", lambda cxx: f"/bin/{cxx}" if cxx in libs else None)
    monkeypatch.delenv(export_module.CXX_ENV, raising=False)
    monkeypatch.delenv("CXX", raising=False)
    return libs


def test_a_compiler_of_another_cxx_library_gives_way_to_one_of_the_loaded_library(
        fake_compilers: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"/opt/gcc/bin/g++": NEWER, "g++": LOADED})
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    chosen = export_module.choose_compiler()
    assert chosen["compiler"] == "g++"
    assert chosen["compiler_libstdcxx"] == LOADED and chosen["runtime_libstdcxx"] == LOADED
    assert "/opt/gcc/bin/g++" in chosen["compiler_choice"] and NEWER in chosen["compiler_choice"]


def test_the_configured_compiler_is_kept_when_its_library_is_the_loaded_one(
        fake_compilers: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"/opt/gcc/bin/g++": LOADED, "g++": LOADED})
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    assert export_module.choose_compiler()["compiler"] == "/opt/gcc/bin/g++"


def test_without_cxx_g_plus_plus_is_the_default(fake_compilers: dict[str, str | None]) -> None:
    fake_compilers.update({"g++": LOADED})
    chosen = export_module.choose_compiler()
    assert chosen["compiler"] == "g++" and chosen["compiler_choice"] == "g++ (no $CXX)"


def test_with_no_matching_compiler_the_configured_one_stays_and_the_mismatch_is_said(
        fake_compilers: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"/opt/gcc/bin/g++": NEWER, "g++": NEWER})
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    chosen = export_module.choose_compiler()
    assert chosen["compiler"] == "/opt/gcc/bin/g++"
    assert export_module.CXX_ENV in chosen["compiler_choice"] and NEWER in chosen["compiler_choice"]


def test_an_unreadable_library_keeps_the_configured_compiler(
        fake_compilers: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"clang++": None, "g++": LOADED})
    monkeypatch.setenv("CXX", "clang++")
    assert export_module.choose_compiler()["compiler"] == "clang++"


def test_the_forcing_variable_wins_over_everything(
        fake_compilers: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"/opt/gcc/bin/g++": NEWER, "g++": LOADED})
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    monkeypatch.setenv(export_module.CXX_ENV, "/opt/gcc/bin/g++")
    chosen = export_module.choose_compiler()
    assert chosen == {"compiler": "/opt/gcc/bin/g++", "compiler_choice": f"${export_module.CXX_ENV}"}


def test_the_chosen_compiler_is_part_of_the_artifact_key(
        fake_compilers: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"/opt/gcc/bin/g++": NEWER, "g++": LOADED})
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    assert export_module.Export().versions()["cxx"] == "g++"
    monkeypatch.setenv(export_module.CXX_ENV, "/opt/gcc/bin/g++")
    assert export_module.Export().versions()["cxx"] == "/opt/gcc/bin/g++"


def test_a_static_library_compiler_gives_way(fake_compilers: dict[str, str | None],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake_compilers.update({"/opt/gcc/bin/g++": export_module.STATIC_LIBSTDCXX, "g++": LOADED})
    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    chosen = export_module.choose_compiler()
    assert chosen["compiler"] == "g++" and "-static-libstdc++" in chosen["compiler_choice"]


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("readelf") is None, reason="no g++ or readelf")
def test_a_wrapper_that_links_the_library_statically_is_found(tmp_path: Path) -> None:
    """The H200 image's kind of compiler, rebuilt here: g++ with -static-libstdc++ added. Its probe object needs no
    shared libstdc++, so its library is never the loaded one; plain g++'s probe needs it."""
    wrapper = tmp_path / "static-g++"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    assert export_module.needs_shared_libstdcxx(str(wrapper)) is False
    assert export_module.needs_shared_libstdcxx(shutil.which("g++")) is True
    assert export_module.compiler_libstdcxx(str(wrapper)) == export_module.STATIC_LIBSTDCXX
    assert export_module.needs_shared_libstdcxx("/bin/false") is None  # a compiler that fails says nothing


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")
def test_the_real_lookups_agree_on_this_machine() -> None:
    """This machine's g++ links a libstdc++ that exists; this process (torch imported) has one loaded."""
    import torch  # noqa: F401 - PyTorch is what loads libstdc++ in a clsbench worker

    own = export_module.compiler_libstdcxx("g++")
    loaded = export_module.runtime_libstdcxx()
    assert own is not None and Path(own).is_file() and "libstdc++" in own
    if os.path.exists("/proc/self/maps"):
        assert loaded is not None and Path(loaded).is_file() and "libstdc++" in loaded
    assert export_module.compiler_libstdcxx("no-such-compiler-here") is None


def test_configs_from_the_environment_lie_over_the_variants_and_key_the_artifact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(export_module.CONFIGS_ENV, raising=False)
    assert export_module.env_configs() == {}
    plain = export_module.Export().versions()
    monkeypatch.setenv(export_module.CONFIGS_ENV, '{"freezing": true}')
    assert export_module.env_configs() == {"freezing": True}
    keyed = export_module.Export().versions()
    assert keyed[export_module.CONFIGS_ENV] == '{"freezing": true}' and export_module.CONFIGS_ENV not in plain


@pytest.mark.parametrize(("text", "words"), [("{freezing: true", "not valid JSON"), ("[1, 2]", "JSON object")])
def test_bad_configs_fail_the_build_with_one_line(monkeypatch: pytest.MonkeyPatch, text: str, words: str) -> None:
    monkeypatch.setenv(export_module.CONFIGS_ENV, text)
    with pytest.raises(BuildStepError) as err:
        export_module.env_configs()
    assert err.value.reason == FAILED_BUILD and words in err.value.detail and "\n" not in err.value.detail
