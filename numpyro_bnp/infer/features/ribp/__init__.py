"""The R-IBP streaming filter (``RIBPFilter``, :mod:`~numpyro_bnp.infer.features.ribp.filter`).

The class reads the model into frozen constants and holds the compiled functions; the rest are
pure functions of ``(constants, state, ...)``: :mod:`~.update` (the state and info types, the
prior and the paper's per-observation update), :mod:`~.memoized` (the memoized update:
statistics, buffer, births) with :mod:`~.hyper` (its hyper-parameters' M-step),
:mod:`~.predictive` (read-outs), :mod:`~.refine` (the batch refinement) and :mod:`~.checks`.
"""
