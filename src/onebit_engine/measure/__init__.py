"""Measuring the engine: the end-to-end benchmark and its comparison rules, the staged acceptance probe,
the tuner, memory-bandwidth probes and the provenance every figure carries."""
