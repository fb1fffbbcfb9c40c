"""The ANE numerics emulator: fp16 kernels, the matmul backends and the executors.

The contract it implements is written down in ``docs/numerics.md``.
"""
