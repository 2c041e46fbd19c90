"""Which convolution kernels the default mode runs: the tuned ones or their portable twin.

:mod:`.conv_kernels` multiplies in a micro-kernel written in LLVM IR and
tuned on x86-64 (AVX2, AVX-512), the only CPUs it has run on;
:mod:`.conv_blas_kernels` computes the same convolutions and matrix
products with SciPy's BLAS, on any CPU.  The tuned kernels run on x86-64;
every other CPU (ARM: Apple silicon, Graviton) gets the portable ones, and
``LASAGNE_BN_PORTABLE=1`` forces them anywhere (CI runs the convolution
tests so).  The choice is read once, when the registrations are imported.

>>> from lasagne_bn.ops.numba.portable import kernels_module
>>> kernels_module({"LASAGNE_BN_PORTABLE": "1"}, "x86_64")
'conv_blas_kernels'
>>> kernels_module({}, "x86_64"), kernels_module({}, "arm64")
('conv_kernels', 'conv_blas_kernels')
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

#: The environment switch that forces the portable kernels (``1``) or not (``0``).
SWITCH = "LASAGNE_BN_PORTABLE"
TUNED_MACHINES = ("x86_64", "amd64")


def kernels_module(environ: Mapping[str, str] = os.environ, machine: str | None = None) -> str:
    """The convolution kernel module's name for this environment and CPU."""
    value = environ.get(SWITCH, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{SWITCH}={value!r}: expected 1 (portable kernels) or 0 (tuned)")
    if value:
        return "conv_blas_kernels" if value == "1" else "conv_kernels"
    machine = (machine if machine is not None else platform.machine()).lower()
    return "conv_kernels" if machine in TUNED_MACHINES else "conv_blas_kernels"
