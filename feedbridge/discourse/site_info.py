"""Parse a forum's `/site/basic-info.json`: how it presents itself, for a feed's icon, logo and language (its
title and description are not read: a feed's own title names the forum and what it holds).

Core answers it to everyone, login-only forums included (app/controllers/site_controller.rb#basic_info, which
skips `redirect_to_login_if_required`): `logo_url`, `logo_small_url`, `apple_touch_icon_url`, `favicon_url`
(each through `UrlHelper.absolute`), `title`, `description`, `mobile_logo_url` when one is set, and on current
releases `locale` (`SiteSetting.default_locale`: `en`, `pt_BR`, `zh_TW`). An older release leaves out what it
did not have yet, and a picture the forum has none of is `null` or "". Nothing here trusts a type: a field of
the wrong shape is left out, and an answer that is no such object gives None, never an error, since a forum
without it still gets its feeds.
"""

from __future__ import annotations

import logging
import re

from feedbridge.discourse.fields import picture_url
from feedbridge.discourse.json_pages import load_json
from feedbridge.errors import NotAListError
from feedbridge.models import Site

log = logging.getLogger(__name__)

MAX_CHARS = 64 * 1024
"""Core's answer is a few hundred characters: a dozen short fields."""
_EXPECTED = 'expected the forum\'s basic info in JSON ({"title": ..., "logo_url": ...})'
# An IETF tag from core's locale names: a language (ISO 639) and a script (`sr_Latn`) or a region (`pt_BR`).
_LOCALE = re.compile(r"(?P<language>[A-Za-z]{2,3})(?:[_-](?P<sub>[A-Za-z]{4}|[A-Za-z]{2}|[0-9]{3}))?")


def parse_basic_info(text: str | bytes, base_url: str) -> Site | None:
    """The `Site` an answer describes; None when it is no basic info (an error page, a login page, another
    object). Pictures are absolute http(s) URLs (`fields.picture_url`, against `base_url`, the forum's root)."""
    try:
        data = load_json(text, MAX_CHARS, NotAListError, _EXPECTED)
    except NotAListError as exc:
        log.info("no basic info: %s", exc)
        return None
    pictures = {name: picture_url(data.get(name), base_url)
                for name in ("logo_url", "mobile_logo_url", "logo_small_url", "apple_touch_icon_url", "favicon_url")}
    site = Site(
        logo_url=pictures["logo_url"] or pictures["mobile_logo_url"],
        # Core asks for a square small logo and touch icon; a favicon is square too, only smaller.
        icon_url=pictures["logo_small_url"] or pictures["apple_touch_icon_url"] or pictures["favicon_url"],
        favicon_url=pictures["favicon_url"],
        language=language_tag(data.get("locale")),
    )
    return None if site == Site() else site


def language_tag(locale: object) -> str | None:
    """Core's locale name as an IETF language tag (`pt_BR` is `pt-BR`), or None for anything else."""
    if not isinstance(locale, str) or len(locale) > 16 or not (found := _LOCALE.fullmatch(locale.strip())):
        return None
    sub = found["sub"]
    if sub is None:
        return found["language"].lower()
    return f"{found['language'].lower()}-{sub.title() if len(sub) == 4 else sub.upper()}"
