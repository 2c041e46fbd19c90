"""lasagne_bn: Theano/Lasagne batch normalization on PyTensor 3."""

__version__ = "0.1.0"
