"""The pass registry, the opt levels' pipelines, the shared epilogue and the one loop that
runs them; variants and precision candidates as pipelines."""

from __future__ import annotations

import importlib.util
import inspect
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.analysis.precision import PrecisionError
from aneforge.errors import (
    AneforgeWarning,
    CrossChipFP16Warning,
    DispatchFloorWarning,
    OptionError,
    PreflightWarning,
)
from aneforge.graph.ops.bridge import lrn
from aneforge.graph.rewrite import BIT_IDENTICAL, LOSSY
from aneforge.optimizer import passes as passes_module
from aneforge.optimizer import pipelines as pipelines_module
from aneforge.optimizer.passes import (
    PASSES,
    REQUIRED,
    Option,
    PassResult,
    get_pass,
    pipeline,
    register_pass,
    run_pipeline,
)
from aneforge.optimizer.pipelines import EPILOGUE, LEVELS, PIPELINES, compile_pipeline
from aneforge.optimizer.precision_tune import CANDIDATE_PIPELINES, CANDIDATES
from aneforge.optimizer.tune import TUNE_DEFAULTS, tune
from aneforge.optimizer.variants import COMPRESSED, LOSSLESS, VARIANTS, build_variant
from aneforge.optimizer.variants import LOSSY as LOSSY_VARIANTS
from aneforge.targets.names import resolve_target
from aneforge.testing.verify import verify_graph, verify_program

EXPECTED_IDS = {
    "canon::rules",
    "route::select",
    "route::decompose",
    "compress::weights",
    "compress::int8",
    "accuracy::reduce_sum_to_matmul",
    "accuracy::paired_cancellation",
    "check::preflight",
    "lower::half_period",
    "check::divergence",
    "warn::dispatch_floor",
    "check::precision",
    "variant::pick_by_estimate",
    "tune::measure",
    "tune::precision",
}


@pytest.fixture
def tune_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(tmp_path))  # opt=2 writes a tune cache


@pytest.fixture
def scratch_registry(monkeypatch):
    """Register passes in a copy of the registry, dropped after the test."""
    monkeypatch.setattr(passes_module, "PASSES", dict(PASSES))
    return passes_module.PASSES


def _quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AneforgeWarning)
        return fn(*args, **kwargs)


# ---- the registry ------------------------------------------------------------------------


def test_every_pass_is_a_namespaced_record_with_a_doc():
    assert set(PASSES) == EXPECTED_IDS
    for pass_id, p in PASSES.items():
        namespace, _, name = pass_id.partition("::")
        assert p.id == pass_id and namespace and name and p.doc, pass_id
        assert all(isinstance(o, Option) and o.doc for o in p.options.values()), pass_id
        assert set(inspect.signature(p.fn).parameters) - {"state"} <= set(p.options) or (
            pass_id.startswith("tune::")  # the tuners take **options
        )
        for need in p.requires:
            assert need in PASSES


def test_an_unknown_pass_id_names_it_and_lists_the_registered_ones():
    with pytest.raises(OptionError, match="unknown pass 'canon::nope'") as err:
        get_pass("canon::nope")
    assert all(pass_id in str(err.value) for pass_id in PASSES)
    with pytest.raises(OptionError, match="canon::nope"):
        pipeline("bad", "route::select", "canon::nope")


def test_an_unknown_option_names_it_and_lists_the_valid_ones():
    with pytest.raises(OptionError, match=r"no option 'level'; its options are strict"):
        pipeline("bad", ("check::precision", {"level": 2}))
    with pytest.raises(OptionError, match="its options are none"):
        pipeline("bad", ("canon::rules", {"fast": True}))


def test_option_values_are_checked_and_required_ones_demanded():
    with pytest.raises(OptionError, match=r"strict='yes' is not True or False"):
        pipeline("bad", ("check::precision", {"strict": "yes"}))
    with pytest.raises(OptionError, match="needs the option 'mode'"):
        pipeline("bad", "compress::weights")
    with pytest.raises(OptionError, match="mode='int2' is not one of"):
        pipeline("bad", ("compress::weights", {"mode": "int2"}))
    with pytest.raises(OptionError, match="atol=-1 is not a finite number >= 0"):
        pipeline("bad", ("compress::weights", {"mode": "int8", "atol": -1}))
    ok = pipeline("ok", ("compress::weights", {"mode": "int4"}))
    assert dict(ok.steps[0].options) == {"mode": "int4", "atol": 0.05}  # defaults filled in


def test_a_pass_before_one_it_requires_is_refused():
    assert get_pass("lower::half_period").requires == ("check::preflight",)
    with pytest.raises(OptionError, match="requires check::preflight before it"):
        pipeline("bad", "lower::half_period", "check::preflight")
    pipeline("ok", "check::preflight", "route::select", "lower::half_period")


def test_registration_refuses_duplicates_and_malformed_ids(scratch_registry):
    def fn(state):
        return PassResult()

    register_pass("demo::noop", "does nothing")(fn)
    assert "demo::noop" in scratch_registry
    with pytest.raises(OptionError, match="already registered"):
        register_pass("demo::noop", "again")(fn)
    for bad in ("noop", "demo:noop", "demo::", "::noop", "de mo::noop"):
        with pytest.raises(OptionError, match="namespace::name"):
            register_pass(bad, "bad")
    with pytest.raises(OptionError, match="requires 'demo::missing'"):
        register_pass("demo::other", "x", requires=("demo::missing",))(fn)
    assert REQUIRED is not None


# ---- the levels' pipelines are validated when the module loads ------------------------------


def _load_pipelines_copy():
    """Execute optimizer/pipelines.py afresh as a sibling module (the real one stays)."""
    path = pipelines_module.__file__
    spec = importlib.util.spec_from_file_location("aneforge.optimizer._pipelines_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_level_pipelines_are_built_through_the_validating_constructor(monkeypatch):
    assert _load_pipelines_copy().LEVELS[1].ids == LEVELS[1].ids
    # a level naming a pass that is not registered is an error at import time
    monkeypatch.setattr(passes_module, "PASSES", {k: v for k, v in PASSES.items()
                                                   if k != "route::select"})  # fmt: skip
    with pytest.raises(OptionError, match="unknown pass 'route::select'"):
        _load_pipelines_copy()


def test_one_pipeline_per_level_and_one_epilogue():
    assert {name: p.ids for name, p in PIPELINES.items()} == {
        "O0": (),
        "routes": ("route::select",),
        "O1": ("variant::pick_by_estimate",),
        "O2": ("check::preflight", "lower::half_period", "tune::measure"),
    }
    assert set(LEVELS) == {"routes", 0, 1, 2, "max"} and LEVELS["max"] is LEVELS[2]
    assert EPILOGUE.ids == (
        "check::preflight",
        "lower::half_period",
        "check::divergence",
        "warn::dispatch_floor",
        "check::precision",
    )
    for opt, level in LEVELS.items():
        full = compile_pipeline(opt).ids
        assert full[: len(level.ids)] == level.ids
        assert set(full) == set(level.ids) | set(EPILOGUE.ids)  # nothing runs twice
        assert len(full) == len(set(full))
    assert compile_pipeline(0, compress="int8").ids[0] == "compress::weights"
    strict = compile_pipeline("routes", strict=True).steps[-1]
    assert strict.id == "check::precision" and strict.options["strict"] is True
    with pytest.raises(OptionError, match="opt must be one of"):
        compile_pipeline(3)


# ---- what ran is recorded at every level ----------------------------------------------------


@pytest.mark.parametrize("opt", ["routes", 0, 1, 2, "max"])
def test_every_level_records_its_pipeline_and_the_epilogue(opt, tune_cache):
    x = af.input((2, 64), name="x")
    y = af.slice(x.exp(), (0, 8), (2, 64)).relu()  # a width-offset slice on an A14 tier
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        prog = af.compile(y, opt=opt, target="M1")
        bare = af.compile(y, opt=opt)
    assert prog.report.pipeline == LEVELS[opt].name
    assert prog.report.ran == compile_pipeline(opt).ids  # with a target every pass runs
    target_only = {"check::preflight", "lower::half_period", "check::divergence"}
    assert bare.report.ran == tuple(i for i in compile_pipeline(opt).ids if i not in target_only)
    # every warning the passes gave is in the report and was issued at the caller
    issued = [(w.category, str(w.message)) for w in rec if w.filename == __file__]
    recorded = [(cat, msg) for _, cat, msg in prog.report.warnings + bare.report.warnings]
    assert recorded and all(r in issued for r in recorded)
    assert CrossChipFP16Warning in {cat for cat, _ in recorded}
    assert dict(prog.passes) == dict(prog.report.entries)
    assert {"preflight", "divergence", "precision"} <= set(prog.passes)


def test_opt_2_strict_raises_like_opt_0(tune_cache):
    x = af.input((2, 4096), name="x")
    for opt in (0, 2):
        with pytest.raises(PrecisionError, match="precision risk signal"):
            _quietly(af.compile, x.sum(-1), opt=opt, strict=True)


def test_a_lowering_pass_records_its_warning_and_its_class():
    x = af.input((4, 8), name="x")
    with pytest.warns(PreflightWarning, match="half-period") as rec:
        prog = af.compile(af.sin(x), opt=0, target="M1")
    assert rec[0].filename == __file__
    (lowered,) = [r for r in prog.report.records if r.id == "lower::half_period"]
    assert lowered.exactness == LOSSY and lowered.warnings[0][0] is PreflightWarning
    assert prog.passes["preflight"]["lowered"] == {"sin": 1}
    assert "sin" not in [n.op for n in prog.nodes]


def test_a_pass_that_changes_the_graph_drops_the_facts_found_on_the_old_one():
    # the route pass swaps lrn for its decomposition; the lowering then preflights the
    # new graph itself instead of trusting the report found on the old one
    x = af.input((1, 4, 8, 8), name="x")
    y = lrn(af.sin(x)).relu()
    pipe = pipeline("p", "check::preflight", "route::select", "lower::half_period")
    seen = {}

    def after(pass_id, state):
        seen[pass_id] = dict(state.facts)

    state, report = _quietly(run_pipeline, pipe, [y], target=resolve_target("M1"), after=after)
    assert report.ran == pipe.ids
    assert "preflight" in seen["check::preflight"]
    (routes,) = [r for r in report.records if r.id == "route::select"]
    assert [d["choice"] for d in routes.entries["routes"]] == ["fused"]
    assert seen["route::select"] == {}  # the graph changed: the old report is gone
    assert report.records[-1].entries["preflight"]["lowered"] == {"sin": 1}
    assert "sin" not in [n.op for n in state.program.nodes]


def test_the_loop_skips_target_passes_without_a_target_and_calls_after_each_pass():
    x = af.input((2, 8), name="x")
    seen = []
    pipe = compile_pipeline("routes")
    _, report = _quietly(run_pipeline, pipe, [x.exp()], after=lambda i, s: seen.append(i))
    assert seen == list(report.ran) == ["route::select", "warn::dispatch_floor",
                                         "check::precision"]  # fmt: skip


# ---- a structural check after every pass of every level ------------------------------------


def _graphs(rng):
    x = af.input((1, 3, 16, 16), name="x", range=(-1, 1))
    conv = lrn(af.conv(x, rng.standard_normal((8, 3, 3, 3)) * 0.3, padding=1)).relu()
    v = af.input((2, 32), name="v", range=(-1, 1))
    mlp = (v @ (rng.standard_normal((32, 32)) * 0.1)).relu().sin()
    return {"conv_lrn": [conv], "mlp_sin": [mlp, (v * 1.0).reshape((64,))]}


def _verifier(outs, checked: list):
    """``after`` for run_pipeline: the graph and the Program verified, the interface kept."""
    shapes = [t.shape for t in outs]

    def after(pass_id, state):
        verify_graph(list(state.outputs))
        verify_program(state.program)
        assert [t.shape for t in state.outputs] == shapes, pass_id
        checked.append(pass_id)

    return after


@pytest.mark.parametrize("opt", ["routes", 0, 1, 2])
@pytest.mark.parametrize("target", [None, "M1"])
def test_every_pass_of_every_level_leaves_a_well_formed_graph(opt, target, rng, tune_cache):
    tgt = None if target is None else resolve_target(target)
    for name, outs in _graphs(rng).items():
        for compress in (None, "int8"):
            checked: list = []
            pipe = compile_pipeline(opt, compress=compress)
            after = _verifier(outs, checked)
            state, report = _quietly(run_pipeline, pipe, outs, tgt, opt, after=after)
            assert checked == list(report.ran), (name, compress)
            assert len(checked) >= 2


# ---- variants and precision candidates are pipelines -----------------------------------------


def test_each_variant_name_maps_to_a_pipeline():
    assert set(VARIANTS) == set(LOSSLESS + LOSSY_VARIANTS + COMPRESSED)
    assert VARIANTS["routes+int8"].ids == ("route::select", "compress::int8")
    assert VARIANTS["canonical"].ids == ("route::select", "canon::rules")
    assert VARIANTS["auto"].steps[0].options["mode"] == "auto"
    for name, pipe in VARIANTS.items():
        assert pipe.name == name


def test_a_variant_is_its_pipeline_run_and_its_class_comes_from_the_records(rng):
    x = af.input((1, 32), name="x", range=(-1, 1))
    y = (x @ (rng.standard_normal((32, 16)) * 0.1)) * 1.0
    for name in VARIANTS:
        v = build_variant([y], name)
        state, report = run_pipeline(VARIANTS[name], [y], warn=False)
        assert v.passes.ran == report.ran == VARIANTS[name].ids
        assert [t.shape for t in v.outputs] == [t.shape for t in state.outputs]
        assert v.lossless == all(r.exactness == BIT_IDENTICAL for r in report.records)
    assert not build_variant([y], "int8").lossless and build_variant([y], "canonical").lossless
    # a name is looked up, never parsed: a reordered combination is unknown
    with pytest.raises(OptionError, match="unknown variant 'int8\\+routes'"):
        build_variant([y], "int8+routes")


def test_the_precision_candidates_are_pipelines_in_their_listed_order():
    assert tuple(CANDIDATE_PIPELINES) == CANDIDATES
    assert CANDIDATE_PIPELINES["fp16"].ids == ()
    assert CANDIDATE_PIPELINES["reduce_sum_to_matmul+int8"].ids == (
        "compress::int8",  # int8 first, so the rewrite's ones stay fp16
        "accuracy::reduce_sum_to_matmul",
    )
    assert CANDIDATE_PIPELINES["reduce_sum_to_matmul+paired"].ids[-1] == (
        "accuracy::paired_cancellation"
    )


def test_a_candidate_pass_with_nothing_to_do_says_why():
    x = af.input((4, 8), name="x")
    _, report = run_pipeline(CANDIDATE_PIPELINES["int8"], [x.exp()], warn=False)
    (record,) = report.records
    assert record.noop == "no contraction weight to quantize"


# ---- tune's options: one mechanism ----------------------------------------------------------


def test_tune_defaults_come_from_its_signature_and_feed_the_measure_pass():
    sig = inspect.signature(tune).parameters
    assert {n: p.default for n, p in sig.items() if p.default is not p.empty} == TUNE_DEFAULTS
    schema = get_pass("tune::measure").options
    assert {n: o.default for n, o in schema.items()} == {n: TUNE_DEFAULTS[n] for n in schema}
    with pytest.raises(OptionError, match="no option 'target_error'"):
        pipeline("bad", ("tune::measure", {"target_error": 1e-3}))


def test_a_tuned_program_reports_its_variant_pipeline(tmp_path):
    x = af.input((4, 16), name="x")
    y = lrn(af.reshape(x.relu(), (1, 4, 16))).exp()
    prog = _quietly(tune, y, device=af.SimulatedANE(), cache_dir=tmp_path)
    name = prog.tune_report["variant"]
    assert prog.report.pipeline == name and prog.report.ran == VARIANTS[name].ids
    assert prog.report.tune is prog.tune_report and prog.opt == 2


def test_a_lossy_opt_1_pick_is_recorded_with_its_warning(rng):
    x = af.input((1, 2048), name="x", range=(-1, 1))
    y = x @ (rng.standard_normal((2048, 2048)) * 0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        with pytest.warns(AneforgeWarning, match="lossy 'int8'"):
            prog = af.compile(y, opt=1)
    (pick,) = [r for r in prog.report.records if r.id == "variant::pick_by_estimate"]
    assert pick.exactness == LOSSY and "lossy 'int8'" in pick.warnings[0][1]
    assert np.isfinite(af.estimate(prog))
