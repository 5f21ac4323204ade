"""Selection: which topics a feed keeps (`filters`, with the keyword language of `query`,
and the subcategories an excluded category takes with it, `subcategories`) and how a digest
groups them into periods (`digest`). Pure functions of what the sources read."""
