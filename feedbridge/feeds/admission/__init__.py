"""Cache and admission: the one cache-or-stale policy (`policy`), who asks and what they may spend (`callers`:
the request's deadline and slot, the forums' budgets and a client's share, the pool), the one door upstream
(`gate`: a forum's Retry-After, the slot, the budget, a batch run's pace), and the CPU a request spent (`cpu`)."""
