"""Writing outputs so that an interrupted or failed run leaves nothing half-written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes | str) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:  # includes KeyboardInterrupt: never leave the temp file
        Path(tmp).unlink(missing_ok=True)
        raise
