"""Lasagne's ``theano_extensions``: tensor helpers that Theano itself lacked.

``conv`` holds alternative 1-D convolutions, ``padding.pad`` pads a tensor
with a constant; each helper lives in its own submodule, as in Lasagne
(``from lasagne_bn.theano_extensions import padding``).
"""
