"""``theano.tensor.nnet.bn``: Theano 1.0's batch normalization, on :mod:`lasagne_bn.ops`.

Same signatures, defaults and results (``axes='per-activation'`` by
default, the unbiased running variance, epsilon > 0).  The op classes are
lasagne_bn's; Theano's abstract-op names are aliases of them.
"""

from __future__ import annotations

from lasagne_bn.ops import (
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
    batch_normalization,
    batch_normalization_test,
    batch_normalization_train,
)

AbstractBatchNormTrain = BatchNormTrain
AbstractBatchNormInference = BatchNormInference
AbstractBatchNormTrainGrad = BatchNormTrainGrad

__all__ = [
    "AbstractBatchNormInference",
    "AbstractBatchNormTrain",
    "AbstractBatchNormTrainGrad",
    "batch_normalization",
    "batch_normalization_test",
    "batch_normalization_train",
]
