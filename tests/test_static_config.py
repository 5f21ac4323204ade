"""`feedbridge build --config`: what the config check refuses, and that each refusal names its line, in
whichever TOML shape the feed is written (`[[feeds]]` tables or inline tables), before anything is fetched."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from feedbridge.staticsite.lines import Lines
from feedbridge.staticsite.plan import MAX_CONFIG_BYTES, load_build_config
from tests.test_static import FIXTURE, ROOT, run

TOP = 'site_url = "https://x.example/"\n'


@pytest.fixture
def refused(tmp_path: Path, upstream, monkeypatch):
    """Writes a config, builds it, and checks it refused (exit 2, one line, nothing fetched); gives its path and
    the error. The fake forum stands in for the default one, so a config let through asks no real forum."""
    monkeypatch.setattr("feedbridge.staticsite.plan.DEFAULT_FORUM", upstream.url)
    return lambda text: _refused(tmp_path, upstream, text)


def _refused(tmp_path: Path, upstream, text: str) -> tuple[Path, str]:
    config = tmp_path / "feeds.toml"
    config.write_text(text.replace("https://x.example/", upstream.url))
    code, out, err = run(config)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1, err
    assert upstream.count() == 0
    return config, err


@pytest.mark.parametrize(("text", "line", "words"), [
    # a feed written as an inline table is placed as a [[feeds]] table is: by the key, else by its `{`
    (TOP + 'feeds = [\n  {name = "a", path = "latest"},\n  {name = "b", path = "latest", colour = 1},\n]\n', 4,
     "unknown key 'colour'"),
    (TOP + 'feeds = [{name = "a", path = "latest"}, {name = "b", path = "latest", limit = "x"}]\n', 2, "limit"),
    (TOP + 'feeds = [\n  {name = "a", path = "latest"},\n\n  # hot\n  {path = "hot"},\n]\n', 6,
     "every feed needs a name"),
    (TOP + 'feeds = [\n  {name = "a", path = "latest"},\n\n  {name = "b", path = "hot", file = "a"},\n]\n', 5,
     "both write a.atom"),
    (TOP + 'feeds = [\n  {name = "a", path = "latest", author = {x = 1}},\n]\n', 3, "author must be"),
    (TOP + 'feeds = [ { name = "a", "path" = "latest", q = """x"""}, {name = "b", path = "c/compiler"} ]\n', 2,
     "no feed route"),
    (TOP + 'feeds = [\n  {name = "a", path = "latest"},\n  {name = "b", path = "hot", limit = 0},\n]\n'
     '[defaults]\nlimit = 5\n', 4, "limit"),
    # not a list of feeds at all: the line that makes `feeds` what it is
    (TOP + '\n[feeds]\na = {path = "latest"}\n', 3, "[[feeds]]"),
    (TOP + '\n[feeds.a]\npath = "latest"\n', 3, "[[feeds]]"),
    # a table's name misspelled, quoted, or a table inside a feed's
    (TOP + '\n[[feed]]\nname = "a"\npath = "latest"\n', 3, "unknown key 'feed'"),
    (TOP + '[[ "feeds" ]]\nname = "a"\npath = "latest"\nlimit = "x"\n', 5, "limit"),
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\n\n[feeds.extra]\nx = 1\n', 6, "unknown key 'extra'"),
    # a multi-line string's lines are not headers or keys
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nq = """gpu \\\n[[feeds]]"""\n[[feeds]]\nname = "b"\n'
     'path = "latest"\nlimit = "x"\n', 10, "limit"),
])
def test_every_feed_error_names_its_line_whatever_the_shape(refused, text, line, words):
    config, err = refused(text)
    assert err.startswith(f"{config}:{line}: "), err
    assert words in err


@pytest.mark.parametrize(("feeds", "line", "words"), [
    ('[[feeds]]\nname = "Compiler"\npath = "latest"\n[[feeds]]\nname = "compiler"\npath = "hot"\n', 6,
     ["'Compiler' (line 3)", "'compiler'", "Compiler.atom", "compiler.atom"]),
    ('[[feeds]]\nname = "a"\nfile = "KW/a"\npath = "latest"\n[[feeds]]\nname = "b"\nfile = "kw/b"\npath = "hot"\n', 8,
     ["'a' (line 4)", "'b'", "KW/", "kw/"]),
    ('[[feeds]]\nname = "a"\npath = "latest"\n[[feeds]]\nname = "b"\nfile = "A.ATOM/x"\npath = "hot"\n', 7,
     ["'a' (line 3)", "'b'", "a.atom", "A.ATOM/"]),
    ('[[feeds]]\nname = "b"\nfile = "A.ATOM/x"\npath = "hot"\n[[feeds]]\nname = "a"\npath = "latest"\n', 7,
     ["'b' (line 4)", "'a'", "a.atom", "A.ATOM/"]),
    ('[[feeds]]\nname = "a"\nfile = "Index.HTML/x"\npath = "latest"\n', 4, ["the site", "index.html", "Index.HTML/"]),
    ('feeds = [\n  {name = "Compiler", path = "latest", formats = ["rss"]},\n'
     '  {name = "b", file = "compiler", path = "hot", formats = ["json", "rss"]},\n]\n', 4,
     ["'Compiler' (line 3)", "'b'", "Compiler.rss", "compiler.rss"]),
])
def test_output_names_that_differ_only_in_case_are_refused(refused, feeds, line, words):
    """`Compiler.atom` and `compiler.atom` are one file where a built folder may be copied or served (macOS,
    Windows): the second would overwrite the first there."""
    config, err = refused(TOP + feeds)
    assert err.startswith(f"{config}:{line}: "), err
    assert all(word in err for word in words), err
    assert "case" in err


def test_an_exact_collision_names_both_feeds_lines(refused):
    config, err = refused(TOP + '[[feeds]]\nname = "a"\npath = "latest"\n\n[[feeds]]\n'
                          'name = "b"\nfile = "a"\npath = "hot"\n')
    assert err.startswith(f"{config}:8: feed 'a' (line 3) and feed 'b' both write a.atom"), err


@pytest.mark.parametrize(("text", "line", "words"), [
    # a list in a list was a TypeError (unhashable) out of the set of formats
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nformats = [["atom"]]\n', 5, "formats must be"),
    # site_url: the feeds' own links are made from it, so it must be a plain http(s) folder URL
    ('site_url = "https://x.example/feeds a/"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    ('site_url = "https://x.example/?x=1"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    ('site_url = "https://x.example/#top"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    ('site_url = "https://x.example/\\u0007"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    ('site_url = "https://user@x.example/"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    # the site's title goes into index.html and feeds.opml as it is
    (TOP + 'title = "Feeds\\u0000"\n[[feeds]]\nname = "a"\npath = "latest"\n', 2, "title"),
    # an empty output name or folder was taken for none given
    (TOP + '[[feeds]]\nname = "a"\nfile = ""\npath = "latest"\n', 4, "file is empty"),
    (TOP + 'out_dir = ""\n[[feeds]]\nname = "a"\npath = "latest"\n', 2, "out_dir is empty"),
    # nesting deeper than tomllib follows was a RecursionError (out of the parser: no line to name)
    (TOP + "x = " + "[" * 5000 + "]" * 5000 + '\n[[feeds]]\nname = "a"\npath = "latest"\n', None, "nested"),
    # dotted keys nest tables as deep as they go: the error's repr of the value was a RecursionError
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nlimit.' + ".".join(["a"] * 2000) + " = 1\n", 5, "limit must be"),
    (TOP + '[fetch]\ndelay.' + ".".join(["a"] * 2000) + ' = 1\n[[feeds]]\nname = "a"\npath = "latest"\n', 3,
     "delay must be"),
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nforum.' + ".".join(["a"] * 2000) + " = 1\n", 5,
     "forum must be"),
    # a port that is none went into every feed's self link and the OPML
    ('site_url = "https://x.example:abc/"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    ('site_url = "https://x.example:99999/"\n[[feeds]]\nname = "a"\npath = "latest"\n', 1, "site_url"),
    # integers of over 4,300 digits: a ValueError out of tomllib (decimal) or out of writing them (hexadecimal)
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nlimit = 1' + "0" * 5000 + "\n", None, "4300 digits"),
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nlimit = 0x' + "f" * 4000 + "\n", 5, "limit must be a whole number"),
    (TOP + '[fetch]\ndelay = 0x' + "f" * 4000 + '\n[[feeds]]\nname = "a"\npath = "latest"\n', 3, "delay must be"),
    # a forum whose port is none was fetched, and the build failed (exit 1)
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nforum = "https://x.example:99999/"\n', 5, "not an http(s) base URL"),
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nforum = "https://x.example:abc/"\n', 5, "not an http(s) base URL"),
    # a thousand feeds 496 folders deep took 12 s to check
    (TOP + '[[feeds]]\nname = "a"\npath = "latest"\nfile = "' + "d/" * 17 + 'a"\n', 5, "16 folders deep"),
])
def test_more_mistakes_are_refused_with_their_line(refused, text, line, words):
    config, err = refused(text)
    assert err.startswith(f"{config}:{line}: " if line else f"{config}: "), err
    assert words in err


def test_a_source_files_huge_id_and_an_out_dir_that_cannot_be_are_config_errors(tmp_path, upstream, monkeypatch):
    """A saved list whose URL ends in `?category=` and 5,000 digits was a ValueError out of `int()`; an output
    folder whose name is too long, or a link to nowhere, passed the check and failed after the forum was read;
    `--out-dir ""` built into the current folder. Each is exit 2 before anything is read."""
    monkeypatch.chdir(tmp_path)  # where an empty --out-dir wrote
    saved = tmp_path / "saved.md"
    saved.write_text(FIXTURE.read_text(encoding="utf-8").replace("/c/compiler/5.md", "/latest.md?category=" + "9" * 5000, 1))
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "{upstream.url}/"\n[[feeds]]\nname = "a"\nsource = "{saved}"\n')
    code, out, err = run(config)
    assert code == 2 and out == "" and "category" in err and "Traceback" not in err, err
    config.write_text(f'site_url = "{upstream.url}/"\n[[feeds]]\nname = "a"\nforum = "{upstream.url}"\npath = "latest"\n')
    (tmp_path / "nowhere").symlink_to(tmp_path / "missing" / "feeds")
    for args, words in ((("--out-dir", str(tmp_path / ("x" * 300))), "too long"),
                        (("--out-dir", str(tmp_path / "nowhere")), "not a folder"), (("--out-dir", ""), "empty")):
        code, out, err = run(config, *args)
        assert code == 2 and out == "" and words in err, (args, err)
    assert not (tmp_path / "a.atom").exists() and not (tmp_path / "index.html").exists()
    assert upstream.count() == 0


def test_the_config_file_is_read_bounded(tmp_path, upstream):
    """`--config /dev/zero` was read until memory ran out, and a FIFO hung the run; a config file is a regular
    file of at most MAX_CONFIG_BYTES, which also bounds the reading of its lines."""
    code, out, err = run(Path("/dev/zero"))
    assert code == 2 and out == "" and "not a regular file" in err
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    code, _out, err = run(fifo)
    assert code == 2 and "not a regular file" in err
    big = tmp_path / "feeds.toml"
    feed = f'site_url = "{upstream.url}"\n[[feeds]]\nname = "a"\nsource = "{FIXTURE}"\n'
    big.write_text(feed + "#" * (MAX_CONFIG_BYTES - len(feed)))
    code, _out, err = run(big)
    assert code == 0, err
    big.write_text(feed + "#" * (MAX_CONFIG_BYTES - len(feed) + 1))
    code, _out, err = run(big)
    assert code == 2 and err.startswith(f"{big}: ") and f"larger than {MAX_CONFIG_BYTES} bytes" in err
    assert upstream.count() == 0


def test_the_line_reader_follows_every_kind_of_value():
    """Strings of the four kinds, dates with a space, nested arrays and inline tables, comments, dotted and
    quoted keys: each key after them is placed on its own line."""
    text = ('a = """x\n[[feeds]]\ny = 1\n""""\nb = \'\'\'\n[[feeds]]\'\'\'\nc = "q\\"[[feeds]]"  # [[feeds]]\n'
            "d = 'i\"t'\ne = 1979-05-27 07:32:00Z\nf = [[1, 2], [\"]\", {g = [3]}], # ]\n]\n"
            'h.i = {j = 1}\n"k l" = true\n[t]\nm = -inf\n[[feeds]]\nn = 1\n[[feeds]]\n  "o" = 2\n')
    tomllib.loads(text)  # valid TOML, as every text the reader is given
    lines = Lines(text)
    assert [lines.of("", 0, key) for key in "abcdef"] == [1, 5, 7, 8, 9, 10]
    assert (lines.of("h", 0, "i"), lines.of("", 0, "k l"), lines.of("t", 0, "m")) == (12, 13, 15)
    assert [lines.of("feeds", i) for i in (0, 1, 2)] == [16, 18, None]
    assert (lines.of("feeds", 0, "n"), lines.of("feeds", 1, "o")) == (17, 19)


def test_the_inline_example_in_the_docs_is_valid_config(tmp_path):
    block = re.search(r"```toml\n(feeds = \[.*?)```", (ROOT / "docs" / "static.md").read_text(encoding="utf-8"), re.S)[1]
    config = tmp_path / "feeds.toml"
    config.write_text(f'site_url = "https://feeds.example.net/"\n{block}')
    assert [(f.name, f.files[0]) for f in load_build_config(config).feeds] == [
        ("compiler", "compiler.atom"), ("inductor", "keywords/inductor.atom")]
