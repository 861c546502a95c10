"""Reading a JSON file with every failure named: the file, what it was meant to be, and the way out."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import CheckpointError


def read_json(path: "str | Path", what: str, *, error: type = CheckpointError,
              redo: str = "the file is corrupt - copy it again") -> Any:
    """The parsed file, or ``error`` naming ``path`` and ``what`` for bytes that cannot be read, are not
    UTF-8 or are not JSON. NaN / Infinity parse (as Python does); callers that hold values check them."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise error(f"{path}: {what} cannot be read ({e.strerror or e}); give a readable file") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: {what} is not UTF-8 text (byte {e.start}: {e.reason}); {redo}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise error(f"{path}: {what} nests too deeply to be one (JSON past Python's recursion limit); {redo}") from None
    except ValueError as e:  # JSONDecodeError, an integer past 4300 digits
        raise error(f"{path}: {what} is not valid JSON ({e}); {redo}") from None
