"""Inference engines that consume a user's NumPyro model.

Every engine is imported from here (``from numpyro_bnp.infer import RIBPFilter``). The code lives
in three families (see ``docs/development.md``, "Layout"):

* :mod:`numpyro_bnp.infer.core` — what every family uses: reading the user's model, the
  streaming loop and its checkpoints, the MCMC kernels' shared parts, tempering ladders;
* :mod:`numpyro_bnp.infer.features` — latent feature engines: the R-IBP filter, the CRM slice
  samplers, the accelerated and the restricted IBP Gibbs samplers;
* :mod:`numpyro_bnp.infer.mixtures` — mixture engines: ADF-NRM, EP-NRM, power-prior streaming
  VB and the NGGP marginal Gibbs sampler;

and :mod:`numpyro_bnp.infer.twins` turns a model into the truncated model NumPyro's own samplers
run.
"""

import importlib
import sys

from numpyro_bnp.infer.core.streaming import (
    BadBatchError,
    NonFiniteStateError,
    StreamingEngine,
    StreamingResult,
    load,
    save,
)
from numpyro_bnp.infer.features.accelerated_gibbs import (
    AcceleratedIBPGibbs,
    AcceleratedIBPGibbsState,
)
from numpyro_bnp.infer.features.crm.slice import CRMSlice, CRMSliceState
from numpyro_bnp.infer.features.crm.topic_slice import CRMTopicSlice, CRMTopicSliceState
from numpyro_bnp.infer.features.restricted_gibbs import RestrictedIBPGibbs, RestrictedIBPGibbsState
from numpyro_bnp.infer.features.ribp.filter import (
    RIBPFilter,
    RIBPInfo,
    RIBPMemoState,
    RIBPResult,
    RIBPState,
)
from numpyro_bnp.infer.mixtures.adf_nrm import ADFNRM, NRMInfo, NRMResult, NRMState
from numpyro_bnp.infer.mixtures.ep_nrm import EPNRM
from numpyro_bnp.infer.mixtures.nggp_gibbs.kernel import NGGPMarginalGibbs, NGGPMarginalGibbsState
from numpyro_bnp.infer.mixtures.power_prior import (
    PowerPriorInfo,
    PowerPriorResult,
    PowerPriorState,
    PowerPriorSVB,
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

#: The module paths of the first layout (one flat folder), each kept as the name of the module
#: that now holds its code, so that code and pickles naming them still import
#: (``from numpyro_bnp.infer.ribp import RIBPFilter``).
FIRST_LAYOUT = {
    "_model": "core.model",
    "streaming": "core.streaming",
    "_streaming_engine": "core.protocol",
    "_checkpoint": "core.checkpoint",
    "_model_engine": "core.model_engine",
    "_mcmc": "core.mcmc",
    "_tempering": "core.tempering",
    "_linear_gaussian": "features.linear_gaussian",
    "ribp": "features.ribp.filter",
    "_ribp_update": "features.ribp.update",
    "_ribp_memoized": "features.ribp.memoized",
    "_ribp_hyper": "features.ribp.hyper",
    "_ribp_predictive": "features.ribp.predictive",
    "_ribp_refine": "features.ribp.refine",
    "_ribp_checks": "features.ribp.checks",
    "crm_slice": "features.crm.slice",
    "crm_topic_slice": "features.crm.topic_slice",
    "_crm_atoms": "features.crm.atoms",
    "_crm_births": "features.crm.births",
    "_crm_counts": "features.crm.counts",
    "_crm_kernel": "features.crm.kernel",
    "_crm_model": "features.crm.model",
    "_crm_rows": "features.crm.rows",
    "_crm_sweep": "features.crm.sweep",
    "_crm_target": "features.crm.target",
    "_crm_tempering": "features.crm.tempering",
    "_crm_topics": "features.crm.topics",
    "baselines": "features.accelerated_gibbs",
    "restricted_gibbs": "features.restricted_gibbs",
    "_restricted_model": "features.restricted_model",
    "_mixture_model": "mixtures.model",
    "_mixture_partition": "mixtures.partition",
    "_nrm_rows": "mixtures.documents",
    "nrm": "mixtures.adf_nrm",
    "nrm_ep": "mixtures.ep_nrm",
    "power_prior": "mixtures.power_prior",
    "_collapsed_vi": "mixtures.collapsed_vi",
    "nggp_gibbs": "mixtures.nggp_gibbs.kernel",
    "_nggp_sweep": "mixtures.nggp_gibbs.sweep",
    "_nggp_auxiliary": "mixtures.nggp_gibbs.auxiliary",
    "_nggp_tempering": "mixtures.nggp_gibbs.tempering",
    "_split_merge": "mixtures.nggp_gibbs.split_merge",
}
for _old, _new in FIRST_LAYOUT.items():
    globals()[_old] = sys.modules[f"{__name__}.{_old}"] = importlib.import_module(
        f"{__name__}.{_new}"
    )
del _old, _new
