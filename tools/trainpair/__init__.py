"""Training of the built-in target + DFlash 2 draft pair, one module per stage (see ``cli``).

Run as ``python tools/train_pair.py`` (or ``python -m trainpair`` from ``tools/``)."""
