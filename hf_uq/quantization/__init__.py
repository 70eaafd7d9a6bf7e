"""Post-training quantization that keeps the uncertainty: `hf_uq.quantize` and `hf_uq.load_quantized`.

One file per backend (`quanto.py` for optimum-quanto, `bitsandbytes.py`), each imported only when asked for
and only after a check that its package is installed; `api.py` holds what is common and `serialization.py` the
`save_pretrained` / `from_pretrained` support (`quant_method="hf_uq"`, registered with transformers when this
package is imported). To check that a quantized model's uncertainty survived, use
[`hf_uq.evaluation.quantization_drift`] and [`hf_uq.evaluation.select_quantization`].
"""

from .api import (
    BACKENDS,
    HEADS,
    QuantizationInfo,
    QuantizationSkipWarning,
    available_backends,
    is_backend_available,
    quantize,
)
from .serialization import (
    QUANT_METHOD,
    QUANTIZED_WEIGHTS_NAME,
    HfUqQuantizationConfig,
    HfUqQuantizer,
    is_hf_uq_quantized,
    load_quantized,
    register,
)

register()

__all__ = [
    "BACKENDS",
    "HEADS",
    "QUANTIZED_WEIGHTS_NAME",
    "QUANT_METHOD",
    "HfUqQuantizationConfig",
    "HfUqQuantizer",
    "QuantizationInfo",
    "QuantizationSkipWarning",
    "available_backends",
    "is_backend_available",
    "is_hf_uq_quantized",
    "load_quantized",
    "quantize",
    "register",
]
