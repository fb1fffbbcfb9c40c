"""The opt levels as named pipelines, and the epilogue every level ends with.

Each level of :func:`aneforge.compile` is one pipeline of registered passes
(:mod:`aneforge.optimizer.passes`), built and validated when this module loads (a bad
pass id or option here is an import-time error):

- ``O0`` (``opt=0``): no pass; the graph exactly as built;
- ``routes`` (``opt='routes'``, the default): ``route::select``;
- ``O1`` (``opt=1``): ``variant::pick_by_estimate``;
- ``O2`` (``opt=2`` / ``'max'``): ``check::preflight``, ``lower::half_period``, then
  ``tune::measure`` (with a target the tuner measures the program that will run).

:func:`compile_pipeline` composes what one compile call runs: ``compress::weights``
first when ``compress=`` is given, the level's pipeline, then :data:`EPILOGUE` —
``check::preflight``, ``lower::half_period`` and ``check::divergence`` (these three
only with a target), ``warn::dispatch_floor`` and ``check::precision`` — leaving out an
epilogue pass the level already ran (``O2`` preflights before it measures).

Example:
    >>> LEVELS["routes"].ids
    ('route::select',)
    >>> compile_pipeline(1).ids[-2:]
    ('warn::dispatch_floor', 'check::precision')
"""

from __future__ import annotations

from ..errors import OptionError

# imported for the passes they register (accuracy::*, tune::*, variant::*)
from . import precision_tune as _precision_tune  # noqa: F401
from . import tune as _tune  # noqa: F401
from . import variants as _variants  # noqa: F401
from .passes import Pipeline, pipeline

#: One pipeline per level, by name.
PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        pipeline("O0", doc="the graph exactly as built"),
        pipeline("routes", "route::select", doc="the lossless route pass"),
        pipeline("O1", "variant::pick_by_estimate", doc="the cost model's pick of variants"),
        pipeline(
            "O2",
            "check::preflight",
            "lower::half_period",
            "tune::measure",
            doc="measured autotuning (af.tune) of the preflighted graph",
        ),
    )
}

#: compile's ``opt`` values and their pipelines.
LEVELS: dict = {
    "routes": PIPELINES["routes"],
    0: PIPELINES["O0"],
    1: PIPELINES["O1"],
    2: PIPELINES["O2"],
    "max": PIPELINES["O2"],
}

#: The checks every level ends with, in order.
EPILOGUE: Pipeline = pipeline(
    "epilogue",
    "check::preflight",
    "lower::half_period",
    "check::divergence",
    "warn::dispatch_floor",
    "check::precision",
)


def compile_pipeline(opt, compress: str | None = None, compress_atol: float | None = None,
                     strict: bool = False) -> Pipeline:  # fmt: skip
    """The pipeline one ``compile`` call runs at level ``opt`` (module docstring), named
    after the level's pipeline.

    Example:
        >>> compile_pipeline(2, compress="int8", strict=True).ids
        ... # doctest: +NORMALIZE_WHITESPACE
        ('compress::weights', 'check::preflight', 'lower::half_period', 'tune::measure',
         'check::divergence', 'warn::dispatch_floor', 'check::precision')
    """
    if isinstance(opt, bool) or not isinstance(opt, (int, str)) or opt not in LEVELS:
        raise OptionError(f"compile: opt must be one of {tuple(LEVELS)}, got {opt!r}")
    level = LEVELS[opt]
    head = []
    if compress is not None:
        options = {"mode": compress}
        if compress_atol is not None:
            options["atol"] = compress_atol
        head.append(("compress::weights", options))
    tail = [
        (s.id, {"strict": strict}) if s.id == "check::precision" else s
        for s in EPILOGUE.steps
        if s.id not in level.ids
    ]
    return pipeline(level.name, *head, *level.steps, *tail, doc=level.doc)
