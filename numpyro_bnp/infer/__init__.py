"""Inference engines that consume a user's NumPyro model."""

from numpyro_bnp.infer.baselines import AcceleratedGibbsState, AcceleratedIBPGibbs
from numpyro_bnp.infer.crm_slice import CRMSlice, CRMSliceState
from numpyro_bnp.infer.restricted_gibbs import RestrictedGibbsState, RestrictedIBPGibbs
from numpyro_bnp.infer.ribp import RIBPFilter, RIBPInfo, RIBPResult, RIBPState
from numpyro_bnp.infer.streaming import (
    BadBatchError,
    NonFiniteStateError,
    StreamingEngine,
    StreamingResult,
    load,
    save,
)

__all__ = [
    "AcceleratedGibbsState",
    "AcceleratedIBPGibbs",
    "BadBatchError",
    "CRMSlice",
    "CRMSliceState",
    "NonFiniteStateError",
    "RIBPFilter",
    "RIBPInfo",
    "RIBPResult",
    "RIBPState",
    "RestrictedGibbsState",
    "RestrictedIBPGibbs",
    "StreamingEngine",
    "StreamingResult",
    "load",
    "save",
]
