"""Inference engines that consume a user's NumPyro model."""

from numpyro_bnp.infer.baselines import AcceleratedIBPGibbs, AcceleratedIBPGibbsState
from numpyro_bnp.infer.crm_slice import CRMSlice, CRMSliceState
from numpyro_bnp.infer.restricted_gibbs import RestrictedIBPGibbs, RestrictedIBPGibbsState
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
    "AcceleratedIBPGibbs",
    "AcceleratedIBPGibbsState",
    "BadBatchError",
    "CRMSlice",
    "CRMSliceState",
    "NonFiniteStateError",
    "RIBPFilter",
    "RIBPInfo",
    "RIBPResult",
    "RIBPState",
    "RestrictedIBPGibbs",
    "RestrictedIBPGibbsState",
    "StreamingEngine",
    "StreamingResult",
    "load",
    "save",
]
