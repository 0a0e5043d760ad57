"""A Triton access token stays secret (issue 38, item 21): ``serve --target-header 'NAME: env:VAR'`` and
``'NAME: @FILE'`` keep it off the command line, and no file a serve writes (result, LoadGen logs, HTML report) and no
printed line (serve, show, report, env, errors) holds it. The serve runs against a real Triton server (PyTriton,
tests/triton_fixture.py) that restricts its statistics to that token, so a header that did not reach it shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import triton_fixture
from clsbench.cli import main
from clsbench.errors import InvalidInputError
from clsbench.results import io as result_io
from clsbench.serving.triton_headers import literal_header_names, resolve_headers
from triton_fixture import TritonTestServer

#: The planted secret: the restricted test server's access token, and the string no artifact may hold.
SECRET = triton_fixture.ACCESS_TOKEN
TOKEN_VAR = "CLSBENCH_TEST_TRITON_TOKEN"
GRPC_HEADER = "triton-grpc-protocol-triton-access-token"
QUICK = ["--min-duration-s", "1", "--min-queries", "20", "--samples", "16"]


def _leaks(text: str) -> bool:
    return SECRET in text


# ------------------------------------------------------------------------------------------ reading the value


def test_a_header_value_is_read_from_the_environment_or_a_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(f"  {SECRET}\n", encoding="utf-8")
    headers = resolve_headers([("a", f"env:{TOKEN_VAR}"), ("b", f"@{token_file}"), ("c", "plain")],
                              environ={TOKEN_VAR: SECRET})
    assert headers == {"a": SECRET, "b": SECRET, "c": "plain"}
    assert literal_header_names([("a", f"env:{TOKEN_VAR}"), ("b", f"@{token_file}"), ("c", "plain")]) == ["c"]


@pytest.mark.parametrize(("value", "words"), [
    (f"env:{TOKEN_VAR}", f"the environment variable {TOKEN_VAR} is not set"),
    ("env:", "'env:' names no variable"),
    ("@", "'@' names no file"),
    ("@{missing}", "cannot read"),
    ("@{two_lines}", "holds more than one line"),
    ("@{empty}", "is empty"),
])
def test_a_header_source_that_cannot_be_read_is_one_line_without_the_value(tmp_path: Path, value: str,
                                                                             words: str) -> None:
    (tmp_path / "two").write_text(f"{SECRET}\n{SECRET}\n", encoding="utf-8")
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    value = value.format(missing=tmp_path / "nope", two_lines=tmp_path / "two", empty=tmp_path / "empty")
    with pytest.raises(InvalidInputError) as error:
        resolve_headers({"x-token": value}, environ={})
    text = f"{error.value} {error.value.hint}"
    assert words in text and "x-token" in text and not _leaks(text)


def test_a_literal_token_on_the_command_line_is_warned_about_and_never_echoed(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    out = tmp_path / "never.json"
    result = CliRunner().invoke(main, ["serve", "--target", "triton://127.0.0.1:1/m", "--target-header",
                                       f"{GRPC_HEADER}: {SECRET}", "--scenario", "offline", "-o", str(out)])
    assert "where other users of this machine can read it (ps)" in result.output
    assert f"'{GRPC_HEADER}: env:VAR'" in result.output
    assert result.exit_code == 2 and not out.exists() and not _leaks(result.output)
    bad = CliRunner().invoke(main, ["serve", "--target", "triton://127.0.0.1:1/m", "--target-header", SECRET,
                                    "--scenario", "offline", "-o", str(out)])
    assert bad.exit_code == 2 and "expected 'NAME: VALUE'" in bad.output and not _leaks(bad.output)


# ---------------------------------------------------------------------------------------- a real Triton server


#: The test server whose statistics answer only its access token (module-scoped: started once for this file).


def test_a_token_from_a_file_reaches_the_server_over_http(triton_restricted: TritonTestServer, tmp_path: Path) -> None:
    from clsbench.serving.triton_target import TritonTarget, parse_target

    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n", encoding="utf-8")
    target = TritonTarget(parse_target(triton_restricted.url("http")),
                          headers={"triton-access-token": f"@{token_file}"})
    try:
        facts = target.connect(triton_fixture.INPUT_SIZE, warmup_requests=1)
    finally:
        target.close()
    assert target.facts["statistics"] == "readable"  # the token was sent: the restricted endpoint answered
    assert not _leaks(repr(facts)) and not _leaks(repr(target.facts))


def test_no_artifact_or_printed_line_of_a_serve_holds_the_token(triton_restricted: TritonTestServer, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlperf_loadgen")
    monkeypatch.setenv(TOKEN_VAR, SECRET)
    monkeypatch.setenv("CLSBENCH_DB", str(tmp_path / "index.sqlite3"))
    runner = CliRunner()
    path = tmp_path / "out" / "serve.json"
    path.parent.mkdir()
    served = runner.invoke(main, ["serve", "--target", triton_restricted.url("grpc"), "--target-header",
                                  f"{GRPC_HEADER}: env:{TOKEN_VAR}", "--scenario", "single-stream", *QUICK, "-o",
                                  str(path)])
    assert served.exit_code == 0, served.output
    facts = result_io.load(path).settings["serve"]["target"]
    assert facts["statistics"] == "readable"  # the token reached the server
    assert facts["headers"] == [GRPC_HEADER]  # its name is recorded, its value is not
    printed = [served.output]
    for args in (["show", str(path)], ["report", str(path), "-o", str(path.parent / "report.html")],
                 ["env", "--device", "cpu"], ["history"]):
        done = runner.invoke(main, args)
        assert done.exit_code == 0, (args, done.output)
        printed.append(done.output)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert path in files and path.parent / "report.html" in files and len(files) > 3  # LoadGen's logs too
    for file in files:
        assert not _leaks(file.read_bytes().decode("utf-8", errors="replace")), file
    for text in printed:
        assert not _leaks(text)
