"""The evaluation protocol: predict, score, budget (memory / latency / FLOPs), fidelity, report."""

from .budget import (
    LatencyStats,
    MemoryStats,
    budget_report,
    compare_budgets,
    compare_latency,
    count_flops,
    count_parameters,
    flops_per_image,
    measure_latency,
    peak_memory,
    relative_budget,
    weight_bytes,
)
from .flops import member_flops
from .predict import Predictions, iter_batches, predict
from .protocol import (
    BUDGET_KEYS,
    FAMILIES,
    RouteSpec,
    build_results,
    fits_budget,
    measure_budgets,
    parse_budget,
    predict_routes,
)
from .quantization import (
    DEFAULT_BOUNDS,
    DriftBounds,
    QuantizationSelection,
    default_quantization_grid,
    quantization_drift,
    select_quantization,
)
from .report import PLOT_FILES, write_report
from .results_io import (
    SCHEMA,
    collect_versions,
    load_predictions,
    load_results,
    route_slug,
    save_predictions,
    write_results,
)
from .scoring import (
    HIGHER_IS_BETTER,
    ID_METRICS,
    OOD_METRICS,
    format_interval,
    format_si,
    score_difference,
    score_pooled,
    score_split,
)

__all__ = [
    "LatencyStats",
    "MemoryStats",
    "budget_report",
    "compare_budgets",
    "compare_latency",
    "count_flops",
    "count_parameters",
    "flops_per_image",
    "measure_latency",
    "peak_memory",
    "relative_budget",
    "weight_bytes",
    "member_flops",
    # predict / scoring
    "HIGHER_IS_BETTER",
    "ID_METRICS",
    "OOD_METRICS",
    "Predictions",
    "format_interval",
    "format_si",
    "iter_batches",
    "predict",
    "score_difference",
    "score_pooled",
    "score_split",
    # protocol / results.json
    "BUDGET_KEYS",
    "FAMILIES",
    "SCHEMA",
    "RouteSpec",
    "build_results",
    "collect_versions",
    "fits_budget",
    "load_predictions",
    "load_results",
    "measure_budgets",
    "parse_budget",
    "predict_routes",
    "route_slug",
    "save_predictions",
    "write_results",
    # report
    "PLOT_FILES",
    "write_report",
    # quantization drift / selection
    "DEFAULT_BOUNDS",
    "DriftBounds",
    "QuantizationSelection",
    "default_quantization_grid",
    "quantization_drift",
    "select_quantization",
]
