"""feedbridge: Atom, RSS and JSON Feed for Discourse forums, read from their Markdown topic lists."""

__version__ = "0.1.0"
PROJECT_URL = "https://github.com/feedbridge/feedbridge"
USER_AGENT = f"feedbridge/{__version__} (+{PROJECT_URL})"
