"""Inference engines that consume a user's NumPyro model."""

from numpyro_bnp.infer.crm_slice import CRMSlice, CRMSliceState
from numpyro_bnp.infer.ribp import RIBPFilter, RIBPInfo, RIBPResult, RIBPState
from numpyro_bnp.infer.streaming import StreamingResult, load, save

__all__ = [
    "CRMSlice",
    "CRMSliceState",
    "RIBPFilter",
    "RIBPInfo",
    "RIBPResult",
    "RIBPState",
    "StreamingResult",
    "load",
    "save",
]
