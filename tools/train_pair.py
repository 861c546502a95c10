#!/usr/bin/env python
"""Train the built-in target + DFlash 2 pair (docs/trained-pair.md): the entry script of ``tools/trainpair/``.

    python tools/train_pair.py [--quick] [...]    # --help lists the stages and arguments
"""
import sys

from trainpair.cli import main  # tools/ is sys.path[0] when this file is run as a script

if __name__ == "__main__":
    sys.exit(main())
