"""The benchmark harness on a tiny setting, so it does not rot (the benchmarks themselves are not tests)."""

import re
from pathlib import Path

import pytest

from bench import rsshub
from bench.__main__ import main
from bench.cpu import windows_rows
from bench.harness import Context
from bench.serving import COLD_CPU_TARGET, HIT_RPS_TARGET


def test_quick_parser_and_render_sections_write_a_numeric_table(tmp_path: Path, capsys) -> None:
    out = tmp_path / "RESULTS.md"
    assert main(["--quick", "--only", "parser", "--only", "render", "--out", str(out),
                 "--plot", str(tmp_path / "p.png")]) == 0
    report = out.read_text(encoding="utf-8")
    assert report.startswith("# feedbridge benchmarks") and "--quick" in report
    rows = [line.split("|")[1:-1] for line in report.splitlines() if re.match(r"\| [34] \|", line)]
    names = [cells[1].strip() for cells in rows]
    assert sum("markdown-it" in cells[5] for cells in rows) == 2
    assert any(name.startswith("parse 33 pages") for name in names)
    assert any(name.startswith("count the bytes a parsed real page holds") for name in names)
    assert {name.split(",")[0] for name in names if name.startswith("render")} == {
        "render atom", "render rss", "render json"}
    for cells in rows:
        assert re.fullmatch(r" [\d.,]+ (ms|µs) ", cells[2]), cells
        assert re.fullmatch(r" [\d.,]+ (ms|µs) ", cells[3]), cells
        assert float(cells[4].strip().rstrip("×")) > 0, cells
        assert cells[6].strip() in ("yes", "**MISSED**"), cells
    assert "| 3 |" in capsys.readouterr().out



def test_quick_windows_rows_measure_both_storages_with_and_without_idle_windows(tmp_path: Path) -> None:
    """Row 9b: the in-process storage `Windows` uses (with its target) and `limits`' own (for reference)."""
    context = Context(quick=True, workdir=tmp_path)
    ours, theirs = windows_rows(context)
    assert (ours.section, theirs.section) == ("9b", "9b") and ours.met is not None and theirs.met is None
    assert "in-process storage" in ours.name and "MemoryStorage" in theirs.name
    for row in (ours, theirs):
        assert row.ours > 0 and row.baseline and row.ratio == pytest.approx(row.ours / row.baseline)
    assert context.notes and context.notes[0].startswith("9b:")

@pytest.mark.timeout(360)  # five real servers, RSSHub and wrk: about 90 s on an idle 2-core machine
def test_quick_serving_sections_run_real_servers_and_write_every_row(tmp_path: Path) -> None:
    """gunicorn, the fake forum, RSS-Bridge under php, RSSHub under node, Redis and wrk, each for a second or
    so: the harness that the numbers in bench/RESULTS.md come from must keep working, not only the in-process
    parts. RSSHub is installed here as bench/run installs it (a no-op once the pinned version is there)."""
    rsshub.ensure_installed()
    out = tmp_path / "RESULTS.md"
    assert main(["--quick", "--only", "hit", "--only", "cold", "--only", "upstream", "--only", "memory",
                 "--out", str(out), "--plot", str(tmp_path / "p.png")]) == 0
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.read_text(encoding="utf-8").splitlines()
            if re.match(r"\| [1256] \|", line)]
    by_section: dict[str, list[list[str]]] = {}
    for cells in rows:
        by_section.setdefault(cells[0], []).append(cells)
    assert {s: len(r) for s, r in by_section.items()} == {"1": 6, "2": 9, "5": 3, "6": 1}
    for cells in rows:
        assert re.fullmatch(r"[\d.,]+ (ms|µs|req/s|fetches|MiB)", cells[2]), cells
        assert cells[6] in ("yes", "**MISSED**", "-"), cells
    hit = {cells[1]: cells for cells in by_section["1"]}
    limit = hit["cached Atom hit vs the limit (bare WSGI callable, same gunicorn, the hit's bytes and headers), "
                "requests/s"]
    assert re.fullmatch(r"[\d.,]+ req/s", limit[3]) and limit[5] == f"≥ {HIT_RPS_TARGET:g}×", limit
    assert "X-Feedbridge-Cache" in out.read_text(encoding="utf-8")  # the limit answers with the hit's own headers
    cpu = next(cells for name, cells in hit.items() if name.startswith("server CPU per cached hit"))
    assert re.fullmatch(r"[\d.,]+ µs", cpu[3]) and float(cpu[4].rstrip("×")) > 0, cpu  # both servers measured
    names = [cells[1] for cells in by_section["2"]]
    assert any(name.startswith("library floor") for name in names)
    own = next(cells for cells in by_section["2"] if cells[1].startswith("server CPU per cold request vs the library"))
    assert re.fullmatch(r"[\d.,]+ ms", own[3]) and own[5] == f"≤ {COLD_CPU_TARGET:g}×", own  # both measured
    peers = {cells[1]: cells for cells in by_section["2"] if "RSSHub" in cells[1]}
    assert len(peers) == 4, names  # cold paced and back-to-back, cached requests/s and p99
    for cells in peers.values():  # RSSHub's own figure, measured in this run, beside ours
        assert re.fullmatch(r"[\d.,]+ (ms|req/s)", cells[3]) and float(cells[4].rstrip("×")) > 0, cells
    ours = [cells for cells in by_section["5"] if "RSSHub" not in cells[1]]
    assert len(ours) == 2 and all(cells[6] == "yes" for cells in ours), ours  # single-flight holds even here
    (versus,) = [cells for cells in by_section["5"] if "RSSHub" in cells[1]]
    # RSSHub marks the path as being fetched and holds the rest back (its check is not atomic, so not "== 1").
    assert 1 <= int(versus[3].split()[0]) < 64, versus
    notes = out.read_text(encoding="utf-8")
    assert "RSSHub 1.0.0-master." in notes and "5 (RSSHub):" in notes


@pytest.mark.timeout(360)
def test_quick_slow_forum_section_measures_hits_while_cold_requests_wait(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    assert main(["--quick", "--only", "slowforum", "--out", str(out), "--plot", str(tmp_path / "p.png")]) == 0
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.read_text(encoding="utf-8").splitlines()
            if re.match(r"\| 7 \|", line)]
    assert len(rows) == 2 and all("cached-hit p99" in cells[1] for cells in rows)
    for cells in rows:
        assert re.fullmatch(r"[\d.,]+ ms", cells[2]) and re.fullmatch(r"[\d.,]+ ms", cells[3]), cells
        assert cells[5] == "≤ 2×" and cells[6] in ("yes", "**MISSED**"), cells
