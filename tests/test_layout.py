"""The tree's layers, checked rather than claimed: imports run one way along the data path (lower layers
never import higher ones), and the store is a leaf that knows nothing of parsing, rendering or the web.
docs/architecture.md describes the layers; what the docs say of the tree (the settings table, the module
map, the CLI) is checked in tests/test_docs.py.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    probe.write_text("def f():\n    from feedbridge.render.meta import FeedMeta\n    from ..feeds import spec\n")
    assert [t for _, t in imported_units(probe, tmp_path / "feedbridge")] == ["render", "feeds"]


MAX_MODULE_LINES = 500
"""Issue 44's bound: a module a new maintainer can read whole. Past it, a module holds two jobs."""


def test_no_module_is_over_500_lines() -> None:
    long = {str(path.relative_to(ROOT)): n for path in sorted(PACKAGE.rglob("*.py"))
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


AMBIENT: dict[str, str] = {
    "feedbridge/feeds/admission/cpu.py": "the CPU meter: greenlet's switch tracer finds it through the context",
    "feedbridge/upstream/batch.py": "a static build's per-file request tally, counted by the fetcher",
    "feedbridge/web/logs.py": "the request id each log line carries",
}
"""The modules that keep state in a context variable, and why. A request's state is otherwise one value handed
down (`Read`, `Caller`, `Building`: issue 44), never looked up from the context by a layer below."""


def context_variables(path: Path) -> list[int]:
    """The lines of `path` that make a `ContextVar`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == "ContextVar" or getattr(node.func, "attr", None) == "ContextVar")]


def test_request_state_is_handed_down_not_ambient() -> None:
    found = {str(path.relative_to(ROOT)): lines for path in modules() if (lines := context_variables(path))}
    assert set(found) == set(AMBIENT), f"context variables {found}: hand the state down with the read instead"


def test_the_ambient_check_sees_a_context_variable(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import contextvars\nfrom contextvars import ContextVar\nA = ContextVar('a')\n"
                     "B: contextvars.ContextVar[int] = contextvars.ContextVar('b', default=1)\n")
    assert context_variables(probe) == [3, 4]
