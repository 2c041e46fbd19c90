"""Tests of lasagne_bn.ops; a package, so its modules may share basenames with tests/layers."""
