"""Run ``clsbench serve`` before cli.py registers it, and print serve results (for verify_serving.sh).

    python3 benchmarks/serve_driver.py serve --model resnet50 ...   # the serve command, as `clsbench serve`
    python3 benchmarks/serve_driver.py show FILE                     # the serve table of a result file
    python3 benchmarks/serve_driver.py summary FILE...               # one line per mode: the issue's figures
"""

from __future__ import annotations

import sys


def _summary(paths: list[str]) -> None:
    from clsbench.results.io import load
    from clsbench.serving.analysis import analyze_serve

    header = f"{'file':<24} {'mode':<22} {'offline/s':>10} {'ss p90 ms':>9} {'server qps':>10} {'p99 ms':>7} " \
             f"{'srv/off':>7}  best setting"
    print(header)
    for path in paths:
        try:
            analysis = analyze_serve(load(path))
        except Exception as exc:  # noqa: BLE001 - a missing file is a line, not the end of the table
            print(f"{path:<24} unreadable: {exc}")
            continue
        for mode in analysis["modes"]:
            by = {e["scenario"]: e for e in mode["scenarios"]}
            off, ss, srv = by.get("offline") or {}, by.get("single-stream") or {}, by.get("server") or {}
            ratio = (srv["figure"] / off["figure"]) if srv.get("figure") and off.get("figure") else None
            print(f"{path.rsplit('/', 1)[-1]:<24} {mode['mode']:<22} "
                  f"{off.get('figure') or 0:>10,.0f} {ss.get('figure') or 0:>9.3f} {srv.get('figure') or 0:>10,.0f} "
                  f"{(srv.get('best') or {}).get('p99_ms') or 0:>7.2f} "
                  f"{'-' if ratio is None else f'{ratio * 100:.1f}%':>7}  {srv.get('best_setting') or '-'}")


def main() -> None:
    command, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "serve":
        from clsbench.cli import main as cli
        from clsbench.commands import serve_cmds

        if "serve" not in cli.commands:
            serve_cmds.register(cli)
        cli(["serve", *args])
    elif command == "show":
        from clsbench.results.io import load
        from clsbench.serving.analysis import analyze_serve, render_serve

        for path in args:
            print(render_serve(analyze_serve(load(path))))
    elif command == "summary":
        _summary(args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
