"""feedbridge: Atom, RSS and JSON Feed for Discourse forums, read from their Markdown or JSON topic lists.

The packages are the stages of one request, in the order data flows through them:

    web/ or staticsite/ or cli    a request, a TOML plan or a command line names a feed
      → feeds/spec                 ... which becomes a FeedSpec (forum, list, filters, format)
      → feeds/service              the orchestration: cache or stale copy, single-flight, budgets
          → store/                 what was fetched, parsed and rendered (memory, Redis)
          → upstream/              one bounded HTTP fetch from a configured forum
          → discourse/             the forum's text read into models (pure)
          → feeds/filters, query   which topics the feed keeps (pure)
          → render/                Atom, RSS or JSON Feed bytes (pure)
      → web/                       the response, with validators

`models` (Topic, Listing, Category), `errors` (one hierarchy, each error with its HTTP status) and
`config` (Settings from the environment) are the vocabulary all stages share; `metrics` (Prometheus' counters)
is a leaf the stages that decide an outcome count into. tests/test_layout.py keeps imports running down this
list.
"""

__version__ = "0.2.0"
USER_AGENT = f"feedbridge/{__version__}"
