"""Lasagne's ``theano_extensions``: alternative 1-D convolutions and padding on PyTensor 3."""
