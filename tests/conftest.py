"""Suite-wide guard: no test leaves PyTensor's default mode changed for the ones after it.

(A ``lasagne_bn_compat.install(theano_flags="mode=...")`` outside ``change_flags`` once
ran every later default-mode test in FAST_COMPILE, silently.)
"""

from __future__ import annotations

import pytensor
import pytest


@pytest.fixture(autouse=True)
def _default_mode_unchanged():
    mode = pytensor.config.mode
    yield
    if pytensor.config.mode != mode:
        changed = pytensor.config.mode
        pytensor.config.mode = mode
        pytest.fail(f"the test left pytensor.config.mode={changed!r} (was {mode!r})")
