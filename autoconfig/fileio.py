"""Reading inputs and writing outputs: every failure one AutoconfigError naming the
file, and nothing half-written left behind.

One rule for outputs, shared by every command: the output's directory must exist
(a mistyped directory is refused with its path, never created silently); only the
user cache makes its own directories. Files get the mode the umask gives a new file,
as a shell redirection would.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from autoconfig.errors import AutoconfigError


def read_text(path: Path | str, what: str) -> str:
    """The UTF-8 text of `what` (e.g. "profile") at `path`."""
    path = Path(path)
    try:
        return path.read_bytes().decode()
    except IsADirectoryError:
        raise AutoconfigError(f"cannot read {what} {path}: it is a directory") from None
    except OSError as err:
        raise AutoconfigError(f"cannot read {what} {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise AutoconfigError(f"{what} {path} is not UTF-8 text (byte {err.start})") from None


def write_atomically(path: Path | str, data: bytes | str, make_parents: bool = False) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place; the
    directory must exist unless `make_parents` (caches)."""
    path = Path(path)
    check_output(path, make_parents)
    parent = path.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as err:
        raise AutoconfigError(f"cannot write {path}: {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise AutoconfigError(f"cannot write {path}: {err.strerror}") from None
    except BaseException:  # includes KeyboardInterrupt: never leave the temp file
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output(path: Path | str, make_parents: bool = False) -> None:
    """Refuse an output path that cannot be written (a directory, or in a missing
    directory unless `make_parents`): commands check before slow work, not after."""
    path = Path(path)
    if path.is_dir():
        raise AutoconfigError(f"cannot write {path}: it is a directory")
    if make_parents:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise AutoconfigError(f"cannot create directory {path.parent}: {err.strerror}") from None
    elif not path.parent.is_dir():
        raise AutoconfigError(f"cannot write {path}: directory {path.parent} does not exist")


def _umask() -> int:
    """The process umask (reading it means setting it; put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
