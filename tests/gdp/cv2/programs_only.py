"""Eager gdp.cv2 calls through their compiled programs, as graph mode and the other targets run
them, rather than gdp.runtime's hand kernels."""

from gdp.cv2 import common


def programs_only(monkeypatch) -> None:
    """From here on in the test, no call takes a hand kernel: common.on_host says no, and so
    does common.plain_image, the short paths' test (the C one reads the array's struct, not
    on_host)."""
    monkeypatch.setattr(common, "on_host", lambda *arrays, **kwargs: False)
    monkeypatch.setattr(common, "plain_image", lambda *arrays, **kwargs: False)
