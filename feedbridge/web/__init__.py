"""The web layer: the Flask factory, feed views, the cached-hit fast path, the front page, templates, static
files and gunicorn settings.
"""
