"""Target 7: cost against pages parsed and against entries rendered, as one PNG."""

from __future__ import annotations

from pathlib import Path

from .harness import Context, Row
from .micro import parse_scaling, render_scaling


def plot_section(ctx: Context, out: Path) -> list[Row]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    per_page = ctx.data.get("parse_per_page") or parse_scaling(ctx)
    per_entry = ctx.data.get("render_per_entry") or render_scaling(ctx)
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    pages = sorted(per_page)
    left.plot(pages, [n * per_page[n] * 1e3 for n in pages], "o-", label="parse_listing")
    left.set(xscale="log", yscale="log", xlabel="pages in one list (30 topics each)", ylabel="total ms",
             title="Parsing: cost against pages read")
    for fmt, series in per_entry.items():
        counts = sorted(series)
        right.plot(counts, [n * series[n] * 1e3 for n in counts], "o-", label=fmt)
    right.set(xscale="log", yscale="log", xlabel="entries", ylabel="total ms",
              title="Rendering: cost against entries rendered")
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle("feedbridge: straight lines of slope 1 on log-log axes = linear cost")
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    pyplot.close(figure)
    ctx.notes.append(f"7: plot `{out.name}` (log-log; slope 1 means cost linear in pages / entries).")
    return []
