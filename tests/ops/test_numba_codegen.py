"""The Numba wrappers' cache keys cover every source that writes their code."""

from __future__ import annotations

from hashlib import sha256
from pathlib import Path

from lasagne_bn.ops import validation
from lasagne_bn.ops.numba import _codegen, bn, conv, pool

HERE = Path(_codegen.__file__)


def _hash(*paths) -> str:
    return sha256(b"".join(Path(p).read_bytes() for p in paths)).hexdigest()[:16]


def test_versions_hash_kernels_registrations_and_codegen():
    # _codegen.py writes part of every wrapper (entry-point calls, checks,
    # parameter vectors): an edit there must change every key.
    for module, kernels in ((conv, "conv_kernels"), (pool, "pool_kernels")):
        expected = _hash(HERE.with_name(f"{kernels}.py"), module.__file__, HERE)
        assert module.ENTRY_POINTS.version == expected
    expected = _hash(HERE.with_name("bn_kernels.py"), bn.__file__, validation.__file__, HERE)
    assert bn.ENTRY_POINTS.version == expected
