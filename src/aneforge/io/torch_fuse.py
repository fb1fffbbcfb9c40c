"""Folding eval-mode batch norms into the convolutions before them, as
``torch.onnx.export`` does, so that :func:`~.torch_import.from_torch` and
:func:`~.onnx_import.from_onnx` of the same module give the same program.

torch's TorchScript ONNX exporter runs ``fuseConvBatchNorm``
(``torch/csrc/jit/passes/onnx/eval_peephole.cpp``, called from ``_model_to_graph``
when exporting in eval mode with constant folding on, the default) before aneforge sees
the file. It replaces ``Conv -> BatchNormalization`` by one ``Conv`` whose weight and
bias it computes in float32 with torch ops, in this order::

    scale = bn_weight / sqrt(running_var + eps)
    weight = conv_weight * scale[c]                  (per output channel c)
    bias = (conv_bias - running_mean) * scale + bn_bias    (conv with a bias)
    bias = bn_bias - running_mean * scale                  (conv without one)

It folds only a (non-transposed) ``Conv`` whose output has the batch norm as its one
user, whose weight (and bias, when it has one) and the batch norm's four parameters are
constants (a missing affine weight / bias is a constant 1 / 0 in the ONNX graph), all
float, the batch norm's parameters 1-D of the conv weight's dim 0 and the weight of rank
3 or more. :func:`plan_folds` finds the same pairs in a core-ATen FX graph
(``convolution`` then ``_native_batch_norm_legit_no_training``) and computes the same
float32 values with the same torch ops, so the folded weights are bit for bit the ONNX
file's initializers.

Example:
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    >>> ep = torch.export.export(net, (torch.ones(1, 3, 8, 8),)).run_decompositions()
    >>> env = {s.arg.name: Host(ep.state_dict[s.target].detach().numpy(), s.target)
    ...        for s in ep.graph_signature.input_specs if s.target in ep.state_dict}
    >>> folds = plan_folds(torch, ep.graph, env)
    >>> len(folds), sorted(folds.rewritten)
    (1, ['_native_batch_norm_legit_no_training', 'convolution'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .onnx_values import Host
from .torch_ops import Unavailable

__all__ = ["Folds", "plan_folds"]

CONV = "aten.convolution.default"
BATCH_NORM = "aten._native_batch_norm_legit_no_training.default"


@dataclass
class Folds:
    """The conv + batch norm pairs of one FX graph that are folded.

    Attributes:
        convs: ``{conv node name: (folded weight, folded bias)}`` (float32 Hosts).
        norms: ``{batch norm node name: its conv node name}``.
    """

    convs: dict = field(default_factory=dict)
    norms: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.norms)

    @property
    def rewritten(self) -> set[str]:
        """The names of the FX nodes this fold changes."""
        return set(self.convs) | set(self.norms)

    def conv_args(self, node, args: tuple) -> tuple:
        """``args`` of the conv node ``node`` with its weight and bias folded (as is
        for any other node).

        Example:
            >>> Folds().conv_args(None, (1, 2, 3))
            (1, 2, 3)
        """
        folded = self.convs.get(getattr(node, "name", None))
        if folded is None:
            return args
        return (args[0], *folded, *args[3:])

    def norm_value(self, node, env: dict):
        """The value of a folded batch norm ``node``: its conv's (folded) output, and
        its saved-statistics outputs unavailable; ``None`` for any other node.

        Example:
            >>> Folds().norm_value(None, {}) is None
            True
        """
        conv = self.norms.get(getattr(node, "name", None))
        if conv is None:
            return None
        stats = Unavailable("the saved mean / invstd outputs of a batch norm folded into its conv")
        return (env[conv], stats, stats)


def plan_folds(torch, graph, env: dict) -> Folds:
    """The conv + eval-mode batch norm pairs of the FX ``graph`` that
    ``torch.onnx.export`` folds, with their folded float32 weights and biases.

    ``env`` maps placeholder names to their values (:class:`~.onnx_values.Host` for the
    parameters, buffers and constants); a conv or batch norm reading anything else
    (a user input, a computed weight) is left alone, as the exporter leaves it.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(2, 2, 1, bias=False),
        ...                           torch.nn.BatchNorm2d(2)).eval()
        >>> ep = torch.export.export(net, (torch.ones(1, 2, 4, 4),)).run_decompositions()
        >>> env = {s.arg.name: Host(ep.state_dict[s.target].detach().numpy(), s.target)
        ...        for s in ep.graph_signature.input_specs if s.target in ep.state_dict}
        >>> w, b = plan_folds(torch, ep.graph, env).convs["convolution"]
        >>> w.value.shape, b.value.dtype.name, b.label
        ((2, 2, 1, 1), 'float32', '1.bias')
    """
    folds = Folds()
    for bn in graph.nodes:
        if bn.op != "call_function" or str(bn.target) != BATCH_NORM:
            continue
        conv = bn.args[0]
        if not _is_call(conv, CONV) or len(conv.users) != 1 or conv.args[6]:
            continue  # not a conv's only user, or a transposed conv (ConvTranspose)
        w, b = (_constant(a, env) for a in conv.args[1:3])
        params = [_constant(a, env) for a in bn.args[1:5]]
        if w is None or (conv.args[2] is not None and b is None):
            continue
        if any(p is None for p in params[2:]) or any(
            a is not None and p is None for a, p in zip(bn.args[1:3], params)
        ):
            continue
        folded = _fold(torch, w, b, *params, float(bn.args[6]), _prefix(bn, params))
        if folded is not None:
            folds.convs[conv.name] = folded
            folds.norms[bn.name] = conv.name
    return folds


def _is_call(node, key: str) -> bool:
    return getattr(node, "op", None) == "call_function" and str(node.target) == key


def _constant(arg, env: dict):
    """The Host of a placeholder argument (a parameter, buffer or constant), else None."""
    if getattr(arg, "op", None) != "placeholder":
        return None
    value = env.get(arg.name)
    return value if isinstance(value, Host) and value.recipe is None else None


def _prefix(bn, params) -> str:
    """The batch norm's module path, for the folded bias's label."""
    for p in params:
        if p is not None and "." in p.label:
            return p.label.rsplit(".", 1)[0]
    return bn.name


def _fold(torch, w, b, gamma, beta, mean, var, eps: float, prefix: str):
    """(folded weight, folded bias) as Hosts, or None where the exporter does not fold.

    The exporter's arithmetic, op for op (eval_peephole.cpp, ``fuseConvBatchNorm``):
    ``var.add(eps).sqrt()``, ``scale = gamma.div(that)``, ``w[c].mul(scale[c])``, then
    ``b.sub(mean).mul(scale).add(beta)`` or ``beta.sub(mean.mul(scale))``."""
    vals = [np.asarray(h.value) for h in (w, b, gamma, beta, mean, var) if h is not None]
    if any(v.dtype.kind != "f" for v in vals):
        return None
    conv_w = torch.from_numpy(np.array(w.value))
    mean_t, var_t = (torch.from_numpy(np.array(h.value)) for h in (mean, var))
    c = mean_t.shape[0] if mean_t.dim() == 1 else -1
    one = torch.ones(c, dtype=mean_t.dtype) if gamma is None else None
    zero = torch.zeros(c, dtype=mean_t.dtype) if beta is None else None
    scale_t = one if gamma is None else torch.from_numpy(np.array(gamma.value))
    beta_t = zero if beta is None else torch.from_numpy(np.array(beta.value))
    if (
        any(t.dim() != 1 or t.shape[0] != c for t in (scale_t, beta_t, mean_t, var_t))
        or conv_w.dim() <= 2
        or conv_w.shape[0] != c
    ):
        return None
    with torch.no_grad():
        scale_t = scale_t.div(var_t.add(eps).sqrt())
        conv_w = conv_w.mul(scale_t.reshape(-1, *[1] * (conv_w.dim() - 1)))
        if b is not None:
            bias = torch.from_numpy(np.array(b.value)).sub(mean_t).mul(scale_t).add(beta_t)
        else:
            bias = beta_t.sub(mean_t.mul(scale_t))
    bias_label = b.label if b is not None else f"{prefix}.bias"
    return Host(conv_w.numpy(), w.label), Host(bias.numpy(), bias_label)
