"""Label-invariant summaries of latent feature allocations, for MCMC diagnostics.

Feature labels are not identified (any permutation of the columns gives the same model), so ESS and
R-hat are computed on functions that do not depend on them: the number of active features
(:func:`~numpyro_bnp.distributions.num_active_features`) and the parity test function used by the
slice sampler for general CRMs (Section 5 of that paper), which is 1 when the count matrix has an
even number of non-zero entries.
"""

import jax.numpy as jnp

__all__ = ["count_parity"]


def count_parity(counts):
    """1 if ``counts`` (``(..., N, K)``) has an even number of non-zero entries, else 0 (int32)."""
    nonzero = jnp.count_nonzero(counts, axis=(-2, -1))
    return (1 - nonzero % 2).astype(jnp.int32)
