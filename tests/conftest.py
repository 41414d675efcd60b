import os

# Before TensorFlow or gdp load: quiet logs, and a private compile cache for the whole run, so tests
# never read or write the user's ~/.cache/gdp.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["GDP_CACHE_DIR"] = os.path.join(
    os.environ.get("PYTEST_TMPDIR", "/tmp"), f"gdp-test-cache-{os.getpid()}"
)

import numpy as np
import pytest
import skimage.data


@pytest.fixture(scope="session")
def photos() -> list[np.ndarray]:
    """Real photos shipped with scikit-image, uint8 HWC RGB, three different sizes."""
    return [skimage.data.astronaut(), skimage.data.coffee(), skimage.data.chelsea()]


@pytest.fixture(scope="session", autouse=True)
def _remove_cache_dir():
    yield
    import shutil

    shutil.rmtree(os.environ["GDP_CACHE_DIR"], ignore_errors=True)
