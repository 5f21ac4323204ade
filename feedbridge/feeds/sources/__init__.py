"""Sources: everything a feed is read from, through one way of reading (`reads.Read`: a scope, live or from
cached copies only) over Markdown or JSON (`dialects`, chosen per forum by `detect`): list pages (`lists`),
topic pages for content=full (`topic_pages`), the categories directory (`directory`), the forum's basic info
(`identity`), post feeds and the one reader of a topic's /t/ID.json (`post_feeds`), and what a Markdown list
lacks that its JSON twin gives (`figures`)."""
