"""The one error family of varlen's data layer.

Every reader and DataModule raises one of these for bad or missing input, never a bare
`KeyError`, `FileNotFoundError` or a library's traceback. Each message names the file,
row or sample and says what is wrong; `varlen` (the CLI) prints a `DataError` as that
message alone and exits with status 2.

* `DataError` (a `ValueError`): input that cannot be used.
* `DatasetNotFoundError` (also a `FileNotFoundError`): what is missing, where it was
  looked for, and how to get it, as torchgeo's error of the same name does.
* `DownloadError` (also an `OSError`): a download that failed, with the URL, the file
  it was meant for, and where to put a copy fetched by hand.

`ConfigError` is the command line's: a config or an argument a class refused (`max_tokens=0`), said in one
line that names the class, the argument and where its arguments are listed; `varlen` prints it alone, status 2.
`OneLineParser` is the `argparse` parser of a command's own options, whose errors say the same in one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ConfigError",
    "DataError",
    "DatasetNotFoundError",
    "DownloadError",
    "OneLineParser",
    "data_error_in",
    "raised_chain",
]


class DataError(ValueError):
    """Input that cannot be used; the message names where (file, row, sample) and what is wrong."""


class ConfigError(ValueError):
    """A command's config or argument refused; the message is the one line `varlen` prints (class, argument,
    what is allowed, where to look)."""


class DatasetNotFoundError(DataError, FileNotFoundError):
    """A dataset is not where it was looked for.

    Args:
        what: what is missing, e.g. `"CWRU recordings (*.mat)"`.
        looked: where it was looked for (a path, or several).
        fetch: how to get it, e.g. `"pass download=True"` or `"download <URL> into <folder>"`.
    """

    def __init__(self, what: str, looked: str | Path | Sequence[str | Path], fetch: str) -> None:
        places = [looked] if isinstance(looked, (str, Path)) else list(looked)
        self.what, self.looked, self.fetch = what, [str(p) for p in places], fetch
        super().__init__(f"{what} not found (looked in: {', '.join(self.looked)}). To get it: {fetch}")

    def __reduce__(self):  # picklable across loader workers and DDP ranks, with its arguments
        return type(self), (self.what, self.looked, self.fetch)


class DownloadError(DataError, OSError):
    """A download failed (offline, HTTP error, checksum mismatch).

    Args:
        url: what was fetched.
        destination: the file it was meant to become.
        reason: what went wrong.
    """

    def __init__(self, url: str, destination: str | Path, reason: str) -> None:
        self.url, self.destination, self.reason = url, str(destination), reason
        super().__init__(
            f"downloading {url} to {destination} failed: {reason}. Fetch it by hand and put it at {destination} "
            "(then run again without download=True)"
        )

    def __reduce__(self):
        return type(self), (self.url, self.destination, self.reason)


class OneLineParser(argparse.ArgumentParser):
    """A command's own options (`varlen inspect`, `tune`, `verify`, `index-sizes`), whose errors are one line,
    status 2, as every `varlen` error: argparse's usage is one `--help` away."""

    def error(self, message: str):
        sys.stderr.write(f"varlen: error: {message} ({self.prog} --help lists the options)\n")
        sys.exit(2)


def raised_chain(error: BaseException) -> list[BaseException]:
    """`error` and those it was raised from or while handling, the first raised last."""
    chain: list[BaseException] = []
    while error is not None and all(error is not e for e in chain):
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def data_error_in(error: BaseException) -> DataError | None:
    """The `DataError` that `error` is or was raised from, if any (a library may wrap it: jsonargparse does)."""
    return next((e for e in raised_chain(error) if isinstance(e, DataError)), None)
