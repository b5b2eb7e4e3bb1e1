"""Atomic file writes (temp file in the same folder, fsync, rename), shared by envs and training.

The temp file is created the way ``open(path, "w")`` creates a file (mode ``0o666`` less the umask),
and a replaced file keeps its own mode, so an atomic write leaves the permissions a plain write would.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def _create_temp(path: Path) -> tuple[Path, int]:
    """Open a new temp file next to ``path``, created with mode 0o666 so the umask applies as for open()."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temp file next to {path}")


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; best effort (some filesystems refuse to fsync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temp file in the same folder, fsync, rename.

    A crash leaves either the old file or the new one, never a half-written file. A new file gets
    ``0o666 & ~umask``; a replaced file keeps its mode.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        keep_mode: int | None = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        keep_mode = None
    tmp, fd = _create_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if keep_mode is not None:
                os.fchmod(fh.fileno(), keep_mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; see :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def current_umask() -> int:
    """The process umask: from ``/proc/self/status`` where Linux has it (no window in which another
    thread would create a file under a wrong umask), else by setting it and putting it back."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_temp_dir(parent: str | os.PathLike, prefix: str) -> Path:
    """A new temp folder in ``parent`` with the mode ``mkdir`` would give (``0o777 & ~umask``), not the
    ``0o700`` of ``tempfile.mkdtemp``: it becomes the published folder once renamed."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(tmp, 0o777 & ~current_umask())
    return tmp


def publish_dir(final: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Write a folder atomically: ``write(tmp)`` fills a temp folder beside ``final``, which then takes
    ``final``'s place by renames only. An existing ``final`` is first renamed aside (``.<name>.previous``) and
    removed once the new folder is in place, so a kill at any point leaves the old folder or the new one whole
    (a kill between the two renames leaves the old one at ``.<name>.previous``); on an error the temp folder is
    removed and ``final`` is left as it was."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    previous = final.parent / f".{final.name}.previous"
    tmp = make_temp_dir(final.parent, f".{final.name}.")
    moved_aside = False
    try:
        write(tmp)
        if final.exists():
            if previous.exists():  # left by a run killed after its own move aside
                shutil.rmtree(previous)
            os.replace(final, previous)
            moved_aside = True
        os.replace(tmp, final)
    except BaseException:
        if moved_aside and not final.exists():
            os.replace(previous, final)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(previous, ignore_errors=True)
    return final


def set_plain_write_modes(root: str | os.PathLike) -> None:
    """Give every file under ``root`` the mode a plain ``open(path, "w")`` would (``0o666 & ~umask``)
    and every folder ``0o777 & ~umask``; for trees written by libraries that create files ``0o600``
    (safetensors) before they are renamed into place."""
    mask = current_umask()
    for dirpath, _, filenames in os.walk(root):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o666 & ~mask)
