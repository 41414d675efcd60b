import pytest

from gdp.runtime import launch, separable


@pytest.fixture(params=["small work alone", "every strip"])
def strips(request, monkeypatch):
    """Each kernel split as shipped (a small image's work on the calling thread alone: the
    kernel's serial twin, gdp.runtime.launch), then split into its module's strips whatever the
    size (SERIAL_BYTES 0): a test of sizes that move a kernel's strips runs both. (The
    separable filters keep their strip count in their plans: made again on each side. Their
    own test takes neither: only their 16-bit derivatives run alone, and both sides compiled
    each of their many kernels twice, a minute of CI.)"""
    separable._plan.cache_clear()
    if request.param == "every strip":
        monkeypatch.setattr(launch, "SERIAL_BYTES", 0)
    yield request.param
    separable._plan.cache_clear()
