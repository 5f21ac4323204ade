"""Cache and admission: the one cache-or-stale policy (`policy`), who asks (`callers`: the request's deadline
and slot, the pool) and what they may spend (`budget`: the forums' budgets and a client's share), the one door upstream
(`gate`: a forum's Retry-After, the slot, the budget, a batch run's pace), and the CPU a request spent (`cpu`)."""
