"""Mutation testing of the statistics core and the server-QPS search (`make mutation`).

Each module named in ``tools/mutation.toml`` is mutated alone with mutmut 3: the tree's ``src/``, ``tests/`` and
``pyproject.toml`` are copied to ``build/mutation/<name>/`` (so the working tree is never mutated in place, and
other work in it goes on undisturbed), a ``setup.cfg`` there tells mutmut which file to mutate and which test files
exercise it, and mutmut runs each mutant against only the tests of those files that call the mutated function.

The score counts a mutant as killed when a test failed, timed out or crashed on it; the equivalent mutants (listed
with a reason in docs/development.md, section "Mutation testing") are left out of the denominator. Survivors are
printed with their diff; ``cd build/mutation/<name> && ../../../.venv/bin/mutmut show NAME`` shows one again.

Usage: ``python tools/mutation.py [MODULE ...] [--jobs N]`` from the repository root; exit 1 when a module's
score is below the configured goal, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tools" / "mutation.toml"
DOC = ROOT / "docs" / "development.md"
WORK = ROOT / "build" / "mutation"

#: mutmut's verdicts that mean the tests noticed the mutant.
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
#: A mutant name in the doc's table of equivalent mutants, e.g. `clsbench.analysis.stats.x_mean__mutmut_7`.
EQUIVALENT_NAME = re.compile(r"`(clsbench\.[\w.]+__mutmut_\d+)`")


def equivalent_mutants(doc: Path = DOC) -> set[str]:
    """The mutant names the doc's "Mutation testing" section lists as equivalent."""
    text = doc.read_text(encoding="utf-8")
    start = text.find("## Mutation testing")
    return set(EQUIVALENT_NAME.findall(text[start:])) if start >= 0 else set()


def ensure_tool(requirement: str) -> None:
    """Install the pinned mutmut into this interpreter's environment unless it is there already."""
    from importlib import metadata

    wanted = requirement.split("==", 1)[1]
    try:
        if metadata.version("mutmut") == wanted:
            return
    except metadata.PackageNotFoundError:
        pass
    print(f"installing {requirement} (mutation testing only; not part of any extra) ...", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], check=True)


def prepare(name: str, module: dict, head: bool, deselect: list[str]) -> Path:
    """A fresh copy of the tree (the working tree, or the last commit when ``head``) for one module, with mutmut's
    settings for it in ``setup.cfg``."""
    work = WORK / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if head:
        archive = subprocess.run(["git", "archive", "HEAD", "src", "tests", "pyproject.toml"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    else:
        skip = shutil.ignore_patterns("__pycache__", "*.pyc")
        for folder in ("src", "tests"):
            shutil.copytree(ROOT / folder, work / folder, ignore=skip)
        shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    tests = "\n".join(f"    {t}" for t in module["tests"])
    (work / "setup.cfg").write_text(
        "[mutmut]\nsource_paths = src\n"
        f"only_mutate = {module['source']}\n"
        f"pytest_add_cli_args_test_selection =\n{tests}\n"
        # Tests marked slow run whole sweeps in worker processes: minutes per mutant, and no edge they pin.
        "pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -m\n    not slow\n"
        + "".join(f"    --deselect\n    {node}\n" for node in deselect)
        # The tests import torch, whose thread pools can deadlock a plain fork of a process that ran tests.
        + "process_isolation = forkserver\n",
        encoding="utf-8",
    )
    return work


def verdicts(work: Path) -> dict[str, str]:
    """Every mutant of the last run in ``work`` with mutmut's verdict."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work,
                         capture_output=True, text=True, check=True).stdout
    pairs = (line.strip().rsplit(": ", 1) for line in out.splitlines() if ": " in line)
    return {name: verdict for name, verdict in pairs}


def diff_lines(work: Path, mutant: str) -> list[str]:
    """The changed lines of one mutant (``-`` original, ``+`` mutated)."""
    out = subprocess.run([sys.executable, "-m", "mutmut", "show", mutant], cwd=work,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def sample_patterns(digits: str) -> list[str]:
    """mutmut name patterns that pick the mutants whose number ends in one of ``digits`` ("05": 1 in 5)."""
    return [f"*__mutmut_*{d}" for d in digits]


def run_module(name: str, module: dict, *, jobs: int, equivalent: set[str], goal: float, head: bool,
               every: bool, deselect: list[str]) -> bool:
    """Mutate one module, print its score and survivors; whether it reached ``goal``."""
    work = prepare(name, module, head, deselect)
    sample = "" if every else module.get("sample", "")
    picked = f"the mutants whose number ends in {', '.join(sample)}" if sample else "every mutant"
    print(f"{name}: mutating {module['source']} ({picked}) against {', '.join(module['tests'])} ...", flush=True)
    with open(work / "run.log", "w", encoding="utf-8") as log:
        subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs),
                        *sample_patterns(sample)], cwd=work, stdout=log, stderr=subprocess.STDOUT, check=False)
    every_verdict = verdicts(work)
    results = {m: v for m, v in every_verdict.items() if v != "not checked"}
    if not results:
        tail = (work / "run.log").read_text(encoding="utf-8", errors="replace")[-300:].split("\r")[-1].strip()
        print(f"{name}: no mutant was checked ({tail}); the listed tests must pass unmutated: run them in "
              f"{work / 'mutants'}")
        return False
    killed = sum(v in KILLED for v in results.values())
    marked = {m for m in results if m in equivalent and results[m] not in KILLED}
    counted = len(results) - len(marked)
    score = 100.0 * killed / counted if counted else 100.0
    print(f"{name}: {len(results)} mutants, {killed} killed, {len(marked)} equivalent, "
          f"{counted - killed} not killed: {score:.1f}% of non-equivalent mutants killed")
    for mutant, verdict in sorted(results.items()):
        if verdict in KILLED or mutant in marked:
            continue
        print(f"  {verdict}: {mutant}")
        for line in diff_lines(work, mutant):
            print(f"      {line.strip()}")
    ours = (m for m in equivalent if m.startswith(f"{module_name(module)}."))
    for mutant in sorted(ours):
        state = every_verdict.get(mutant, "no such mutant now")
        if state in KILLED or state == "no such mutant now":
            print(f"  listed as equivalent but {state}: {mutant} (update docs/development.md)")
    return score >= goal


def module_name(module: dict) -> str:
    """``src/clsbench/analysis/stats.py`` -> ``clsbench.analysis.stats``."""
    return Path(module["source"]).with_suffix("").relative_to("src").as_posix().replace("/", ".")


def main(argv: list[str] | None = None) -> int:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        print("error: make mutation needs Python 3.11 or later (tomllib)", file=sys.stderr)
        return 2
    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    modules: dict[str, dict] = config["modules"]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"modules to mutate (default: all: {', '.join(modules)})")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants tested at once")
    parser.add_argument("--head", action="store_true",
                        help="mutate the last commit, not the working tree (others' unfinished edits left out)")
    parser.add_argument("--every", action="store_true", help="every mutant, also of modules configured to sample")
    parser.add_argument("--deselect", action="append", default=[], metavar="NODE_ID",
                        help="leave out a test that fails unmutated (pytest's node id; repeatable)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in modules]
    if unknown:
        print(f"error: unknown module {', '.join(unknown)}; choose from {', '.join(modules)}", file=sys.stderr)
        return 2
    missing = [t for m in args.modules or modules for t in modules[m]["tests"] if not (ROOT / t).is_file()]
    if missing:
        print(f"error: {', '.join(missing)} named in {CONFIG.name} do(es) not exist; fix the list", file=sys.stderr)
        return 2
    ensure_tool(config["tool"])
    equivalent = equivalent_mutants()
    reached = [run_module(m, modules[m], jobs=max(args.jobs, 1), equivalent=equivalent, goal=config["goal_pct"],
                          head=args.head, every=args.every, deselect=args.deselect) for m in args.modules or modules]
    return 0 if all(reached) else 1


if __name__ == "__main__":
    sys.exit(main())
