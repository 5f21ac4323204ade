"""Choose the cache store and the single-flight for this process from the settings."""

from __future__ import annotations

from .cache import Flight, MemoryStore, SingleFlight, Store
from .config import Settings


def make_backends(settings: Settings) -> tuple[Store, Flight]:
    return MemoryStore(settings.cache_max_bytes), SingleFlight()
