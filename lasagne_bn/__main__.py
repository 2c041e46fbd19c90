"""``python -m lasagne_bn``: the same as the ``lasagne-bn`` command."""

import sys

from lasagne_bn.cli import main

sys.exit(main())
