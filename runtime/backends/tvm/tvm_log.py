"""TVM's C++ logging as gdp's user sees it: notices that say nothing to them dropped from
stderr while gdp imports and lowers a model."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

# Lines TVM's C++ code writes to stderr that say nothing to a gdp user. TOPI warns on every
# gather it builds without a bounds check ("fast" mode): gdp builds them so on purpose, after
# relax_import.CheckedIndices has checked each index or proved it inside; and a failed import
# leaves a BlockBuilder behind, which gdp reports as its own CompileError (and falls back).
TVM_NOTICES = (
    "Fast mode segfaults when there are out-of-bounds indices",
    "BlockBuilder destroyed with remaining blocks",
)


@contextlib.contextmanager
def tvm_notices_dropped():
    """stderr (the file descriptor, where TVM's C++ logging writes) held while the block runs,
    then written back without the lines of TVM_NOTICES: everything else comes through, in
    order. Runs under gdp's compile lock; another thread's output meanwhile is held too."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [
                line
                for line in held.read().splitlines(keepends=True)
                if not any(n.encode() in line for n in TVM_NOTICES)
            ]
            if kept:
                os.write(2, b"".join(kept))
