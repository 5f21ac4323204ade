"""The reference in docs/ checked against the code, as datasette's tests/test_docs.py checks its own: every
list of names the docs give is compared with what the code declares, both ways, one test per name, so a
failure says which setting, option or module the docs and the code disagree on.

- docs/configuration.md: its table names every environment variable the code reads (found by recording what
  the code asks of the environment, not by searching its text), nothing else, and each number's default as
  `Settings` declares it.
- docs/cli.md: a section per click command (`## feedbridge NAME`) naming its arguments and every option, and
  no option the command does not have.
- docs/architecture.md: its module map names every module of `feedbridge/`, and nothing that is not there.
- docs/deploying.md: the feed requests metric's `kind` values are the route kinds (`spec.RouteKind`).
- README.md and docs/*.md: every relative link reaches a file, and a heading of it when it names one.
- docs/parameters.md: its generated section is the parameter table (`feedbridge/feeds/request/params.py`) written
  out; `FEEDBRIDGE_WRITE_DOCS=1 pytest tests/test_docs.py` rewrites it, the prose around it is the docs' own.
"""

from __future__ import annotations

import dataclasses
import os
import re
import runpy
import unicodedata
from dataclasses import fields
from pathlib import Path
from typing import get_args

import click
import pytest

from feedbridge.cli import main
from feedbridge.config import Settings
from feedbridge.feeds.request import params
from feedbridge.feeds.request.params import Duration, Param
from feedbridge.feeds.request.spec import RouteKind

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "feedbridge"
PAGES = sorted([ROOT / "README.md", *DOCS.glob("*.md")])


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def without_code_blocks(text: str) -> str:
    """The text outside fenced code blocks, whose `#` lines are shell comments and `[x](y)` no links."""
    return re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.M | re.S)


# Settings: docs/configuration.md's table against what the code reads.


class RecordingEnviron(dict[str, str]):
    """An empty environment that remembers every name read from it."""

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


def variables_read() -> set[str]:
    """Every variable `Settings.from_env` and the gunicorn settings (the Procfile's) ask for."""
    settings_env = RecordingEnviron()
    Settings.from_env(settings_env)
    gunicorn_env = RecordingEnviron()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", gunicorn_env)
        runpy.run_module("feedbridge.web.gunicorn_conf")
    return settings_env.asked | gunicorn_env.asked


def settings_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """(variables, defaults) of each row of the table: the backticked names of the first column and the
    backticked values of the second (`A` / `B` | `1` / `2` names two, each with its default)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")
            rows.append((re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[1]), re.findall(r"`([^`]+)`", cells[2])))
    return rows


def documented_variables(text: str) -> set[str]:
    return {name for names, _ in settings_rows(text) for name in names}


CONFIGURATION = read(DOCS / "configuration.md")
READ = variables_read()
DOCUMENTED = documented_variables(CONFIGURATION)


def declared_defaults() -> dict[str, int | float | str]:
    """Each variable of a number or text setting and the default `Settings` gives it."""
    found: dict[str, int | float | str] = {}
    for f in fields(Settings):
        env = f.metadata.get("env")
        if env is not None and isinstance(f.default, int | float | str) and not isinstance(f.default, bool):
            found[env.names[0]] = f.default
    return found


DEFAULTS = declared_defaults()
DOCUMENTED_DEFAULTS = {name: value for names, values in settings_rows(CONFIGURATION) if len(names) == len(values)
                       for name, value in zip(names, values, strict=True) if name in DEFAULTS}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_the_configuration_table_gives_each_default_as_settings_declares_it(name: str) -> None:
    default = DEFAULTS[name]
    assert name in DOCUMENTED_DEFAULTS, f"docs/configuration.md gives no default for {name} ({default!r})"
    written = DOCUMENTED_DEFAULTS[name]
    same = float(written) == default if isinstance(default, int | float) and re.fullmatch(r"[\d.]+", written) \
        else written == str(default)
    assert same, f"docs/configuration.md gives {name} the default {written!r}; Settings has {default!r}"


def test_a_missing_row_or_default_is_seen() -> None:
    """The checks above are only as good as the table's reading: a row taken out, or a changed default,
    must show."""
    row = next(line for line in CONFIGURATION.splitlines() if line.startswith("| `FEEDBRIDGE_COLD_SLOTS`"))
    assert "FEEDBRIDGE_COLD_SLOTS" not in documented_variables(CONFIGURATION.replace(row, ""))
    changed = settings_rows(CONFIGURATION.replace(row, row.replace("| `6` |", "| `7` |")))
    assert (["FEEDBRIDGE_COLD_SLOTS"], ["7"]) in changed


# The command line: docs/cli.md's sections against the click commands.

CLI = read(DOCS / "cli.md")
OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)(?![\w-])")


def cli_sections(text: str) -> dict[str, str]:
    """Each `## feedbridge NAME` section's text by NAME; the text before the first section is ``""``'s."""
    parts = re.split(r"^## feedbridge (\S+)\n", text, flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}


SECTIONS = cli_sections(CLI)
COMMANDS = main.commands


def names_of(command: click.Command) -> list[str]:
    """What a reader types: every spelling of each option (`-o`, `--output`), and each argument in capitals."""
    names: list[str] = []
    for param in command.params:
        if isinstance(param, click.Option):
            names += [*param.opts, *param.secondary_opts]
        elif isinstance(param, click.Argument) and param.name:
            names.append(param.name.upper())
    return names


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_its_section(command: str) -> None:
    assert command in SECTIONS, f"docs/cli.md has no section `## feedbridge {command}`"


@pytest.mark.parametrize("command,name", [(c, n) for c in sorted(COMMANDS) for n in names_of(COMMANDS[c])]
                         + [("", n) for n in names_of(main)])
def test_every_option_is_in_its_commands_section(command: str, name: str) -> None:
    """`""` is the group's own options (`--version`), named before the sections."""
    section = SECTIONS.get(command, "")
    found = OPTION.findall(section) if name.startswith("-") else re.findall(rf"\b{name}\b", section)
    where = f"the section of `feedbridge {command}`" if command else "the text before the sections"
    assert name in found, f"docs/cli.md does not name {name} in {where}"


@pytest.mark.parametrize("command", sorted(SECTIONS))
def test_every_option_the_docs_name_exists(command: str) -> None:
    """A long option named in a command's section is that command's; the text before the sections may name
    any command's."""
    if command and command not in COMMANDS:
        pytest.fail(f"docs/cli.md has a section for `feedbridge {command}`, which is no command")
    commands = [COMMANDS[command]] if command else [main, *COMMANDS.values()]
    known = {"--help"} | {name for c in commands for name in names_of(c)}
    unknown = {o for o in OPTION.findall(SECTIONS[command]) if o.startswith("--")} - known
    assert not unknown, f"docs/cli.md names options `feedbridge {command}` does not have: {sorted(unknown)}"


def test_a_missing_option_is_seen() -> None:
    build = cli_sections(CLI.replace("`--min-views`", "`--min-viewz`"))["build"]
    assert "--min-views" not in OPTION.findall(build) and "--min-viewz" in OPTION.findall(build)


# The module map: docs/architecture.md against feedbridge/'s modules.


def module_map(text: str) -> set[str]:
    """The modules named by the code block that starts with the line `feedbridge/`: each package's line
    (`  store/  keys.py ...`, wrapped onto indented lines) names its modules, as a subpackage's line does its
    own (`    request/  spec.py ...`, within `feeds/`); the top-level modules are
    named bare (`cli.py`, `models.py`). `__init__.py` and the package data go unnamed."""
    start = text.index("\nfeedbridge/\n")
    named: set[str] = set()
    package = ""
    for line in text[start : text.index("```", start)].strip().splitlines()[1:]:
        if not line.startswith(" "):
            break  # a tree after the package's (tests/, ...): the package's map has ended
        if head := re.match(r"  (\w+)/\s", line):
            package = head[1]
        elif sub := re.match(r"    (\w+)/\s", line):  # a package's subpackage (`feeds/`: `request/`, ...)
            package = f"{package.split('/')[0]}/{sub[1]}"
        elif not line.startswith("    "):
            package = ""
        for name in re.findall(r"\b(\w+)\.py\b", line):
            named.add(f"{package}/{name}.py" if package and (PACKAGE / package / f"{name}.py").exists()
                      else f"{name}.py")
    return named


ARCHITECTURE = read(DOCS / "architecture.md")
MAPPED = module_map(ARCHITECTURE)
MODULES = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}


def metric_kinds(text: str) -> set[str]:
    """The `kind` values docs/deploying.md gives `feedbridge_feed_requests_total`: the parenthesis after "`kind`
    is the route's", in its row of the metrics table."""
    row = next(line for line in text.splitlines() if line.startswith("| `feedbridge_feed_requests_total`"))
    found = re.search(r"`kind` is the route's \(([^)]*)\)", row)
    assert found is not None, "docs/deploying.md no longer says which route kinds `kind` takes"
    return set(re.findall(r"`(\w+)`", found[1]))


# Each list of names the docs give and the code's own, compared both ways: (the code's names, what has
# them; the docs' names, where they are).
LISTS: dict[str, tuple[set[str], str, set[str], str]] = {
    "setting": (READ, "read by the code", DOCUMENTED, "in docs/configuration.md's table"),
    "module": ({f"feedbridge/{m}" for m in MODULES}, "in the package", {f"feedbridge/{m}" for m in MAPPED},
               "in docs/architecture.md's module map"),
    "metric kind": (set(get_args(RouteKind)), "a route kind (feeds/request/spec.py `RouteKind`)",
                    metric_kinds(read(DOCS / "deploying.md")), "in docs/deploying.md's feed requests metric"),
}


@pytest.mark.parametrize("kind,name", [(kind, name) for kind, (code, _, docs, _) in LISTS.items()
                                       for name in sorted(code | docs)])
def test_the_docs_and_the_code_name_the_same(kind: str, name: str) -> None:
    code, in_code, docs, in_docs = LISTS[kind]
    assert name in docs, f"{name} is {in_code} but not {in_docs}"
    assert name in code, f"{name} is {in_docs} but not {in_code}"


def test_a_module_missing_from_the_map_is_seen() -> None:
    assert "feeds/admission/gate.py" in MAPPED and "feeds/admission/gate.py" not in module_map(ARCHITECTURE.replace(" gate.py", " "))


# Links: every relative link of README.md and docs/ reaches a file, and a heading of it when it names one.

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*#*$", without_code_blocks(text), flags=re.M):
        base = slug(heading)
        found.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return found


def relative_links(page: Path) -> list[str]:
    targets = [a or b for a, b in LINK.findall(without_code_blocks(read(page)))]
    return [t for t in targets if not re.match(r"[a-z][a-z+.-]*:", t)]


LINKS = [(page, target) for page in PAGES for target in sorted(set(relative_links(page)))]


@pytest.mark.parametrize("page,target", LINKS, ids=[f"{p.relative_to(ROOT)}:{t}" for p, t in LINKS])
def test_every_relative_link_reaches_its_file_and_heading(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    reached = (page.parent / path).resolve() if path else page
    assert reached.exists(), f"{page.relative_to(ROOT)} links {target}: no such file"
    if anchor and reached.suffix == ".md":
        assert anchor in anchors(read(reached)), f"{page.relative_to(ROOT)} links {target}: no such heading"


def test_the_links_are_found_and_their_headings_read() -> None:
    assert ("README.md", "docs/configuration.md") in {(str(p.relative_to(ROOT)), t) for p, t in LINKS}
    assert "less-and-better-thresholds-tags-exclusions-digests" in anchors(read(DOCS / "feeds.md"))
    assert slug("Markdown or JSON: every Discourse forum") == "markdown-or-json-every-discourse-forum"
    assert slug("`feedbridge serve`") == "feedbridge-serve"

PARAMETERS_DOC = DOCS / "parameters.md"
BEGIN = ("<!-- parameters: generated from feedbridge/feeds/request/params.py by tests/test_docs.py "
         "(FEEDBRIDGE_WRITE_DOCS=1 rewrites it) -->")
END = "<!-- end of parameters -->"
SECTION = re.compile(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), re.S)


def variable(setting: str) -> str:
    """The environment variable that sets the `Settings` field `setting`, and its default."""
    found = next(f for f in dataclasses.fields(Settings) if f.name == setting)
    return f"`{found.metadata['env'].names[0]}` ({found.default})"


def value(param: Param) -> str:
    """What a parameter's value is, its bounds and its default, in words."""
    high = variable(param.high_setting) if param.high_setting else str(param.high)
    words = {
        "whole": f"a whole number, {param.low}–{high}",
        "ids": f"ids, {param.low}–{high}, at most {param.most}",
        "choice": " \\| ".join(f"`{v}`" for v, _ in param.choices),
        "flag": "`1` (or `0`)",
        "text": f"text, at most {param.chars} characters and {param.most} terms",
        "names": f"names, at most {param.most}",
        "tags": f"tags (`a,b`: any; `a+b`: all), at most {param.most}",
        "duration": f"hours, days or weeks (`36h`, `7d`, `2w`), at most {Duration(param.high)}",
        "signature": "what `feedbridge sign` appends",
    }[param.value]
    if param.default_setting:
        words += f"; default {variable(param.default_setting)}"
    elif param.default:
        words += f"; default `{param.default}`"
    if param.required:
        words += f"; required on {params.where(param.required).removesuffix(' feeds')}"
    return words


def option(param: Param) -> str:
    if not param.cli:
        return ""
    return f"`--{param.option_name}`" + (f", `{param.short}`" if param.short else "")


def reference() -> str:
    """The generated section: one row per row of the table."""
    lines = ["| parameter | feeds | value | given | needs | CLI | meaning |", "|---|---|---|---|---|---|---|"]
    for param in params.PARAMETERS:
        given = "many (repeat it, or comma-separate)" if param.many else "once"
        needs = f"`{param.needs}`" if param.needs else ""
        meaning = param.help.replace("|", "\\|")
        lines.append(f"| `{param.name}=` | {params.where(param.feeds)} | {value(param)} | {given} | {needs} | "
                     f"{option(param)} | {meaning} |")
    return "".join(f"{line}\n" for line in lines)


def test_the_parameter_reference_is_the_table() -> None:
    text = PARAMETERS_DOC.read_text(encoding="utf-8")
    found = SECTION.search(text)
    assert found is not None, f"{PARAMETERS_DOC.name} has no generated section between {BEGIN!r} and {END!r}"
    if os.environ.get("FEEDBRIDGE_WRITE_DOCS") == "1":
        PARAMETERS_DOC.write_text(text[: found.start(1)] + reference() + text[found.end(1) :], encoding="utf-8")
        return
    assert found[1] == reference(), ("docs/parameters.md disagrees with feedbridge/feeds/request/params.py: "
                                     "FEEDBRIDGE_WRITE_DOCS=1 pytest tests/test_docs.py rewrites its table")


def test_the_check_sees_a_changed_row() -> None:
    """The comparison above is only as good as its rendering: a changed bound changes the section."""
    changed = dataclasses.replace(params.NAMED["limit"], high=params.MAX_LIMIT + 1)
    assert value(changed) != value(params.NAMED["limit"])
    assert f"1–{params.MAX_LIMIT}" in reference()


def test_the_prose_names_only_parameters_the_table_has() -> None:
    """Outside the generated section, every `name=` the page writes is a parameter of the table."""
    text = SECTION.sub("", PARAMETERS_DOC.read_text(encoding="utf-8"))
    named = set(re.findall(r"`([a-z_]+)=", text))
    assert named, "the prose names no parameter: the pattern is wrong"
    assert named - set(params.NAMES) == set(), "docs/parameters.md names parameters the table does not have"
