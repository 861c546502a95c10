"""The AMD XDNA NPU backend: ``xrt.py`` (the ``xrt`` backend, the only module that imports pyxrt),
``layout.py`` (NPU generations, kernel manifests, launch plans), ``emulator.py`` (the bit-exact emulator of
a launch) and ``probe.py`` (is there a usable NPU here?)."""
