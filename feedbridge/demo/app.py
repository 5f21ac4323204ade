"""The service `serve --demo` runs under gunicorn (`feedbridge.demo.app:create_app()`)."""

from __future__ import annotations

from dataclasses import replace

from flask import Flask

from feedbridge.config import Settings, parse_forum
from feedbridge.demo import FORUM, NOTE, LocalCopy
from feedbridge.web.app import create_app as create_service_app


def create_app() -> Flask:
    """The demo forum only, cached in memory (a shared Redis must not hold the copy's pages as the real
    forum's), read through `LocalCopy`."""
    settings = replace(Settings.from_env(), forums=(parse_forum(FORUM),), cache_url=None)
    app = create_service_app(settings, transport=LocalCopy())
    app.config["FORUM_NOTE"] = NOTE
    return app
