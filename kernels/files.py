"""Writing a file so that no reader ever sees half of it: the one atomic-write helper
(the kernel cache and every command's output use it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path | str, data: bytes | str, make_parents: bool = False) -> None:
    """Write `data` to a temporary file beside `path` and rename it into place, with the
    mode the umask gives a new file; raises OSError, leaving no temporary file behind.
    The directory must exist unless `make_parents` (caches)."""
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:32]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:  # includes KeyboardInterrupt: never leave the temporary file
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask (reading it means setting it; put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
