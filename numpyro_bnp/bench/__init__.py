"""Benchmarks that ship with the package: ``python -m numpyro_bnp bench engines [--quick]``.

* :mod:`numpyro_bnp.bench.engines` — one model, many engines: the mixture and feature families
  side by side (:mod:`~numpyro_bnp.bench.mixtures`, :mod:`~numpyro_bnp.bench.features`).

Optional dependencies (scikit-learn, matplotlib, ``lda``) are imported only by the parts that
need them; a data set whose package is missing is skipped with a message.
"""
