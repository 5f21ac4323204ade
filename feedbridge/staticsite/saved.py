"""Reading a saved topic list from a file, bounded: a static build's `source =` and `feedbridge build FILE`
(and the build's config file itself, under its own bound).

A saved list stands in for a page the forum would have sent, so it gets no more room than that page:
`Settings.max_body_bytes`. A file is read to one byte past the bound and refused beyond it, and only a
regular file is read at all, so `/dev/zero`, a FIFO or a multi-gigabyte file cannot fill the memory or hang
the run.
"""

from __future__ import annotations

import os
import stat

from feedbridge.errors import SavedFileError

_PAGE_BOUND = "the most a forum's page may be (FEEDBRIDGE_MAX_BODY_BYTES)"


def read_saved(path: str | os.PathLike[str], limit: int, shown: str | None = None, bound: str = _PAGE_BOUND) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them; `SavedFileError` otherwise. Its message
    names the file as `shown` (the path, quoted, if not given) and says what `limit` is as `bound`."""
    shown = shown or repr(os.fspath(path))
    if "\x00" in os.fspath(path):
        raise SavedFileError(f"cannot read {shown}: a file name has no NUL character")
    try:
        # Not blocking: opening a FIFO would wait for a writer; for a regular file it changes nothing.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise SavedFileError(f"cannot read {shown}: not a regular file")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SavedFileError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SavedFileError(f"cannot read {shown}: larger than {limit} bytes, {bound}")
    return data
