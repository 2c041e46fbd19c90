"""The C backend: C code for the Ops under modes ``C`` and ``CVM``.

The Ops keep their ``c_code`` methods (PyTensor's ``COp`` protocol) and
delegate to these modules, one per Op family (``bn``, ``conv``, ``pool``),
with the code they share in :mod:`.common` and the opt-in BLAS rewrite of
PyTensor's own dense Ops in :mod:`.gemm`.
"""
