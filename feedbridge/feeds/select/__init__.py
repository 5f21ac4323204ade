"""Selection: which topics a feed keeps (`filters`, with the keyword language of `query`) and how a digest
groups them into periods (`digest`). Pure functions of what the sources read."""
