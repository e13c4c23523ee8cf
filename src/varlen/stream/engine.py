"""LitData, the engine under varlen's streaming: imported on first use, at a tested version only.

varlen uses LitData's storage, `index.json`, chunk writing and decoding, never its order. Those
surfaces moved a lot between releases (0.2.71 -> 0.2.76 changed its item loaders and its default
in-chunk shuffle), so `check_litdata` refuses a release outside the range varlen was tested
with, once, when streaming is first used: a clear message instead of chunks read wrongly.
"""

from __future__ import annotations

import functools
import logging
import re
from types import ModuleType

from varlen._extras import require

__all__ = ["QUIET_LOGGERS", "TESTED_LITDATA", "check_litdata", "litdata", "plain_http_downloads", "quiet_loggers"]

#: the releases varlen's streaming was tested with: `>= first`, `< end` (pyproject's stream extra)
TESTED_LITDATA = ("0.2.76", "0.3")
#: the libraries under a store's reads, whose DEBUG and INFO lines (every request, header and retry)
#: stay off a console that logs at those levels; their warnings still show
QUIET_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "litdata")


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a version string (`0.2.76.dev1` -> `(0, 2, 76)`)."""
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


@functools.cache
def check_litdata() -> None:
    """Refuse a litdata outside `TESTED_LITDATA` (run once, at the first use of streaming).

    Raises:
        MissingExtraError: litdata is not installed (names `pip install 'varlen[stream]'`).
        RuntimeError: naming the version found, the tested range and the install that fixes it.
    """
    require("stream")
    import litdata as module

    quiet_loggers()
    first, end = TESTED_LITDATA
    found = module.__version__
    if not _release(first) <= _release(found) < _release(end):
        raise RuntimeError(
            f"litdata {found} is outside the range varlen's streaming was tested with (>={first},<{end}): "
            f"install a tested release (pip install 'litdata>={first},<{end}') or update varlen.stream"
        )


def quiet_loggers() -> None:
    """Set each logger of `QUIET_LOGGERS` to WARNING, unless a level was set for it: the root
    logger, the user's, keeps its level and handlers."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


def litdata() -> ModuleType:
    """The `litdata` module, checked (`check_litdata`)."""
    check_litdata()
    import litdata as module

    return module


def plain_http_downloads(storage_options: dict | None) -> None:
    """Keep this process's S3 downloads on LitData's boto3 client when the store's endpoint is plain
    `http://` (MinIO, a test server on loopback). varlen fetches chunks itself (`.store`); this
    covers a download LitData still makes (a chunk another process removed from the cache meanwhile).

    LitData 0.2.76 downloads chunks with obstore where it can, and builds obstore's S3 store without
    `allow_http`: every chunk GET from an http endpoint fails (`BadScheme`). LitData itself falls
    back to boto3 in a process where obstore may not run (a fork of one that started it), which is
    what this marks; https endpoints (AWS, GCS, R2) keep obstore.
    """
    endpoint = str((storage_options or {}).get("endpoint_url") or "")
    if endpoint.startswith("http://"):
        from litdata.streaming import downloader

        downloader._OBSTORE_INIT_PID = -1  # no process is the one that may use obstore
