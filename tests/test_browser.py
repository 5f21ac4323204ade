"""The front page in a real browser: Debian's headless Chromium driven by Playwright, the app on a real
socket, the fake forum on 127.0.0.1. One browser for the module; screenshots go to tests/artifacts/,
and the README's picture is taken from `feedbridge serve --demo`, so it shows what a newcomer sees. A run
writes it to its own temporary directory (two suites may run at once on one checkout, and a test run should
not leave the tree changed); FEEDBRIDGE_README_SCREENSHOT=1 writes docs/screenshot.png, which is how that
file is refreshed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import sync_playwright

from feedbridge.config import Settings, parse_forum
from feedbridge.demo import ORIGIN
from feedbridge.demo import page as forum_page
from tests.appserver import running_app
from tests.test_demo import serve
from tests.upstream import FakeForum

CHROMIUM = os.environ.get("FEEDBRIDGE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
README_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "screenshot.png"
SCRIPT = "<script>alert(1)</script>"



@pytest.fixture(scope="module")
def forum() -> Iterator[FakeForum]:
    with FakeForum() as fake:
        yield fake


@pytest.fixture(scope="module")
def base_url(forum: FakeForum) -> Iterator[str]:
    with running_app(Settings(forums=(parse_forum(forum.url),))) as app:
        yield app.url


@pytest.fixture(scope="module")
def browser() -> Iterator:
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is not installed: Debian's chromium package, which .ci/run installs"
    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--no-first-run"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh page that records every dialog (an executed alert() would open one) and console error."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    yield page
    assert page.dialogs == [], "a script from a title or a query ran"
    context.close()


@pytest.fixture
def key(forum: FakeForum) -> str:
    return forum.url.split("://", 1)[1]


def feed_url(page) -> str:
    return page.input_value("#feed-url")


def wait_for_url(page, fragment: str) -> None:
    page.wait_for_function("f => document.getElementById('feed-url')?.value.includes(f)", arg=fragment)


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_category_feed_built_through_the_form(page, base_url, key):
    page.goto(base_url + "/")
    assert SCRIPT in page.locator("#result .entry-title").all_inner_texts()  # latest's hostile title, as text
    assert page.locator("#result script").count() == 0
    page.get_by_label("category", exact=True).check()
    page.select_option("#category", "hardware/gpu/12")
    wait_for_url(page, f"/{key}/c/hardware/gpu/12.atom")
    assert feed_url(page) == f"{base_url}/{key}/c/hardware/gpu/12.atom"
    assert "[RFC] C:\\temp\\new path [draft] \\ back\\\\slashes" in page.locator(".entry-title").all_inner_texts()
    assert page.get_attribute("head link[rel=alternate]", "href") == feed_url(page)
    assert "list=category" in page.url  # the page's own address follows the form
    page.click("#copy-button")
    page.wait_for_function("() => document.getElementById('copy-status').textContent.includes('Copied')")
    screenshot(page, "front-page.png")


def test_a_field_the_chosen_list_hides_is_not_sent(page, base_url, key):
    """A value typed for one list stays in its field when another list hides it; the script sent it all the
    same, and the server now names a value the list's feed does not take: the hidden one is left out."""
    page.goto(base_url + "/")
    page.fill("#min_likes", "3")
    wait_for_url(page, f"/{key}/latest.atom?min_likes=3")
    page.get_by_label("posts", exact=True).check()
    wait_for_url(page, f"/{key}/posts.atom")
    assert feed_url(page) == f"{base_url}/{key}/posts.atom"
    assert page.locator("#result [role=alert]").count() == 0


def test_author_feed_and_formats(page, base_url, key):
    page.goto(base_url + "/")
    page.fill("#author", "Chillee")
    page.get_by_label("rss").check()
    wait_for_url(page, f"/{key}/latest.rss?author=chillee")
    metas = page.locator("#result .entry-meta").all_inner_texts()
    assert metas and all("by Chillee" in m for m in metas)
    assert all("repl" in m and "last activity" in m for m in metas)
    links = page.locator("head link[rel=alternate]")
    assert links.first.get_attribute("type") == "application/rss+xml"
    assert links.first.get_attribute("href") == feed_url(page)


def test_keyword_feed_with_a_script_in_the_query(page, base_url, key):
    page.goto(base_url + "/")
    page.fill("#q", SCRIPT)
    wait_for_url(page, "q=")
    assert "<script>" not in feed_url(page)
    assert page.input_value("#q") == SCRIPT
    page.fill("#q", "zzzqqq")
    wait_for_url(page, "zzzqqq")
    empty = page.locator("#empty-preview")
    assert "No topics match" in empty.inner_text() and "Read 2 pages" in empty.inner_text()
    page.fill("#q", "cache")
    wait_for_url(page, "q=cache")
    excerpts = " ".join(page.locator("#result .entry").all_inner_texts()).lower()
    assert "cache" in excerpts
    page.reload()
    assert page.input_value("#q") == "cache"  # the address kept the choices


def test_paste_a_forum_url_fills_the_form(page, base_url, forum, key):
    page.goto(base_url + "/")
    page.fill("#paste-url", f"{forum.url}/tag/gpu.md?page=1")
    page.click("#paste-form button")
    wait_for_url(page, f"/{key}/tag/gpu.atom")
    assert page.is_checked("input[name=list][value=tag]")
    assert page.input_value("#tag") == "gpu"
    assert "Tag gpu" in page.inner_text("#paste-status")
    page.fill("#paste-url", f"https://elsewhere.example/c/x/1?{SCRIPT}")
    page.click("#paste-form button")
    page.wait_for_function("() => document.getElementById('paste-status').textContent.includes('not a forum')")
    assert page.locator("#paste-status script").count() == 0


def test_html_and_xsl_views_are_readable_and_escaped(page, base_url, key):
    page.goto(f"{base_url}/{key}/latest.html")
    assert page.locator("h1").inner_text().endswith("latest")
    assert SCRIPT in page.locator(".entry-title").all_inner_texts()
    alternates = page.locator("head link[rel=alternate]")
    assert [alternates.nth(i).get_attribute("type") for i in range(alternates.count())] == [
        "application/atom+xml", "application/rss+xml", "application/feed+json"]
    screenshot(page, "feed-html-view.png")
    for fmt in ("atom", "rss"):
        page.goto(f"{base_url}/{key}/latest.{fmt}")
        page.wait_for_selector("#feed-title")
        assert SCRIPT in page.locator(".entry-title").all_inner_texts()
        assert page.locator("main script").count() == 0
        assert page.get_attribute("#html-view", "href") == f"{base_url}/{key}/latest.html"
        assert page.get_attribute("head link[rel=icon]", "href") == "/static/icon.svg"
    screenshot(page, "feed-xsl-view.png")


def test_without_javascript_the_form_still_builds_a_feed(browser, base_url, forum, key):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(base_url + "/")
    assert page.is_hidden("#copy-button")
    page.get_by_label("category", exact=True).check()
    page.select_option("#category", "compiler/5")
    page.fill("#author", "Chillee")
    page.click("#build-button")
    page.wait_for_url("**/?*category=compiler*")
    assert page.input_value("#feed-url") == f"{base_url}/{key}/c/compiler/5.atom?author=chillee"
    assert page.locator("#result .entry").count() > 0
    page.fill("#paste-url", f"{forum.url}/top.md?period=weekly")
    page.click("#paste-form button")
    page.wait_for_url("**/?url=*")
    assert page.input_value("#feed-url") == f"{base_url}/{key}/top.atom?author=chillee&period=weekly"
    context.close()


def test_phone_width_has_no_horizontal_overflow(browser, base_url, key):
    context = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True, device_scale_factor=2)
    page = context.new_page()
    for path in ("/?list=category&category=hardware/gpu/12", f"/{key}/latest.html"):
        page.goto(base_url + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than the screen"
    page.goto(base_url + "/")
    screenshot(page, "front-page-phone.png")
    context.close()


def loaded(page, selector: str) -> list[int]:
    """The natural width of each image `selector` finds, once it has loaded or failed: 0 for one that failed (its
    forum's server refused it, or the page's Content-Security-Policy blocked it)."""
    page.eval_on_selector_all(selector, "images => images.forEach(i => { i.loading = 'eager'; })")  # lazy ones too
    page.wait_for_function("s => [...document.querySelectorAll(s)].every(i => i.complete)", arg=selector)
    widths: list[int] = page.eval_on_selector_all(selector, "images => images.map(i => i.naturalWidth)")
    return widths


def test_thumbnails_and_the_forums_icon_show_in_the_html_view_and_the_preview(browser):
    """Issue 46: a JSON forum's topics with a picture show it beside the entry, and the forum's icon (from its
    /site/basic-info.json) beside the title, loaded from the forum by the browser under the page's CSP."""
    with FakeForum(mode="json") as json_forum, \
            running_app(Settings(forums=(parse_forum(json_forum.url),))) as app:
        key = json_forum.url.split("://", 1)[1]
        context = browser.new_context(viewport={"width": 1100, "height": 900})
        page = context.new_page()
        page.goto(f"{app.url}/{key}/c/compiler/5.html")
        thumbnails = loaded(page, ".entry-thumbnail")
        assert len(thumbnails) >= 5 and all(width == 64 for width in thumbnails), thumbnails
        assert len(thumbnails) < page.locator(".entry").count()  # only the topics that have one
        assert loaded(page, ".feed-heading .forum-icon") == [96]
        screenshot(page, "feed-html-view-pictures.png")
        page.goto(f"{app.url}/?forum={key}&list=category&category=compiler/5")
        assert loaded(page, "#result .forum-icon") == [96]
        assert [w for w in loaded(page, "#result .entry-thumbnail") if w != 64] == []
        assert page.locator("#result .entry-thumbnail").count() >= 3
        context.close()


def test_readme_screenshot_is_the_demo_building_a_feed(browser, tmp_path):
    """docs/screenshot.png: the demo's front page with a keyword feed of the compiler category and its preview.
    The browser asks the forum for its icon as for any link: here the demo's offline copy answers for it, so the
    picture shows it and the test reads nothing from the internet."""
    with serve("--demo", "--port", "0") as demo:
        context = browser.new_context(viewport={"width": 1100, "height": 900})
        context.route(f"{ORIGIN}/**", lambda route: route.fulfill(
            **dict(zip(("status", "headers", "body"), forum_page(*urlsplit(route.request.url)[2:4]), strict=True))))
        page = context.new_page()
        page.goto(demo.urls["front page"])
        key = demo.urls["Atom feed"].split("/", 3)[3].removesuffix("/c/compiler/5.atom")
        assert key == "dev-discuss.pytorch.org"  # the demo serves the real forum's feed URLs from its offline copy
        page.get_by_label("category", exact=True).check()
        page.select_option("#category", "compiler/5")
        page.fill("#q", "inductor OR dynamo")
        wait_for_url(page, f"/{key}/c/compiler/5.atom?q=inductor")
        titles = page.locator("#result .entry-title").all_inner_texts()
        assert len(titles) >= 5 and all(t.strip() for t in titles), titles
        assert page.locator("#preview-unavailable").count() == 0
        assert loaded(page, "#result .forum-icon") == [96]  # the copy's icon
        page.locator("#q").blur()
        page.wait_for_load_state("networkidle")  # leaving the field may refresh the preview once more
        # The picture ends with the fourth entry: where the fifth begins, read in the page in one step once no
        # refresh is under way (pages.js marks #result aria-busy while one is), so a refresh that replaces the
        # entries between two steps cannot leave a detached element to measure.
        top = page.wait_for_function("""() => {
            const result = document.getElementById("result");
            const fifth = result.querySelectorAll(".entry")[4];
            if (result.hasAttribute("aria-busy") || !fifth) return null;
            return fifth.getBoundingClientRect().top + window.scrollY;
        }""").json_value()
        assert top > 0
        picture = README_SCREENSHOT if os.environ.get("FEEDBRIDGE_README_SCREENSHOT") == "1" else tmp_path / "shot.png"
        page.screenshot(path=str(picture), full_page=True,
                        clip={"x": 0, "y": 0, "width": 1100, "height": top})
        context.close()
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
