import os
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from varlen.storage.paths import data_root

# every property test draws the same examples each run (CI reproducible, as test_properties' own settings do);
# VARLEN_HYPOTHESIS_RANDOM=1 explores new ones
settings.register_profile("varlen", derandomize=os.environ.get("VARLEN_HYPOTHESIS_RANDOM") != "1")
settings.load_profile("varlen")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

SHARED_DATA = data_root()  # $VARLEN_DATA, else the shared/data folder beside the checkout


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real public files ($VARLEN_DATA); tests using them skip cleanly without."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (set VARLEN_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def cache_folder(tmp_path_factory: pytest.TempPathFactory):
    """DataModules without a cache_dir (and the processes the tests start) cache in one fresh folder
    of this session ($VARLEN_CACHE), never the user's; tests about building pass their own."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("varlen-cache")
        patch.setenv("VARLEN_CACHE", str(folder))
        yield folder


#: Python's own SIGINT handler, as the test process started
SIGINT_HANDLER = signal.getsignal(signal.SIGINT)


@pytest.fixture(autouse=True)
def sigint_handler_kept():
    """`litdata.optimize` run in this process (a test's or a module fixture's) leaves LitData's SIGINT handler
    behind (`os._exit(0)`, never restored): a test that interrupts itself would end the test process. Every
    test starts and ends with Python's own."""
    signal.signal(signal.SIGINT, SIGINT_HANDLER)
    yield
    signal.signal(signal.SIGINT, SIGINT_HANDLER)
