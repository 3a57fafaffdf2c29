"""The collapsed (marginal) Gibbs sampler for NGGP mixtures (``NGGPMarginalGibbs``).

The kernel (:mod:`~numpyro_bnp.infer.mixtures.nggp_gibbs.kernel`) runs the sweep
(:mod:`~.sweep`: ``log U``, hyper-parameters, labels, merge–split moves of :mod:`~.split_merge`);
components that are not conjugate go through Neal's Algorithm 8 (:mod:`~.auxiliary`), tempered
replicas through :mod:`~.tempering`.
"""
