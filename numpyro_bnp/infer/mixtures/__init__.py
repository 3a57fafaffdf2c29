"""Mixture engines: clustering under NGGP and Dirichlet-process priors.

* :mod:`~numpyro_bnp.infer.mixtures.model` — reads a mixture model (with
  :mod:`~numpyro_bnp.infer.mixtures.partition`, its partition site);
  :mod:`~numpyro_bnp.infer.mixtures.documents` — word-count rows;
* :mod:`~numpyro_bnp.infer.mixtures.adf_nrm` and :mod:`~numpyro_bnp.infer.mixtures.ep_nrm` —
  ``ADFNRM`` and ``EPNRM``;
* :mod:`~numpyro_bnp.infer.mixtures.power_prior` — ``PowerPriorSVB``, with
  :mod:`~numpyro_bnp.infer.mixtures.collapsed_vi` (one batch's collapsed VI);
* :mod:`~numpyro_bnp.infer.mixtures.nggp_gibbs` — ``NGGPMarginalGibbs``.
"""
