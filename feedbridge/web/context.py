"""The request's resources, one accessor each: the app's `FeedService`, and this request's `Caller` (its
deadline, its share of the forum's budget and its slot)."""

from __future__ import annotations

from flask import current_app, g, request

from feedbridge.feeds.cached import Caller
from feedbridge.feeds.service import FeedService


def service() -> FeedService:
    """The service `create_app` built; every view reaches the cache and the forums through it."""
    svc: FeedService = current_app.extensions["feedbridge"]
    return svc


def caller() -> Caller:
    """This request's caller, made once however many service calls the request makes.

    The client is `REMOTE_ADDR` as the WSGI server sets it: gunicorn replaces it from `X-Forwarded-For`
    only for peers in `FORWARDED_ALLOW_IPS`, so a client cannot pick its own share by sending headers.
    """
    if "caller" not in g:
        g.caller = service().caller(request.environ.get("REMOTE_ADDR") or "-")
    made: Caller = g.caller
    return made
