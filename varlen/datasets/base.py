"""What every scenario's readers share: missing-data errors, verified downloads, skip reports."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

BAD_INPUT_POLICIES = ("raise", "skip")


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is not where it was looked for; the message says what to fetch and where."""


def file_hash(path: str | Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file, read in chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_checksum(path: str | Path, checksum: str) -> None:
    """Raise if ``path`` does not match ``checksum`` (``"sha256:<hex>"`` or ``"md5:<hex>"``)."""
    algorithm, _, expected = checksum.partition(":")
    actual = file_hash(path, algorithm)
    if actual != expected.lower():
        raise OSError(
            f"{path}: {algorithm} is {actual}, expected {expected}; the download is corrupt or the remote "
            "file changed. Delete it and retry, or point the dataset at a copy you trust."
        )


def download_url(url: str, destination: str | Path, checksum: str | None = None) -> Path:
    """Download ``url`` to ``destination`` and verify it; a file that exists and verifies is kept.

    The file is written under a temporary name and renamed only once complete and verified, so
    a broken download never looks like a dataset.
    """
    destination = Path(destination)
    if destination.is_file() and checksum is not None:
        try:
            verify_checksum(destination, checksum)
            return destination
        except OSError:
            pass  # fetch it again
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=destination.parent, prefix=destination.name, suffix=".part")
    os.close(handle)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out)
        if checksum is None:
            warnings.warn(f"{url}: no known checksum, the download is not verified", stacklevel=2)
        else:
            verify_checksum(tmp, checksum)
        os.replace(tmp, destination)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return destination


@dataclass
class SkipReport:
    """Bad input under a policy: ``"raise"`` at the first one, or ``"skip"`` and count it.

    Nothing is dropped silently: every skip is counted by reason with its first examples, and
    :meth:`warn` says once how many were skipped and why.

    Attributes:
        on_bad: ``"raise"`` or ``"skip"``.
        error: the exception type raised under ``"raise"``.
        option: the name of the user's setting for this policy, for the error's hint.
        counts: skips per reason.
        examples: ``"<where>: <reason>"`` of the first skips.
    """

    on_bad: str = "raise"
    error: type[Exception] = ValueError
    option: str = "on_bad"
    counts: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.on_bad not in BAD_INPUT_POLICIES:
            raise ValueError(f"on_bad must be one of {BAD_INPUT_POLICIES}, got {self.on_bad!r}")

    def bad(self, where: str, reason: str) -> None:
        """Raise (naming ``where`` and ``reason``) or count one bad item."""
        if self.on_bad == "raise":
            raise self.error(f"{where}: {reason} (pass {self.option}='skip' to skip and count such input)")
        self.counts[reason] += 1
        if len(self.examples) < 10:
            self.examples.append(f"{where}: {reason}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def warn(self, what: str = "items") -> None:
        """One warning with the number skipped and the first examples."""
        if self.total:
            shown = "; ".join(self.examples[:5])
            warnings.warn(f"skipped {self.total} bad {what}: {shown}", stacklevel=2)
