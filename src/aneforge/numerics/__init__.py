"""fp16-aware numerics built as graphs: paired fp16 (:mod:`.paired`), FFTs (:mod:`.fft`),
linear algebra (:mod:`.linalg`) and special functions (:mod:`.special`).

Weight compression, which the IR itself needs, is :mod:`aneforge.compression`.
"""
