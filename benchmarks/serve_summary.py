"""One line per serve result file and mode: the issue's figures (for verify_serving.sh's closing table).

    python3 benchmarks/serve_summary.py FILE...

offline samples/s, single-stream p90 (ms), server QPS at the bound with its p99, server / offline, the best setting.
A file that cannot be read is one line saying why, not the end of the table.
"""

from __future__ import annotations

import sys


def main(paths: list[str]) -> None:
    from clsbench.results.io import load
    from clsbench.serving.analysis import analyze_serve

    print(f"{'file':<16} {'mode':<18} {'offline/s':>10} {'ss p90 ms':>9} {'server qps':>10} {'p99 ms':>7} "
          f"{'srv/off':>7}  best server setting")
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        try:
            analysis = analyze_serve(load(path))
        except Exception as exc:  # noqa: BLE001 - a missing or damaged file is a line, not the end of the table
            print(f"{name:<16} unreadable: {exc}")
            continue
        for mode in analysis["modes"]:
            by = {e["scenario"]: e for e in mode["scenarios"]}
            off, ss, srv = by.get("offline") or {}, by.get("single-stream") or {}, by.get("server") or {}
            ratio = (srv["figure"] / off["figure"]) if srv.get("figure") and off.get("figure") else None
            print(f"{name:<16} {mode['mode']:<18} {off.get('figure') or 0:>10,.0f} {ss.get('figure') or 0:>9.3f} "
                  f"{srv.get('figure') or 0:>10,.0f} {(srv.get('best') or {}).get('p99_ms') or 0:>7.2f} "
                  f"{'-' if ratio is None else f'{ratio * 100:.1f}%':>7}  {srv.get('best_setting') or '-'}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
