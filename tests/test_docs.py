"""The docs' parameter reference is written from the parameter table and checked against it (datasette's
`test_docs.py` is the model): `docs/parameters.md` holds a generated section, and this test fails when the
section and the table (`feedbridge/feeds/params.py`) disagree. `FEEDBRIDGE_WRITE_DOCS=1 pytest
tests/test_docs.py` rewrites the section from the table; the prose around it is the docs' own.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from feedbridge.config import Settings
from feedbridge.feeds import params
from feedbridge.feeds.params import Param

PARAMETERS_DOC = Path(__file__).resolve().parent.parent / "docs" / "parameters.md"
BEGIN = ("<!-- parameters: generated from feedbridge/feeds/params.py by tests/test_docs.py "
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
    assert found[1] == reference(), ("docs/parameters.md disagrees with feedbridge/feeds/params.py: "
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
