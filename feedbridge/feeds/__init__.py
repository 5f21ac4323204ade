"""Feeds: a request becomes a `FeedSpec` (`request/`), the service reads what it needs (`sources/`, through
`admission/`), chooses the topics (`select/`) and renders them, with the cache (`service.py`).
"""
