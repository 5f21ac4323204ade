"""Write files so that a reader (a static host, a feed reader) never sees a half-written feed, and a static
build never writes outside its output folder.

Inside the output folder every step is taken relative to a folder already opened without following links
(`O_DIRECTORY | O_NOFOLLOW`, then `dir_fd=`): the folders are opened one by one, the temporary file is
created in the last one and renamed onto the target there. A link met on the way is refused, so
`out/keywords -> ../victim` cannot turn `keywords/inductor.atom` into a write outside the folder. This is
race-free where a check of each component with `lstat` before writing is not: a folder swapped for a link
after the check would still be followed by the write, whereas here the write goes into the folder that was
opened, whatever its name points at afterwards. The output folder itself is opened as named (following a
link): it is the config's or the command line's choice, such as a link to the web server's root.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

from feedbridge.errors import UnsafeOutput

_TEMP_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789_"  # tempfile.mkstemp's, so older leftovers match too
TEMP_FILE = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")
"""The name of a temporary file of `write_atomic`: `.NAME.XXXXXXXX.tmp`, beside the file NAME it becomes."""
TEMP_STEM_BYTES = 255 - len(".") - len(".12345678.tmp")
"""What a temporary name holds of its file's name: a file system's names are 255 bytes at most."""
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC
_NO_FOLLOW_DIR = _DIR | os.O_NOFOLLOW


def _no_follow(parent: int, part: str, _shown: str) -> int:
    """`part` opened inside `parent`, a link in its place refused by the system (ELOOP)."""
    return os.open(part, _NO_FOLLOW_DIR, dir_fd=parent)


@contextmanager
def _opened(root: Path, folders: Sequence[str], step: Callable[[int, str, str], int] = _no_follow) -> Iterator[int]:
    """The folder `root/folders...`, each of `folders` opened by `step(parent, part, path so far)` inside the
    one before (by default without following a link), and closed when the `with` ends; an error of a step
    closes what was open."""
    folder = os.open(root, _DIR)
    try:
        for depth, part in enumerate(folders):
            inner = step(folder, part, "/".join(folders[:depth + 1]))
            os.close(folder)
            folder = inner
        yield folder
    finally:
        os.close(folder)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> bool:
    """Replace `path` with `data` by rename; leave it untouched (bytes and mtime) when nothing changed.

    Returns whether the file was written. Keeping unchanged files untouched keeps the ETags and
    Last-Modified of static hosts stable, so readers polling them get 304s. The path is the caller's
    own (`feedbridge build -o FILE`): its folders are created and followed as named.
    """
    target = Path(path)
    if not target.name:  # `.`, `/`: a folder by its very name, where the rename said there was no such file
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file where a folder of it goes: what the system says of a path through a file
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target.parent)) from None
    return write_inside(target.parent, target.name, data)


def write_inside(root: Path, relative: str, data: bytes) -> bool:
    """`write_atomic` of `root/relative`, refusing (`UnsafeOutput`) any folder of `relative` that is a link.

    A link as the file itself is replaced by the new file, never written through: the rename replaces the
    name, not what it points at.
    """
    return write_all_inside(root, [(relative, data)])[0]


def write_all_inside(root: Path, files: Sequence[tuple[str, bytes]]) -> list[bool]:
    """`write_inside` of each of a feed's files (`root/relative`, its bytes), all of them or none: each that
    changed is written whole to its temporary file first, and only then are they renamed into place, so a
    disk that fills up, a quota or a folder where a file goes fails the feed with every file as it was (its
    formats stay in step), where it had replaced the first and kept the rest. Returns, for each, whether it was
    written; an OSError names the file it was for."""
    root.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[int, str, str]] = []  # (folder, name, temporary name)
    written: list[bool] = []
    with ExitStack() as folders:
        try:
            for relative, data in files:
                *parts, name = relative.split("/")
                # the folders are opened here and now, so the step's `relative` is this file's
                folder = folders.enter_context(_opened(
                    root, parts, lambda parent, part, shown: _open_folder(parent, part, shown, relative)))  # noqa: B023
                if _is_folder(folder, name):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), relative)
                written.append(not _unchanged(folder, name, data))
                if written[-1]:
                    try:
                        staged.append((folder, name, _stage(folder, name, data)))
                    except OSError as exc:
                        raise OSError(exc.errno, exc.strerror, relative) from None
            for folder, name, temp in staged:
                os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            staged.clear()
        finally:  # what a failure left staged (a temporary name renamed already is gone: nothing to remove)
            for folder, _name, temp in staged:
                with suppress(OSError):
                    os.unlink(temp, dir_fd=folder)
    return written


def _is_folder(folder: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_inside(root: Path, relative: str, limit: int) -> bytes | None:
    """The first `limit` bytes of the regular file `root/relative` (reached as `write_inside` reaches it), None
    when there is none or it cannot be read: what a rebuild compares itself with (`feed_date`)."""
    *folders, name = relative.split("/")
    try:
        with _opened(root, folders) as folder:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=folder)
            with os.fdopen(fd, "rb") as handle:
                return handle.read(limit) if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else None
    except (OSError, ValueError):
        return None


def is_file_inside(root: Path, relative: str) -> bool:
    """Whether `root/relative` is a file reached without a link among its folders (what `write_inside` would
    replace); never raises, so a feed's failure report (kept or missing) cannot fail itself."""
    *folders, name = relative.split("/")
    try:
        with _opened(root, folders) as folder:
            return stat.S_ISREG(os.stat(name, dir_fd=folder).st_mode)
    except (OSError, ValueError):
        return False


MAX_FOLDERS_SWEPT = 4096
"""Folders of the output folder looked into for leftovers: it holds a site, not a file system."""


def remove_leftovers(root: Path) -> list[str]:
    """Remove the temporary files an interrupted `write_atomic` left (a crash, a kill) in `root` and every folder
    under it, which a static host would otherwise publish: those of feeds since removed from the config too,
    where only the current feeds' folders were swept. Only regular files named as `write_atomic` names them,
    and never through a link (`os.fwalk` from the folder opened, links not followed). Returns the paths
    removed, relative to `root`.

    Two builds into one folder at once are not supported (the docs' cron line takes a lock): this would
    remove the other's file in the making.
    """
    removed: list[str] = []
    try:
        with _opened(root, ()) as top:
            for swept, (path, _folders, files, folder) in enumerate(os.fwalk(".", dir_fd=top, follow_symlinks=False)):
                if swept == MAX_FOLDERS_SWEPT:
                    break
                for entry in files:
                    try:
                        if TEMP_FILE.fullmatch(entry) and stat.S_ISREG(
                                os.stat(entry, dir_fd=folder, follow_symlinks=False).st_mode):
                            os.unlink(entry, dir_fd=folder)
                            removed.append(os.path.normpath(os.path.join(path, entry)))
                    except OSError:
                        pass  # gone meanwhile, or not ours to remove
    except OSError:
        pass  # no output folder yet
    return removed


def _open_folder(parent: int, part: str, shown: str, relative: str) -> int:
    """`part` of `relative` opened inside `parent` without following a link, made when missing; a link or a
    file in its place is `UnsafeOutput`."""
    for _attempt in range(2):
        try:
            return os.open(part, _NO_FOLLOW_DIR, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(part, 0o755, dir_fd=parent)
            except FileExistsError:
                pass  # made meanwhile: open what is there, with the same checks
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                what = "a link" if stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode) \
                    else "not a folder"
                raise UnsafeOutput(f"refusing to write {relative}: {shown} in the output folder is {what}") from None
            raise
    raise UnsafeOutput(f"refusing to write {relative}: {shown} in the output folder keeps changing")


def _unchanged(folder: int, name: str, data: bytes) -> bool:
    """Whether `name` is a regular file (not a link) holding exactly `data`. Opened without blocking: a FIFO in
    its place waited for a writer forever, and the build with it; it is replaced like any file that differs."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=folder)
    except OSError:
        return False  # missing, a link (replaced, not followed), or unreadable: written anew
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        return stat.S_ISREG(info.st_mode) and info.st_size == len(data) and handle.read(len(data) + 1) == data


def _stage(folder: int, name: str, data: bytes) -> str:
    """A temporary file beside `name` holding `data`, whole on disk (fsync), to be renamed onto it; removed if
    it cannot be written whole."""
    # The temporary name adds 14 bytes to the file's: a name near the system's 255 had none, so the part of it
    # the temporary name holds is cut to fit (a character cut in two is dropped); `TEMP_FILE` matches it still.
    stem = os.fsencode(name)[:TEMP_STEM_BYTES].decode("utf-8", "ignore") or "feed"
    for _attempt in range(100):
        temp = f".{stem}.{''.join(secrets.choice(_TEMP_ALPHABET) for _ in range(8))}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600, dir_fd=folder)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary file name", name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), 0o644)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=folder)
        raise
    return temp
