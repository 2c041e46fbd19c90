"""The JAX backend: the Ops' implementations for PyTensor's JAX linker.

One module per Op family (``bn``, ``conv``, ``pool``, ``statistics``), each
registering its Ops with PyTensor's ``jax_funcify``.  This package imports
JAX, so nothing imports it at ``import lasagne_bn``:
:func:`lasagne_bn.ops.rewrites.ensure_registered` imports the modules the
first time a graph is compiled for the JAX backend.
"""
