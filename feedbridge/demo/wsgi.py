"""The service `serve --demo` runs under gunicorn (`feedbridge.demo.wsgi:create_app()`)."""

from __future__ import annotations

from dataclasses import replace

from flask import Flask

from feedbridge.config import Settings, parse_forum
from feedbridge.demo import FORUM, NOTE, LocalCopy
from feedbridge.web.app import create_app as create_service_app

DEMO_BUDGET = 100_000  # FEEDBRIDGE_FORUM_BUDGET's upper bound


def create_app() -> Flask:
    """The demo forum only, cached in memory (a shared Redis must not hold the copy's pages as the real
    forum's), read through `LocalCopy`. The copy answers from the package, so the per-forum budgets that
    spare a real forum spare nothing here, and would only answer 503 to someone clicking through the demo
    (a `tag=` feed of a Markdown forum reads a page per topic): the minute's is the highest the settings
    allow, the 10-second one is off."""
    settings = replace(Settings.from_env(), forums=(parse_forum(FORUM),), cache_url=None,
                       forum_budget=DEMO_BUDGET, forum_budget_10s=0)
    app = create_service_app(settings, transport=LocalCopy())
    app.config["FORUM_NOTE"] = NOTE
    return app
