"""The C backend: C code for the Ops under modes ``C`` and ``CVM``.

One module per Op family (``bn``, ``conv``, ``pool``) registers its Ops'
code with :func:`lasagne_bn.ops.c_code.register_c_code` when imported (the
Ops take their ``COp`` methods from that registry), with the code they
share in :mod:`.common`; :mod:`.gemm` holds the opt-in BLAS rewrite of
PyTensor's own dense Ops.  :mod:`lasagne_bn.ops` imports this package; the
Op modules never do.
"""

from lasagne_bn.ops.c import bn, conv, gemm, pool  # noqa: F401  (registrations)
