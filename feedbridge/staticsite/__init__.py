"""The static-site build: `feedbridge build --config` writes feeds, an index page and OPML for a static host."""
