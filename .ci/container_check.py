"""CI: checks, on the host, what the container test brought back from the CPU image.

Standard library only: it runs before the project's venv exists (`.ci/run` builds the image before `make test`).

Two files come back through the mounted results folder:

* ``facts.json``: ``clsbench.system.container.container_facts()`` as the process inside the container saw it;
* ``quick.json``: the result file of ``clsbench run --suite quick`` run inside the container.

Both must say "in a container" (the expected runtime) with the image's labels (this commit, the CPU target, the
base the build was given) and the image name the run was started with. The result file carries the container
facts under ``environment.container`` only once they are wired into the environment capture; until then their
absence is reported in a NOTE line and does not fail the check, and from then on they are checked like facts.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def get(node: Any, dotted: str) -> Any:
    """The value at a dotted path, or None when any key on the way is missing."""
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def check_facts(facts: Any, where: str, expected: dict[str, str]) -> list[str]:
    """What is wrong with container facts read in the container (empty when nothing)."""
    if not isinstance(facts, dict):
        return [f"{where}: no container facts (got {type(facts).__name__})"]
    wanted = {
        "in_container": True,
        "runtime": expected["runtime"],
        "image.name": expected["image"],
        "image.labels.clsbench_commit": expected["commit"],
        "image.labels.clsbench_version": expected["version"],
        "image.labels.target": "cpu",
        "image.labels.base_image": expected["base"],
        "image.base": expected["base"],
    }
    return [f"{where}: {path} is {get(facts, path)!r}, expected {value!r}"
            for path, value in wanted.items() if get(facts, path) != value]


def check_result(result: Any, expected: dict[str, str]) -> tuple[list[str], list[str]]:
    """(problems, notes) for the result file of the run inside the container."""
    problems: list[str] = []
    notes: list[str] = []
    measurements = get(result, "measurements")
    if not isinstance(measurements, list) or not measurements:
        problems.append("result: no measurements")
    else:
        failed = [f"{m.get('model')} {m.get('workload')} {m.get('status')}" for m in measurements
                  if m.get("status") != "ok"]
        if failed:
            problems.append(f"result: {len(failed)} of {len(measurements)} measurements not ok: {'; '.join(failed)}")
    commit = get(result, "environment.clsbench.git_commit")
    if commit != expected["commit"]:
        problems.append(f"result: environment.clsbench.git_commit is {commit!r}, expected {expected['commit']!r} "
                        "(the image sets CLSBENCH_GIT_COMMIT from its build argument)")
    container = get(result, "environment.container")
    if container is None:
        notes.append("NOTE: the result file has no environment.container: the container facts are not wired into "
                     "the environment capture yet, so only facts.json shows 'in a container'")
    else:
        problems.extend(check_facts(container, "result environment.container", expected))
    return problems, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="quick.json written inside the container")
    parser.add_argument("facts", type=Path, help="facts.json: container_facts() printed inside the container")
    parser.add_argument("--commit", required=True, help="the commit the image was built from")
    parser.add_argument("--version", required=True, help="the clsbench version the image carries")
    parser.add_argument("--image", required=True, help="the image name the container was started with")
    parser.add_argument("--base", required=True, help="the base image the build was given")
    parser.add_argument("--runtime", default="podman", help="the runtime expected to be detected")
    args = parser.parse_args(argv)
    expected = {"commit": args.commit, "version": args.version, "image": args.image, "base": args.base,
                "runtime": args.runtime}
    problems: list[str] = []
    notes: list[str] = []
    loaded = {}
    for name, path in (("result", args.result), ("facts", args.facts)):
        try:
            loaded[name] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{name}: cannot read {path}: {exc}")
    if "facts" in loaded:
        problems.extend(check_facts(loaded["facts"], "facts.json", expected))
    if "result" in loaded:
        result_problems, notes = check_result(loaded["result"], expected)
        problems.extend(result_problems)
    for line in notes:
        print(line)
    for line in problems:
        print(f"FAIL {line}")
    if problems:
        print(f"container check: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
        return 1
    runtime = get(loaded.get("facts"), "runtime")
    print(f"container check: ok (in a {runtime} container, image {args.image}, labels of commit {args.commit[:12]}, "
          f"{len(get(loaded.get('result'), 'measurements') or [])} measurements ok)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
