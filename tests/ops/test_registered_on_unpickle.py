"""Unpickling one of our Ops registers its rewrites, as building it does."""

import json
import pickle
import subprocess
import sys

from lasagne_bn.ops.bn import BatchNormTrain
from lasagne_bn.ops.conv import Conv3dGradWeights
from lasagne_bn.ops.matmul import MatMul
from lasagne_bn.ops.pool import DynamicPool, MaxPoolGradGrad


def test_unpickled_ops_register_their_rewrites_in_a_fresh_process():
    ops = [
        BatchNormTrain((0, 2)),
        Conv3dGradWeights(border_mode="half", num_groups=2),
        MaxPoolGradGrad((2, 3)),
        DynamicPool("average_grad", 3, mode="sum"),
        MatMul(),
    ]
    script = (
        "import json, pickle, sys\n"
        "from lasagne_bn.ops.rewrites import registered\n"
        "assert not registered(), registered()\n"
        "ops = pickle.loads(sys.stdin.buffer.read())\n"
        "print(json.dumps([sorted(registered()), [str(op) for op in ops]]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(ops),
        capture_output=True,
        check=True,
    )
    groups, names = json.loads(run.stdout)
    assert groups == ["bn", "conv", "jax", "matmul", "pool"]
    assert names == [str(op) for op in ops]
