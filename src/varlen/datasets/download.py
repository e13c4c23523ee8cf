"""Verified downloads: a file is either complete and checked, or absent, and a failure says what to do.

Every failure (offline, HTTP error, timeout, checksum mismatch) raises
`DownloadError` naming the URL, the file it was meant for and where to put
a copy fetched by hand.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

from varlen import notices
from varlen.errors import DownloadError
from varlen.storage.cache import atomic_write, file_hash

__all__ = ["checksum_mismatch", "download_url"]


def checksum_mismatch(path: str | Path, checksum: str) -> str | None:
    """Why `path` does not match `checksum` (`"sha256:<hex>"` or `"md5:<hex>"`), or None if it does."""
    algorithm, _, expected = checksum.partition(":")
    actual = file_hash(path, algorithm)
    if actual == expected.lower():
        return None
    return f"its {algorithm} is {actual}, expected {expected} (a corrupt download, or the remote file changed)"


def download_url(url: str, destination: str | Path, checksum: str | None = None, timeout: float = 60) -> Path:
    """Download `url` to `destination` and verify it; a file already there that verifies is kept.

    Raises:
        DownloadError: the download failed or does not match `checksum`; nothing is left at
            `destination`.
    """
    destination = Path(destination)
    if destination.is_file() and checksum is not None and checksum_mismatch(destination, checksum) is None:
        return destination

    def fetch(tmp: Path) -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
                shutil.copyfileobj(response, out)
        except (urllib.error.URLError, OSError) as error:  # HTTPError is a URLError; timeouts are OSErrors
            raise DownloadError(url, destination, f"{type(error).__name__}: {error}") from error
        if checksum is None:
            notices.warn(f"{url}: no known checksum, the download is not verified")
        elif (why := checksum_mismatch(tmp, checksum)) is not None:
            raise DownloadError(url, destination, why)

    return atomic_write(destination, fetch)
