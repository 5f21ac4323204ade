"""Reading Discourse: its Markdown and JSON topic lists, topic pages and categories directory, as pure functions
from text to models.
"""
