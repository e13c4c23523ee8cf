"""A dataset's object store, read within a time bound: every call ends within the stream's `timeout`
with the file, or a `DataError` naming it, the endpoint and the last error.

LitData's S3 client allows 1000 attempts per request: an unreachable store (a closed port, no network)
kept a process silent for minutes. Here a call makes one request at a time (botocore's connect and read
timeouts: the time left, its own retries off), and one that failed for a reason that may pass (no
connection, a timeout, a 5xx or throttling answer) is logged and made again after a pause that doubles,
until `timeout` seconds have passed since the call began; a reason that will not pass (credentials,
access denied) fails at once. S3 is read with LitData's `S3Client` (the credentials LitData finds),
with boto3 only; other stores (`gs://`, `azure://`...) with LitData's downloader for them, each
request bounded by its own client. An S3 endpoint comes from `storage_options.endpoint_url`, else
from `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` (how MinIO and moto users set it), as boto3 reads it.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

from varlen.errors import DataError

__all__ = ["DEFAULT_TIMEOUT", "bounded", "endpoint", "fetch", "said", "stamp", "storage_options"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: seconds a store call may take before it fails (`stream: {url: ..., timeout: 60}`)
DEFAULT_TIMEOUT = 60.0
#: the pause after a call's first failure, doubled after each, at most LAST_PAUSE_S
FIRST_PAUSE_S, LAST_PAUSE_S = 0.5, 8.0
#: where boto3 reads an S3 endpoint from the environment, the first set wins
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "ResourceNotFoundError"}


def storage_options(url: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """`given` (LitData's `storage_options`), with the environment's S3 endpoint where it names none."""
    options = dict(given or {})
    variable = next((name for name in ENDPOINT_VARIABLES if os.environ.get(name)), None)
    if url.startswith("s3://") and variable and not options.get("endpoint_url"):
        options["endpoint_url"] = os.environ[variable]
    return options


def bounded(options: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """`options` whose botocore `config` makes one request at most `seconds` long to connect and
    to read (a `config` given keeps its other settings)."""
    from botocore.config import Config

    limit = Config(connect_timeout=seconds, read_timeout=seconds, retries={"total_max_attempts": 1})
    given = options.get("config")
    return {**options, "config": given.merge(limit) if given is not None else limit}


def endpoint(url: str, options: Mapping[str, Any]) -> str:
    """The endpoint a store's URL is read from, for messages."""
    if options.get("endpoint_url"):
        return str(options["endpoint_url"])
    if url.startswith("s3://"):
        try:
            return str(_s3_client(options, 1.0).meta.endpoint_url)
        except Exception:  # a client that cannot be built says why when it is used
            pass
    return f"{url.partition('://')[0]}'s default"


def fetch(
    remote: str, target: Path, options: Mapping[str, Any], timeout: float, retried: Callable[[], None] | None = None
) -> bool:
    """`remote` (a file's URL) into `target` within `timeout` seconds; False where the store has no
    such file. `retried` is called at each retry (each is also logged).

    Raises:
        DataError: the store did not serve it in time, or refused it (naming the URL, endpoint, error).
    """
    return _bounded(lambda seconds: _get(remote, target, options, seconds), remote, options, timeout, retried)


def stamp(remote: str, options: Mapping[str, Any], timeout: float) -> str | None:
    """What identifies the content of `remote` in the store (S3: its ETag and size, from a HEAD request),
    None where the store does not say or has no such file (the caller fetches it)."""
    if not remote.startswith("s3://"):
        return None
    return _bounded(lambda seconds: _s3_head(remote, options, seconds), remote, options, timeout, None)


def _bounded(
    call: Callable[[float], T], remote: str, options: Mapping[str, Any], timeout: float, retried: Callable | None
) -> T:
    """`call(seconds left)` made again after each failure that may pass, until `timeout` has passed."""
    deadline, tries = time.monotonic() + timeout, 0
    while True:
        tries += 1
        try:
            return call(max(deadline - time.monotonic(), 0.1))
        except Exception as error:  # the store's client raises its own (botocore, google, azure...)
            where = endpoint(remote, options)
            if not _may_pass(error):
                raise DataError(
                    f"{remote} could not be read from {where} ({said(error)}): check the stream's storage_options "
                    "(endpoint_url, keys) and the store's credentials"
                ) from error
            left = deadline - time.monotonic()
            if left <= 0.05:
                raise DataError(
                    f"{remote} could not be read: the store did not answer within {timeout:g} s (endpoint {where}; "
                    f"{tries} tries, the last: {said(error)}). Check the endpoint (storage_options.endpoint_url or "
                    "AWS_ENDPOINT_URL), the network and the credentials, or give the stream more time (stream: "
                    "{url: ..., timeout: SECONDS})"
                ) from error
            pause = min(FIRST_PAUSE_S * 2 ** (tries - 1), LAST_PAUSE_S, left)
            log.warning(
                "%s could not be read (%s; endpoint %s): trying again in %.1f s (%.0f s of %g s left)",
                remote, said(error), where, pause, left, timeout,
            )  # fmt: skip
            if retried is not None:
                retried()
            time.sleep(pause)


def _get(remote: str, target: Path, options: Mapping[str, Any], seconds: float) -> bool:
    """One request for `remote` into `target` (False: not in the store); a partial file is removed."""
    try:
        if remote.startswith("s3://"):
            bucket, _, key = remote[len("s3://") :].partition("/")
            body = _s3_client(options, seconds).get_object(Bucket=bucket, Key=key)["Body"]
            with closing(body), open(target, "wb") as out:
                shutil.copyfileobj(body, out, 2**20)
        else:
            from litdata.streaming.downloader import get_downloader

            get_downloader(remote, str(target.parent), [], dict(options)).download_file(remote, str(target))
    except Exception as error:
        target.unlink(missing_ok=True)
        if _not_found(error):
            return False
        raise
    return target.is_file()  # LitData's S3 reader drops some "not found" answers itself


def _s3_head(remote: str, options: Mapping[str, Any], seconds: float) -> str | None:
    bucket, _, key = remote[len("s3://") :].partition("/")
    try:
        head = _s3_client(options, seconds).head_object(Bucket=bucket, Key=key)
    except Exception as error:
        if _not_found(error):
            return None
        raise
    return f"{head.get('ETag')} {head.get('ContentLength')}"


def _s3_client(options: Mapping[str, Any], seconds: float) -> Any:
    """A boto3 S3 client of LitData's (its credentials, as it reads its own files), one request bounded."""
    from litdata.streaming.client import S3Client

    return S3Client(storage_options=bounded(options, seconds)).client


def _not_found(error: Exception) -> bool:
    """Whether a store's error says the file does not exist."""
    code = str((getattr(error, "response", None) or {}).get("Error", {}).get("Code"))
    return isinstance(error, FileNotFoundError) or code in _NOT_FOUND or type(error).__name__ in _NOT_FOUND


def _may_pass(error: Exception) -> bool:
    """Whether a failed request may succeed when made again: no connection, a timeout, a 5xx or 429
    answer; not credentials, a refusal or a bad request."""
    status = (getattr(error, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
    if status:
        return int(status) >= 500 or int(status) in (408, 429)
    try:
        from botocore import exceptions as boto
    except ImportError:  # pragma: no cover - boto3 comes with litdata
        return not isinstance(error, (ValueError, TypeError))
    if isinstance(error, boto.BotoCoreError):
        return isinstance(error, (boto.ConnectionError, boto.HTTPClientError, boto.IncompleteReadError))
    return not isinstance(error, (ValueError, TypeError))


def said(error: Exception) -> str:
    """An error's type and first line (a store client's message can run to hundreds of lines)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
