"""What every engine family uses.

* :mod:`~numpyro_bnp.infer.core.model` — one trace of the user's model and the site finder every
  model reader shares;
* :mod:`~numpyro_bnp.infer.core.streaming` — the one streaming loop (chunked ``lax.scan``,
  progress bar, checkpoints, the result object), with :mod:`~numpyro_bnp.infer.core.protocol`
  (what a streaming engine has), :mod:`~numpyro_bnp.infer.core.checkpoint` (``.npz`` states with
  a record) and :mod:`~numpyro_bnp.infer.core.model_engine` (what the engines that read a model
  share);
* :mod:`~numpyro_bnp.infer.core.mcmc` — what the MCMC kernels share (chains, deterministic
  sites, slice sampling, saturation reports);
* :mod:`~numpyro_bnp.infer.core.tempering` — parallel tempering ladders and exchanges.
"""
