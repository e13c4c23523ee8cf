"""A command's help (`varlen fit --help`, `varlen fit --data.help CLASS`) printed from the cache folder.

Building it takes LightningCLI, and Lightning's import alone (torchmetrics, transformers and SciPy behind it)
takes seconds; the text is the same as long as the installed packages, varlen's own files, the terminal's width
and the data folder are. So the first answer is saved, under a key made of all of those, and printed from there
the next time, before anything heavy is imported. Another install or an edited file makes another key; the old
answers are removed when a new one is saved.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from varlen.cli.commands import LIGHT, SUMMARIES

__all__ = ["install_key", "is_help", "printed", "recorded"]

#: environment variables that change a help text: the cache and data folders, the width, jsonargparse's settings
_ENVIRONMENT = ("VARLEN_", "JSONARGPARSE_", "COLUMNS", "LINES")


def is_help(argv: Sequence[str]) -> bool:
    """`COMMAND -h`, `COMMAND --help` or `COMMAND --GROUP.help CLASS`, and nothing else: an answer that
    depends on nothing but the installed packages (a config or another argument could change it)."""
    if len(argv) < 2 or argv[0] not in SUMMARIES or argv[0] in LIGHT:
        return False
    rest = list(argv[1:])
    if rest in (["-h"], ["--help"]):
        return True
    flag = rest[0].split("=")[0]
    named = len(rest) == (1 if "=" in rest[0] else 2)
    return flag.startswith("--") and flag.endswith(".help") and named


def printed(argv: Sequence[str]) -> bool:
    """Print the saved answer to `argv`, if there is one (True)."""
    try:
        text = _path(argv).read_text(encoding="utf-8")
    except (OSError, RuntimeError, UnicodeDecodeError):  # none saved, or no home folder to find the cache in
        return False
    sys.stdout.write(text)
    return True


@contextlib.contextmanager
def recorded(argv: Sequence[str]) -> Iterator[None]:
    """Run the command as ever, its output written through, and save what it printed if it ended with status 0
    (a help exits: `SystemExit(0)`)."""
    copy = io.StringIO()
    stdout = sys.stdout
    sys.stdout = _Tee(stdout, copy)
    try:
        yield
    except SystemExit as exit_:
        if exit_.code in (0, None) and copy.getvalue():
            _save(argv, copy.getvalue())
        raise
    finally:
        sys.stdout = stdout


class _Tee(io.TextIOBase):
    """The real stdout (its width, its terminal) that also keeps a copy of what is written."""

    def __init__(self, stream, copy: io.StringIO) -> None:
        self._stream, self._copy = stream, copy

    def write(self, text: str) -> int:
        self._copy.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return self._stream.encoding


def _save(argv: Sequence[str], text: str) -> None:
    """Keep `text` as the answer to `argv`; a cache folder that cannot be written keeps nothing, silently."""
    with contextlib.suppress(OSError, RuntimeError):
        path = _path(argv)
        for other in path.parent.parent.glob("*"):  # the answers of other installs or sources: never read again
            if other != path.parent:
                shutil.rmtree(other, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)  # whole or absent, also for a command started beside this one


def _path(argv: Sequence[str]) -> Path:
    """`<cache folder>/help/<install>/<request>.txt`."""
    from varlen.storage.cache import default_cache_dir
    from varlen.storage.paths import data_root

    request = hashlib.sha256("\0".join(argv).encode()).hexdigest()[:24]
    place = [str(data_root()), str(shutil.get_terminal_size()), sys.stdout.isatty()]
    place += sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(_ENVIRONMENT))
    return default_cache_dir() / "help" / install_key(*place) / f"{request}.txt"


def install_key(*place: object) -> str:
    """A key of this Python, the packages installed on its path (their `*.dist-info` folders name their
    versions), varlen's own source files (an edit in a checkout changes a help) and `place`."""
    digest = hashlib.sha256(f"{sys.version}\0{sys.executable}\0{place}".encode())
    for folder in sys.path:
        with contextlib.suppress(OSError):
            digest.update("\0".join(sorted(n for n in os.listdir(folder or ".") if n.endswith(".dist-info"))).encode())
    package = Path(__file__).resolve().parents[1]
    for root, folders, files in sorted(os.walk(package)):
        folders[:] = [f for f in folders if f != "__pycache__"]
        for name in sorted(f for f in files if f.endswith(".py")):
            stat = os.stat(os.path.join(root, name))
            digest.update(f"{root}/{name}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return digest.hexdigest()[:24]
