"""The grid the precision risk proxy is calibrated on: data distributions and graphs.

``bench/precision_calibration.py`` measures every cell (graph x distribution x length x
target) on the emulator against float64; the tests hold the proxy to a subset.

Example:
    >>> import aneforge as af
    >>> from aneforge.testing.calibration_grid import GRAPHS
    >>> GRAPHS["sum"](af.input((2, 8))).shape
    (2,)
"""

from __future__ import annotations

import numpy as np

from ..graph import api
from ..optimizer.rules import reduce_sum_to_matmul

DISTS = {
    "N(0,1)": lambda rng, shape: rng.standard_normal(shape),
    "N(1,1)": lambda rng, shape: rng.standard_normal(shape) + 1.0,
    "U(0,1)": lambda rng, shape: rng.random(shape),
}

GRAPHS = {
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1),
    "square.sum": lambda x: x.square().sum(-1),
    "abs.sum": lambda x: x.abs().sum(-1),
    "relu.sum": lambda x: x.relu().sum(-1),
    "exp.sum": lambda x: (x * 0.5).exp().sum(-1),
    "sigmoid.sum": lambda x: x.sigmoid().sum(-1),
    "softplus.sum": lambda x: x.softplus().sum(-1),
    "softmax": lambda x: api.softmax(x),
    "layer_norm": lambda x: api.layer_norm(x),
    "rms_norm": lambda x: api.rms_norm(x),
    "l2_norm": lambda x: api.l2_norm(x),
    "x@ones": lambda x: x @ np.ones((x.shape[-1], 1)),
    "sum->matmul": lambda x: reduce_sum_to_matmul(x.sum(-1)),
}
