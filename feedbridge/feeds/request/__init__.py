"""The request grammar: what a feed URL, a CLI command or a static config's entry asks for (`spec.FeedSpec`),
read through the one table of feed parameters (`params`), any forum URL turned into a feed path (`urls`), and
signed URLs (`signing`). Pure: nothing here reads a forum."""
