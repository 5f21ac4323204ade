"""The tree's structure and its documentation, checked rather than claimed.

- Imports run one way along the data path: lower stages never import higher ones, and the store is a
  leaf that knows nothing of parsing, rendering or the web.
- Every environment variable the code reads is in the README's configuration table, and every variable
  that table names is read somewhere (settings are found by recording what the code asks of the
  environment, not by searching its text).
- The README's module map names every module of the package, and nothing that is not there.
"""

from __future__ import annotations

import ast
import os
import re
import runpy
from collections.abc import Iterator
from pathlib import Path

import pytest

from feedbridge.config import Settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "feedbridge"

# Each unit of the tree and the units it may import. Models and errors are the vocabulary every stage
# shares; config is read by the stages that need limits. Above the stages, `feeds` orchestrates them, and
# the web layer, the static site and the CLI are the three ways in.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "models": set(),
    "__init__": set(),
    "metrics": set(),  # counted where outcomes are decided (the fetcher, the gate, the policy, the web layer)
    "config": {"errors"},
    "store": {"models", "errors"},
    "upstream": {"config", "errors", "models", "__init__", "metrics"},
    "discourse": {"models", "errors"},
    "render": {"models", "errors", "__init__"},
    "feeds": {"config", "errors", "models", "store", "upstream", "discourse", "render", "metrics"},
    "web": {"__init__", "config", "errors", "models", "store", "upstream", "discourse", "render", "feeds", "demo",
            "metrics"},
    "staticsite": {"__init__", "config", "errors", "models", "store", "upstream", "discourse", "render", "feeds"},
    "demo": {"__init__", "config", "web"},
    "cli": {"__init__", "config", "errors", "models", "store", "upstream", "discourse", "render", "feeds",
            "staticsite", "web", "demo"},
    "__main__": {"cli"},
}


def unit_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def imported_units(path: Path, package_root: Path = PACKAGE) -> Iterator[tuple[int, str]]:
    """(line, unit) for every feedbridge import in a module, also those inside functions; `package_root`
    is where the `feedbridge` package of `path` lies."""
    package = ".".join(("feedbridge", *path.relative_to(package_root).parent.parts))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [module] if node.module or node.level else []
            if module == "feedbridge":  # `from feedbridge import x`: x is a unit (or a name in __init__)
                names = [f"feedbridge.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "feedbridge":
                target = parts[1] if len(parts) > 1 else "__init__"
                if not (PACKAGE / target).is_dir() and not (PACKAGE / f"{target}.py").exists():
                    target = "__init__"  # a name defined in feedbridge/__init__.py (__version__, ...)
                yield node.lineno, target


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def test_every_unit_is_placed() -> None:
    assert {unit_of(p) for p in modules()} <= set(ALLOWED), "a new unit needs its place in ALLOWED"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_down_the_data_path(path: Path) -> None:
    unit = unit_of(path)
    wrong = [(line, target) for line, target in imported_units(path)
             if target != unit and target not in ALLOWED[unit]]
    assert not wrong, f"{path.relative_to(ROOT)} ({unit}) imports {wrong}; allowed: {sorted(ALLOWED[unit])}"


def test_the_checker_sees_a_wrong_import(tmp_path: Path) -> None:
    """The rule above is only as good as its parser: an upward import must be found."""
    # Outside the real package, so that a run of the layout test going on at the same time never sees it.
    probe = tmp_path / "feedbridge" / "store" / "_probe_for_test.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from feedbridge.render.documents import FeedMeta\n    from ..feeds import spec\n")
    assert [t for _, t in imported_units(probe, tmp_path / "feedbridge")] == ["render", "feeds"]


class RecordingEnviron(dict[str, str]):
    """An empty environment that remembers every name read from it (pytest may still write to it)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.asked.add(key)
        return super().__contains__(key)


def variables_read(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    settings_env = RecordingEnviron()
    Settings.from_env(settings_env)
    gunicorn_env = RecordingEnviron()
    monkeypatch.setattr(os, "environ", gunicorn_env)
    runpy.run_module("feedbridge.web.gunicorn_conf")
    return settings_env.asked | gunicorn_env.asked


def documented_variables() -> set[str]:
    """Every variable named in the first column of the README's configuration table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", first_cell))
    return names


def test_every_setting_read_is_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = variables_read(monkeypatch) - documented_variables()
    assert not missing, f"read by the code but not in the README's configuration table: {sorted(missing)}"


def test_every_documented_setting_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    unread = documented_variables() - variables_read(monkeypatch)
    assert not unread, f"in the README's configuration table but read nowhere: {sorted(unread)}"


def module_map() -> str:
    """The README's map of `feedbridge/`: the code block that starts with the line `feedbridge/`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\nfeedbridge/\n")
    return text[start : text.index("```", start)]


def test_the_readmes_module_map_names_every_module_and_only_those() -> None:
    """Each package's line (`  feeds/  spec.py ...`, wrapped onto indented lines) names its modules; the
    top-level modules are named bare (`cli.py`, `models.py`). `__init__.py` and the package data go unnamed."""
    named: set[str] = set()
    package = ""
    for line in module_map().strip().splitlines()[1:]:
        if not line.startswith(" "):
            break  # tests/, fixtures/, ...: the package's map has ended
        if head := re.match(r"  (\w+)/\s", line):
            package = head[1]
        elif not line.startswith("    "):
            package = ""
        for name in re.findall(r"\b(\w+)\.py\b", line):
            named.add(f"{package}/{name}.py" if package and (PACKAGE / package / f"{name}.py").exists()
                      else f"{name}.py")
    actual = {str(p.relative_to(PACKAGE)) for p in modules() if p.name != "__init__.py"}
    assert actual - named == set(), "modules missing from the README's map"
    assert named - actual == set(), "the README's map names modules that do not exist"
