"""Measured comparisons: ``python -m numpyro_bnp bench FAMILY [--quick] [its options]``.

One family a page of ``docs/`` (:data:`FAMILIES`); each module has the same protocol:

* its docstring, whose first line says what it measures (the family's help line);
* ``HELP``: what the full and the ``--quick`` runs take (the end of its ``--help``);
* ``QUICK_HELP``: what ``--quick`` runs (every family has ``--quick``);
* ``CPU_LOOP_KERNELS``: whether the command calls :func:`numpyro_bnp.enable_cpu_loop_kernels`
  first, as the family's figures in ``docs/`` were measured (those families also take
  ``--xla-default``, which keeps XLA's default loops);
* ``add_arguments(parser)``: its own options; ``run(args)``: the run, its exit status.

The families and the modules they run:

* ``engines`` (``docs/engines.md``): the mixture and feature engines side by side on the same
  data (:mod:`~numpyro_bnp.bench.mixtures`, :mod:`~numpyro_bnp.bench.features`);
* ``ribp`` (``docs/ribp.md``): the R-IBP filter's speed, held-out quality and binary data
  (:mod:`~numpyro_bnp.bench.ribp_speed`, :mod:`~numpyro_bnp.bench.ribp_quality`,
  :mod:`~numpyro_bnp.bench.ribp_binary`);
* ``crm_slice`` (``docs/crm_slice.md``): the CRM slice sampler's scaling, real data and
  tempering (:mod:`~numpyro_bnp.bench.crm_slice_scaling`,
  :mod:`~numpyro_bnp.bench.crm_slice_digits`, :mod:`~numpyro_bnp.bench.crm_tempering`);
* ``nrm`` (``docs/nrm.md``): ADF / EP against a NumPy reference, and the NGGP prior
  (:mod:`~numpyro_bnp.bench.nrm_rows`, :mod:`~numpyro_bnp.bench.nrm_reference`,
  :mod:`~numpyro_bnp.bench.nrm_corpus`, :mod:`~numpyro_bnp.bench.nggp`);
* ``power_prior`` (``docs/power_prior.md``): power-prior streaming VB on drifting streams;
* ``restricted_ibp`` (``docs/restricted_ibp.md``): the restricted-IBP prior samplers, and the
  R-IBP prior (:mod:`~numpyro_bnp.bench.ibp_prior`);
* ``accelerator`` (``docs/engines.md``): the engines' compiled step times on CPU or GPU;
* ``soak`` (``docs/ribp.md``): a long stream through the R-IBP filter, memory over time.

Shared: :mod:`numpyro_bnp.datasets` (one loader a data set), :mod:`numpyro_bnp._report` (the
table printer, median timings), :mod:`~numpyro_bnp.bench._common` (MCMC timings, chain
statistics, figures). Optional dependencies (scikit-learn, matplotlib, ``lda``) are imported only
by the parts that need them.
"""

from numpyro_bnp.bench import (
    accelerator,
    crm_slice,
    engines,
    nrm,
    power_prior,
    restricted_ibp,
    ribp,
    soak,
)

FAMILIES = {
    "engines": engines,
    "ribp": ribp,
    "crm_slice": crm_slice,
    "nrm": nrm,
    "power_prior": power_prior,
    "restricted_ibp": restricted_ibp,
    "accelerator": accelerator,
    "soak": soak,
}

__all__ = ["FAMILIES"]
