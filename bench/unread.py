"""feedbridge as served, but with the block memo off: every topic block of a list is read on every request.

The cold rows of target 2 fetch the same page on every request, so after the first one every block is
known to the memo (`feedbridge.discourse.listing`), as it is when a forum's list is fetched again with no
topic changed. This app gives the other end: a list none of whose blocks was seen before.
"""

from bench.micro import without_block_memo
from feedbridge.discourse import listing
from feedbridge.web.app import create_app

listing._block_topic = without_block_memo()
app = create_app()
