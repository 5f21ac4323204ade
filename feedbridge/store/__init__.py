"""The store: cache entry types, the in-process store and single-flight, and their Redis counterparts. A leaf: it
imports only models and errors.
"""
