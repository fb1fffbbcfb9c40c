"""from_torch folds each eval-mode batch norm into the conv before it exactly where
``torch.onnx.export`` does, with the same float32 arithmetic: the folded weights are
the ONNX file's initializers bit for bit, and both imports give the same program."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402
from torch import nn  # noqa: E402

from aneforge.io import from_onnx, from_torch  # noqa: E402
from aneforge.io.onnx_values import Host  # noqa: E402
from aneforge.io.torch_errors import TorchImportWarning  # noqa: E402
from aneforge.io.torch_fuse import plan_folds  # noqa: E402
from aneforge.testing.program_diff import program_diff, weight_diffs  # noqa: E402


class TwoUsers(nn.Module):
    """A conv whose output feeds the batch norm and a residual add: not folded."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


def _net(kind):
    if kind == "two_users":
        return TwoUsers(), 4
    conv, bn, c = {
        "bias": (nn.Conv2d(4, 8, 3, padding=1), nn.BatchNorm2d(8), 4),
        "no_bias": (nn.Conv2d(4, 8, 3, stride=2, bias=False), nn.BatchNorm2d(8), 4),
        "groups": (nn.Conv2d(4, 8, 3, padding=1, groups=2), nn.BatchNorm2d(8), 4),
        "depthwise": (nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), 8),
        "conv1d": (nn.Conv1d(4, 6, 3, bias=False), nn.BatchNorm1d(6, eps=1e-3), 4),
        "no_affine": (nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8, affine=False), 4),
    }[kind]
    return nn.Sequential(conv, bn, nn.ReLU()), c


KINDS = ["bias", "no_bias", "groups", "depthwise", "conv1d", "no_affine", "two_users"]


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(kind):
        if kind not in cache:
            torch.manual_seed(KINDS.index(kind))
            net, c = _net(kind)
            for m in net.modules():  # non-trivial statistics and affine parameters
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.running_mean.normal_()
                    m.running_var.uniform_(0.05, 3.0)
                    if m.affine:
                        nn.init.normal_(m.weight)
                        nn.init.normal_(m.bias)
            net.eval()
            x = torch.randn(1, c, 9) if kind == "conv1d" else torch.randn(1, c, 10, 10)
            buf = io.BytesIO()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(net, (x,), buf, dynamo=False, opset_version=17,
                                  input_names=["input"])  # fmt: skip
            cache[kind] = (net, x, buf.getvalue())
        return cache[kind]

    return get


def _folds(net, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecation notices
        ep = torch.export.export(net, (x,)).run_decompositions()
    env = {
        s.arg.name: Host(ep.state_dict[s.target].detach().numpy(), s.target)
        for s in ep.graph_signature.input_specs
        if s.target in ep.state_dict
    }
    return plan_folds(torch, ep.graph, env)


@pytest.mark.parametrize("kind", KINDS)
def test_folded_weights_are_the_onnx_initializers_bit_for_bit(models, kind):
    net, x, data = models(kind)
    model = onnx.load_from_string(data)
    ops = [n.op_type for n in model.graph.node]
    folds = _folds(net, x)
    if kind == "two_users":
        assert "BatchNormalization" in ops and len(folds) == 0
        return
    assert "BatchNormalization" not in ops and len(folds) == 1
    (conv,) = [n for n in model.graph.node if n.op_type == "Conv"]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    want_w, want_b = inits[conv.input[1]], inits[conv.input[2]]
    ((got_w, got_b),) = folds.convs.values()
    assert got_w.value.dtype == want_w.dtype == np.float32
    assert got_w.value.shape == want_w.shape and got_b.value.shape == want_b.shape
    assert got_w.value.tobytes() == want_w.tobytes()
    assert got_b.value.tobytes() == want_b.tobytes()


@pytest.mark.parametrize("kind", KINDS)
def test_from_torch_and_from_onnx_give_the_same_program_and_bits(models, kind):
    net, x, data = models(kind)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = from_torch(net, (x,))
    notes = [str(w.message) for w in caught if issubclass(w.category, TorchImportWarning)]
    folded = [m for m in notes if "folded" in m]
    if kind == "two_users":
        assert not folded
    else:
        assert folded == [
            "from_torch: folded 1 batch norm(s) into the convolutions before them in "
            "float32, as torch.onnx.export does"
        ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = from_onnx(data)
    a, b = ours.compile(), theirs.compile()
    assert program_diff(a, b) == []
    assert weight_diffs(a, b) == []
    assert ("batch_norm" in [n.op for n in a.nodes]) == (kind == "two_users")
    feed = x.numpy().astype(np.float16)
    assert np.asarray(a(feed)).tobytes() == np.asarray(b(feed)).tobytes()


def test_a_transposed_conv_and_a_training_batch_norm_are_not_folded():
    net = nn.Sequential(nn.ConvTranspose2d(4, 4, 3), nn.BatchNorm2d(4)).eval()
    assert len(_folds(net, torch.randn(1, 4, 5, 5))) == 0
    net = nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4, track_running_stats=False)).eval()
    assert len(_folds(net, torch.randn(1, 4, 5, 5))) == 0  # batch statistics
