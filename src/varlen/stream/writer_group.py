"""`litdata.optimize` run in a process group of its own, so that a failed or interrupted `varlen optimize`
leaves no process running.

LitData runs its writers from the process that calls it. When a writer fails (a full disk) it terminates the
writers but not their own children: a writer's file remover, blocked reading a pipe, stays behind for good; and
its Ctrl-C handler ends the caller with status 0. Here LitData's main loop runs in a forked child that leads a
new process group (a terminal's Ctrl-C reaches this process alone): this process waits for it, noting the
lowest free space of the output's disk meanwhile (a full disk's trace where LitData loses the error), then
ends whatever is left of the group (SIGTERM, then SIGKILL after `GRACE_S`), whether the write succeeded,
failed (`WriteFailed`, with the child's error) or was interrupted. Without `fork` it runs in this
process, as LitData alone does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from varlen.stream.engine import litdata

__all__ = ["GRACE_S", "WriteFailed", "optimize_in_group"]

#: seconds the group's processes get to end after SIGTERM (then after SIGKILL)
GRACE_S = 2.0
#: seconds between two looks at the child and the disk
POLL_S = 0.1
#: bytes of the child's error sent back (the tail of a writer's traceback: where the error is said)
ERROR_BYTES = 16_000
_ERRNO = re.compile(r"\[Errno (\d+)\]")


class WriteFailed(RuntimeError):
    """LitData's writers failed: their error as text, the errno said in it (None: none), and the lowest free
    space of the output's disk seen while they wrote (None: not measured)."""

    def __init__(self, message: str, lowest_free: int | None) -> None:
        super().__init__(message)
        found = _ERRNO.findall(message)
        self.errno = int(found[-1]) if found else None
        self.lowest_free = lowest_free


def optimize_in_group(watch: str | Path, on_poll: Callable[[], None] | None = None, **kwargs: Any) -> int | None:
    """`litdata.optimize(**kwargs)` in a forked child leading its own process group (see the module
    docstring); `watch`: a folder on the output's disk; `on_poll`: called at each look (a progress bar).
    Returns the lowest free bytes seen there.

    Raises:
        WriteFailed: LitData raised, or its process ended otherwise than with status 0.
        KeyboardInterrupt: this process was interrupted (the group is ended first).
    """
    if not hasattr(os, "fork"):
        litdata().optimize(**kwargs)
        return None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(read, write, kwargs)
    os.close(write)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # the child does it too: whichever runs first, no writer starts outside the group
    lowest, status = None, None
    try:
        while status is None:
            done, waited = os.waitpid(pid, os.WNOHANG)
            status = waited if done else None
            free = _free(watch)
            lowest = free if lowest is None else min(lowest, free if free is not None else lowest)
            if on_poll is not None:
                on_poll()
            if status is None:
                time.sleep(POLL_S)
    finally:
        _end_group(pid, reaped=status is not None)
        message = _drain(read)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise WriteFailed(message or f"LitData's writing process ended with status {code}", lowest)
    return lowest


def _child(read: int, write: int, kwargs: dict[str, Any]) -> None:
    """The forked child: a new process group, LitData's loop, its error (if any) written to `write`."""
    status = 1
    try:
        os.close(read)
        os.setpgid(0, 0)
        litdata().optimize(**kwargs)
        status = 0
    except BaseException as error:
        text = f"{type(error).__name__}: {error}".encode(errors="replace")[-ERROR_BYTES:]
        with contextlib.suppress(OSError):
            os.write(write, text)  # under a pipe's buffer: never blocks, read once the child is gone
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


def _end_group(pgid: int, reaped: bool) -> None:
    """End every process left in the group `pgid` (SIGTERM, then SIGKILL), and reap its leader."""
    for number in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, number)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + GRACE_S
        while True:
            with contextlib.suppress(ChildProcessError):
                reaped = reaped or os.waitpid(pgid, os.WNOHANG)[0] != 0
            if not _alive(pgid) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not _alive(pgid):
            break
    if not reaped:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, 0)


def _alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs, zombies aside (Linux: /proc; else whether the group
    answers a signal at all)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":  # in the group, and no zombie
                return True
    return False


def _drain(read: int) -> str:
    """What the child wrote to the pipe (read without waiting: a writer may still hold its other end)."""
    os.set_blocking(read, False)
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(read, 65536):
            chunks.append(chunk)
    os.close(read)
    return b"".join(chunks).decode(errors="replace")


def _free(folder: str | Path) -> int | None:
    with contextlib.suppress(OSError):
        return shutil.disk_usage(folder).free
    return None
