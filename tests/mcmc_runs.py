"""The MCMC runs the kernel tests share: vectorized chains without a progress bar."""

from jax import random
from numpyro.infer import MCMC


def run_chains(
    kernel, num_warmup, num_samples, num_chains, seed=0, extra_fields=(), **model_kwargs
):
    """``kernel`` run for ``num_chains`` vectorized chains from ``PRNGKey(seed)``, recording
    ``extra_fields``; ``model_kwargs`` go to the model. Returns the ``MCMC``."""
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(seed), extra_fields=extra_fields, **model_kwargs)
    return mcmc
