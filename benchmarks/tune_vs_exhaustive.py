"""The default tune's winner against the exhaustive tune's best, from two result files (issue 18).

    python3 benchmarks/tune_vs_exhaustive.py DEFAULT.json EXHAUSTIVE.json [--goal-pct 3]

Prints each winner (mode, batch, backend, data), its figure, spread and whether the full repeats confirmed it, the
gap of the default winner to the exhaustive best in % and whether it is within the goal (3%, the issue's), the
default search's own figure for the exhaustive winner when it differs, and both search times
(:mod:`clsbench.procedures.tune.compare`). Files of different models, workloads, devices or limits are refused in
one line (exit 2); an unreadable file too (its exit code).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from clsbench.errors import ClsbenchError
    from clsbench.procedures.tune.compare import GOAL_PCT, compare_tunes, render_tune_comparison
    from clsbench.results.io import load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("default", metavar="DEFAULT.json", help="a default clsbench tune result file")
    parser.add_argument("exhaustive", metavar="EXHAUSTIVE.json", help="a clsbench tune --exhaustive result file")
    parser.add_argument("--goal-pct", type=float, default=GOAL_PCT,
                        help=f"the gap that still counts as within the goal (default {GOAL_PCT:g}, the issue's)")
    args = parser.parse_args(argv)
    try:
        comparison = compare_tunes(load(args.default), load(args.exhaustive), goal_pct=args.goal_pct,
                                   names=(args.default, args.exhaustive))
    except ClsbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)  # one line: the message and its hint
        return exc.exit_code
    print(render_tune_comparison(comparison), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
