"""Personal feeds: a member's scope (the sealed token in their feed URLs, their own lists, a refused key told
apart from a refused page: `personal`) and the User API key handshake that connects them (`handshake`)."""
