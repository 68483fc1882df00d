"""Reading inputs and writing outputs: every failure one AutoconfigError naming the
file, and nothing half-written left behind.

One rule for outputs, shared by every command: the output's directory must exist
(a mistyped directory is refused with its path, never created silently); only the
user cache makes its own directories. Files get the mode the umask gives a new file,
as a shell redirection would.
"""

from __future__ import annotations

from pathlib import Path

from autoconfig.errors import AutoconfigError
from kernels import files


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
    """Write `data` to `path` atomically (`kernels.files.write_atomically`); the
    directory must exist unless `make_parents` (caches)."""
    check_output(path, make_parents)
    try:
        files.write_atomically(path, data)
    except OSError as err:
        raise AutoconfigError(f"cannot write {path}: {err.strerror}") from None


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
