"""The one plain-text table every command prints: columns separated by two spaces, a rule under the header.

Plain text on purpose: what ``show`` prints is what ``show > file`` stores and what golden tests compare, on any
terminal, with no colour codes and no width detection.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

#: What a cut cell ends with.
CUT_MARK = ".."


def fmt_rate(value: float | None) -> str:
    """A rate (img/s, qps) as every table prints it: three significant figures or more, "-" when unknown."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


def fmt_ms(value: float | None) -> str:
    """Milliseconds as every table prints them: four significant figures or more, "-" when unknown."""
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def cut(text: str, width: int) -> str:
    """``text`` shortened to ``width`` characters, ending in :data:`CUT_MARK` when it had to be cut."""
    return text if len(text) <= width else text[: max(0, width - len(CUT_MARK))] + CUT_MARK


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (),
               rule: bool = True, width: int | None = None, min_last: int = 0) -> list[str]:
    """The table as lines.

    Args:
        header: the column names.
        rows: the cells, as strings, one sequence per row (as long as ``header``).
        right: the indices of the right-aligned (numeric) columns.
        rule: draw a line of dashes under the header.
        width: the most characters a line may take; the last column is cut (:func:`cut`) to fit, but never below
            ``min_last`` characters or its header, so a line may still run past ``width``.
        min_last: see ``width``.
    """
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    if width is not None and widths:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess > 0:
            widths[-1] = max(min_last, len(header[-1]), widths[-1] - excess)
    lines = []
    for r in cells:
        padded = [cut(c, w).rjust(w) if i in right else cut(c, w).ljust(w)
                  for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(padded).rstrip())
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
