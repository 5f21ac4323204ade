"""feedbridge as served, but with its memos off: every topic block of a list is read, and every entry built,
on every request.

The cold rows of target 2 fetch the same page on every request, so after the first one every block is
known to the parser's memo (`feedbridge.discourse.listing`) and every entry to the renderer's
(`feedbridge.render.feeds`), as they are when a forum's list is fetched again with no topic changed. This
app gives the other end: a list none of whose topics was seen before.
"""

from bench.micro import forgetful
from feedbridge.discourse import listing
from feedbridge.render import feeds
from feedbridge.web.app import create_app

listing._block_topic = forgetful(listing._block_topic)
feeds._remembered_entry = forgetful(feeds._remembered_entry)
app = create_app()
