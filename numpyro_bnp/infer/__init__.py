"""Inference engines that consume a user's NumPyro model."""

from numpyro_bnp.infer.baselines import AcceleratedIBPGibbs, AcceleratedIBPGibbsState
from numpyro_bnp.infer.crm_slice import CRMSlice, CRMSliceState
from numpyro_bnp.infer.crm_topic_slice import CRMTopicSlice, CRMTopicSliceState
from numpyro_bnp.infer.nggp_gibbs import NGGPMarginalGibbs, NGGPMarginalGibbsState
from numpyro_bnp.infer.nrm import ADFNRM, NRMInfo, NRMResult, NRMState
from numpyro_bnp.infer.nrm_ep import EPNRM
from numpyro_bnp.infer.power_prior import (
    PowerPriorInfo,
    PowerPriorResult,
    PowerPriorState,
    PowerPriorSVB,
)
from numpyro_bnp.infer.restricted_gibbs import RestrictedIBPGibbs, RestrictedIBPGibbsState
from numpyro_bnp.infer.ribp import RIBPFilter, RIBPInfo, RIBPMemoState, RIBPResult, RIBPState
from numpyro_bnp.infer.streaming import (
    BadBatchError,
    NonFiniteStateError,
    StreamingEngine,
    StreamingResult,
    load,
    save,
)
from numpyro_bnp.infer.twins import truncated_twin

__all__ = [
    "ADFNRM",
    "EPNRM",
    "AcceleratedIBPGibbs",
    "AcceleratedIBPGibbsState",
    "BadBatchError",
    "CRMSlice",
    "CRMSliceState",
    "CRMTopicSlice",
    "CRMTopicSliceState",
    "NGGPMarginalGibbs",
    "NGGPMarginalGibbsState",
    "NRMInfo",
    "NRMResult",
    "NRMState",
    "NonFiniteStateError",
    "PowerPriorInfo",
    "PowerPriorResult",
    "PowerPriorSVB",
    "PowerPriorState",
    "RIBPFilter",
    "RIBPInfo",
    "RIBPMemoState",
    "RIBPResult",
    "RIBPState",
    "RestrictedIBPGibbs",
    "RestrictedIBPGibbsState",
    "StreamingEngine",
    "StreamingResult",
    "load",
    "save",
    "truncated_twin",
]
