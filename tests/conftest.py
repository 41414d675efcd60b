import os

# Before TensorFlow or gdp load: quiet logs, and a private compile cache for the whole run, so tests
# never read or write the user's ~/.cache/gdp. One cache for the run, shared by pytest-xdist's
# workers (they inherit the controller's environment, GDP_TEST_RUN included): a kernel or program
# is compiled once a run, not once a worker (two workers compiled the same hand kernels and
# programs side by side, minutes of CI). The process that named it removes it, last.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# (a worker's is its controller's; the controller's, or a run's without workers, its own pid)
os.environ["GDP_TEST_RUN"] = (
    os.environ.get("GDP_TEST_RUN", str(os.getpid()))
    if "PYTEST_XDIST_WORKER" in os.environ
    else str(os.getpid())
)
os.environ["GDP_CACHE_DIR"] = os.path.join(
    os.environ.get("PYTEST_TMPDIR", "/tmp"), f"gdp-test-cache-{os.environ['GDP_TEST_RUN']}"
)

import numpy as np
import pytest
import skimage.data


@pytest.fixture(scope="session")
def photos() -> list[np.ndarray]:
    """Real photos shipped with scikit-image, uint8 HWC RGB, three different sizes."""
    return [skimage.data.astronaut(), skimage.data.coffee(), skimage.data.chelsea()]


def pytest_unconfigure(config):
    # In the controller (or a run without workers), after every worker has finished.
    if os.environ["GDP_TEST_RUN"] == str(os.getpid()):
        import shutil

        shutil.rmtree(os.environ["GDP_CACHE_DIR"], ignore_errors=True)
