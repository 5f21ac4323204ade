"""Connecting in a real browser: Debian's headless Chromium (Playwright) through the connect page, the fake
forum's approval page (tests/fake_personal.py) and back, on the Procfile's gunicorn. The cookie the nonce is
bound to is the browser's own here, with its path and SameSite rules, and the form's body passes the worker.

The pictures in docs/personal.md are these pages: a run writes them to its own temporary directory, and
FEEDBRIDGE_DOCS_SCREENSHOTS=1 writes them to docs/ (personal-*.png), which is how they are refreshed.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.appserver import procfile_apps
from tests.fake_personal import marker
from tests.test_browser import browser  # noqa: F401  (the module's Chromium, as a fixture)
from tests.test_personal import bridge_settings, personal_forum

DOCS = Path(__file__).resolve().parent.parent / "docs"


def shots(tmp_path: Path) -> Path:
    return DOCS if os.environ.get("FEEDBRIDGE_DOCS_SCREENSHOTS") == "1" else tmp_path


def test_a_member_connects_in_a_browser_and_reads_their_notifications(browser, tmp_path: Path) -> None:  # noqa: F811
    where = shots(tmp_path)
    with personal_forum() as (forum, site):
        with procfile_apps({"app": bridge_settings(forum)}) as apps:
            app = apps["app"]
            context = browser.new_context(viewport={"width": 1000, "height": 760})
            context.set_default_timeout(15_000)
            context.add_cookies([{"name": "_t", "value": "session-alice", "url": forum.url}])
            page = context.new_page()
            page.goto(f"{app.url}/{app.forum_key}/connect")
            page.screenshot(path=str(where / "personal-connect.png"), full_page=True)
            with context.expect_page() as opened:
                page.click("#approve")
            approving = opened.value
            approving.wait_for_load_state()
            approving.click("#authorize")
            payload = approving.inner_text("#payload")
            approving.close()
            page.fill("#payload", payload)
            page.click("#payload-form button[type=submit]")
            page.wait_for_selector("text=Connected as alice")
            page.screenshot(path=str(where / "personal-connected.png"), full_page=True)
            page.click("ul.personal li:first-child a:text('page')")
            page.wait_for_selector(f"text=Topic 0 {marker('alice')}")
            page.screenshot(path=str(where / "personal-notifications.png"), full_page=False)
            cookies = {c["name"] for c in context.cookies(app.url)}
            context.close()
    assert "feedbridge_connect" not in cookies  # the completed connect took its cookie with it
    assert [k.username for k in site.keys_of("alice")] == ["alice"]
    assert all((where / f"personal-{name}.png").stat().st_size > 10_000 for name in ("connect", "connected",
                                                                                      "notifications"))

