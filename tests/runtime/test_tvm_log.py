"""TVM's C++ notices that say nothing to a gdp user (a gather built without bounds checks, which
gdp checks itself; a failed import's builder) are dropped from stderr while gdp imports and
lowers; every other line comes through."""

from __future__ import annotations

import os

import numpy as np

from gdp.runtime.backends.tvm.tvm_log import TVM_NOTICES, tvm_notices_dropped


def test_notices_are_dropped_and_other_lines_kept(capfd):
    with tvm_notices_dropped():
        os.write(2, b"before\n")
        os.write(2, f"[12:00:00] transform.h:1261: Warning: {TVM_NOTICES[0]}. Make sure\n".encode())
        os.write(2, b"after\n")
    _, err = capfd.readouterr()
    assert err == "before\nafter\n"


def test_a_first_gdp_cv2_call_prints_nothing(capfd, tmp_path, monkeypatch):
    # A resize compiles gathers (TOPI's "fast" take, whose notice TVM prints on each): a new
    # cache, so that it compiles here.
    import gdp.cv2 as cv2
    from gdp.cv2 import engine

    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path))
    engine.clear_cache()
    image = np.random.default_rng(0).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    capfd.readouterr()
    cv2.resize(image, (20, 11), interpolation=cv2.INTER_CUBIC)
    out, err = capfd.readouterr()
    assert out == "" and "Fast mode" not in err and "BlockBuilder" not in err, err
