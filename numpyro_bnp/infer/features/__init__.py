"""Latent feature engines: binary features (IBP) and latent traits (completely random measures).

* :mod:`~numpyro_bnp.infer.features.feature_model` — reads a latent feature model;
  :mod:`~numpyro_bnp.infer.features.linear_gaussian` — the conjugate linear-Gaussian feature
  posterior every sampler here shares;
* :mod:`~numpyro_bnp.infer.features.ribp` — the R-IBP streaming filter (``RIBPFilter``);
* :mod:`~numpyro_bnp.infer.features.crm` — the CRM slice samplers (``CRMSlice``,
  ``CRMTopicSlice``);
* :mod:`~numpyro_bnp.infer.features.accelerated_gibbs` — ``AcceleratedIBPGibbs``;
* :mod:`~numpyro_bnp.infer.features.restricted_gibbs` and
  :mod:`~numpyro_bnp.infer.features.restricted_model` — ``RestrictedIBPGibbs`` and its reader.
"""
