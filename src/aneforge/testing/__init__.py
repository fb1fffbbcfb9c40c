"""Fixtures for aneforge's own tests and benchmarks: graph grids and structural checks.

Nothing here is needed to compile, estimate or run a model; it sits above every other
layer so that it may use all of them.
"""
