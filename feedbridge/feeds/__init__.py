"""Feeds: a request becomes a `FeedSpec` (`spec`), topics are chosen (`filters`, `query`), first posts are made
safe (`enrich`), and `service` runs the whole path with the cache.
"""
