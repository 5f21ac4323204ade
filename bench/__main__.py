"""`python -m bench [--quick] [--only SECTION ...] [--out FILE]`: run, print the table, write RESULTS.md."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from .cpu import cpu_section
from .harness import Context, Row, report, table
from .hostile_memory import hostile_section
from .micro import parser_section, render_section
from .plot import plot_section
from .posts import posts_section
from .serving import cold_section, hit_section, memory_section, upstream_section
from .slowforum import slow_forum_section

HERE = Path(__file__).resolve().parent
SECTIONS: dict[str, Callable[[Context], list[Row]]] = {
    "hit": hit_section,
    "cold": cold_section,
    "parser": parser_section,
    "render": render_section,
    "upstream": upstream_section,
    "memory": memory_section,
    "slowforum": slow_forum_section,
    "hostile": hostile_section,
    "posts": posts_section,
    "cpu": cpu_section,
    "plot": lambda ctx: plot_section(ctx, ctx.data["plot_path"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny loops: checks the harness, proves nothing")
    parser.add_argument("--only", action="append", choices=list(SECTIONS), help="run only this section (repeatable)")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md", help="where to write the report")
    parser.add_argument("--plot", type=Path, default=HERE / "scaling.png", help="where to write the plot")
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="feedbridge-bench-") as workdir:
        ctx = Context(quick=args.quick, workdir=Path(workdir), data={"plot_path": args.plot})
        for name in args.only or list(SECTIONS):
            print(f"== {name}", file=sys.stderr, flush=True)
            section_rows = SECTIONS[name](ctx)
            print(table(section_rows) if section_rows else "(no rows)", file=sys.stderr, flush=True)
            rows += section_rows
    rows.sort(key=lambda row: row.section)
    print(table(rows))
    args.out.write_text(report(rows, ctx, started, HERE / "fixes.md"))
    print(f"\nwritten to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
