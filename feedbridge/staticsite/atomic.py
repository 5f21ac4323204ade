"""Write files so that a reader (a static host, a feed reader) never sees a half-written feed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes) -> bool:
    """Replace `path` with `data` by rename; leave it untouched (bytes and mtime) when nothing changed.

    Returns whether the file was written. Keeping unchanged files untouched keeps the ETags and
    Last-Modified of static hosts stable, so readers polling them get 304s.
    """
    target = Path(path)
    try:
        if target.stat().st_size == len(data) and target.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return True
