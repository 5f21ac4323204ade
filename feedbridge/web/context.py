"""The request's resources: the app's `FeedService` for this request (one accessor), serving its `Caller`
(its deadline, its share of the forum's budget and its slot), made at the request's start and ended at its
teardown. Flask's `g` holds it, as flaskr's `get_db` holds its connection.

Who the client is, for its share of a forum's budget and of the CPU: the address that reached the first
proxy we trust. `FEEDBRIDGE_TRUSTED_HOPS` says how many proxies stand in front (a PaaS router is one), and
Werkzeug's `ProxyFix` (`client_addresses`) replaces `REMOTE_ADDR` with the `X-Forwarded-For` entry that
many places from the right: the one the outermost trusted proxy appended, from the peer it saw. Whatever
the client wrote further left is never read, so rotating a made-up leftmost value buys no new share.
gunicorn itself never replaces `REMOTE_ADDR` (its `FORWARDED_ALLOW_IPS` only decides whose
`X-Forwarded-Proto` it believes).

The default is 0, the peer's own address: with no proxy in front, trusting one hop would let every
client name itself by sending the header, and so spend the whole forum budget alone; behind a router,
0 only makes all clients one client, which spends less of the forum, never more. Set it to the number
of proxies that append to the header (1 on Heroku, Render, Fly.io and the like), and no higher: one
hop too many takes a value the client wrote.

An IPv6 client is its prefix, not its address (`client_of`, `FEEDBRIDGE_IPV6_PREFIX`, /64 by default): a
subscriber's line is given a /64 or more, so every address of it is one client, or rotating addresses
within it would buy a new share of the forum, of the CPU and of the connections with every request.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import TYPE_CHECKING

from flask import current_app, g, request
from werkzeug.middleware.proxy_fix import ProxyFix

from feedbridge.feeds.service import FeedService

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication


def service() -> FeedService:
    """The service `create_app` built, serving this request (`open_scope`); every view reaches the cache and
    the forums through it. Before the request's scope is open (an error page for a request refused by an
    earlier `before_request`), the app's own, which serves no request and reads with no deadline."""
    svc: FeedService = g.get("service") or current_app.extensions["feedbridge"]
    return svc


def open_scope() -> None:
    """At the request's start: the service serving it, with its `Caller` (who the client is, deadline, share
    of the forum's budget, slot), the one value every read the request makes is handed, however many service
    calls it makes. The one place a request's client is made from its address: the budget's share and the
    CPU allowance (`client`) both read it from here."""
    svc: FeedService = current_app.extensions["feedbridge"]
    g.service = svc.serving(client_of(request.remote_addr or "-", svc.settings.ipv6_prefix))


def client() -> str:
    """Who the current request is as a client (`client_of` its address), as `open_scope` made it."""
    caller = service().caller
    assert caller is not None, "open_scope runs before every view"
    return caller.client


def close_scope(_exc: BaseException | None = None) -> None:
    """At the request's teardown: its slot goes back, and pool work it left behind fetches nothing more."""
    svc: FeedService | None = g.pop("service", None)
    if svc is not None and svc.caller is not None:
        svc.caller.end()


def client_addresses(app: WSGIApplication, trusted_hops: int) -> WSGIApplication:
    """`app` with `REMOTE_ADDR` taken from the trusted hop of `X-Forwarded-For` (see the module docstring);
    `app` itself when no proxy is trusted. Only the address: scheme, host and prefix stay the server's."""
    if trusted_hops <= 0:
        return app
    return ProxyFix(app, x_for=trusted_hops, x_proto=0, x_host=0, x_port=0, x_prefix=0)


NOT_AN_ADDRESS = "-"
"""The one client every peer that is no IP address is."""
MAX_ADDRESS = 64
"""Longer than any IPv6 address with a zone and IPv4 tail; longer text is no address, and is not parsed."""


@lru_cache(maxsize=1024)
def client_of(address: str, ipv6_prefix: int) -> str:
    """Who `address` is as a client: an IPv4 address itself, an IPv6 one its `ipv6_prefix` network
    (`2001:db8:1:2::/64`), an IPv4-mapped IPv6 address the IPv4 one; anything else (a Unix socket's empty
    peer, or a hop of `X-Forwarded-For` that is no address, up to 8 KB of a client's text when
    `FEEDBRIDGE_TRUSTED_HOPS` counts one proxy too many) is the one client `NOT_AN_ADDRESS`, so such text
    neither buys a share per value nor fills the budgets' and the allowance's tables with kilobytes each.
    Memoised within a fixed size: a flood of addresses costs a bounded table."""
    if len(address) > MAX_ADDRESS:
        return NOT_AN_ADDRESS
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return NOT_AN_ADDRESS
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, ipv6_prefix), strict=False))
    return str(ip)
