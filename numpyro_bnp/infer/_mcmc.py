"""What the library's MCMC kernels share as :class:`numpyro.infer.mcmc.MCMCKernel` s.

* :func:`chains_batched` / :func:`over_chains` — ``numpyro.infer.MCMC`` hands ``init`` one PRNG
  key per call (``chain_method="sequential"`` or ``"parallel"``) or a batch of keys, one per chain
  (``chain_method="vectorized"``); the kernel then maps its one-chain functions over the batch.
* :func:`with_deterministic` — the ``postprocess_fn`` of a kernel whose sample field holds the
  model's site values: the model's ``numpyro.deterministic`` sites are recomputed from them, so
  ``mcmc.get_samples()`` returns them as it does for NUTS.
"""

import jax
import jax.numpy as jnp
from numpyro import handlers
from numpyro.util import is_prng_key

from numpyro_bnp.infer._model import trace_model

__all__ = ["chains_batched", "over_chains", "with_deterministic"]


def chains_batched(rng_key, engine):
    """True for a batch of keys ``(num_chains, 2)`` (vectorized chains), False for one key.

    :raises ValueError: naming ``rng_key`` and ``engine`` when it is neither.
    """
    if is_prng_key(rng_key):
        return False
    shape = jnp.shape(rng_key)
    typed = jax.dtypes.issubdtype(jnp.asarray(rng_key).dtype, jax.dtypes.prng_key)
    if (typed and len(shape) == 1) or (not typed and len(shape) == 2 and shape[1] == 2):
        return True
    raise ValueError(
        f"{engine}: rng_key must be one PRNG key or a batch of keys of shape (num_chains, 2), "
        f"got shape {shape}"
    )


def over_chains(fn, batched, in_axes=0):
    """``fn`` for one chain, mapped over the leading axis of a batch of chains when ``batched``."""
    return jax.vmap(fn, in_axes=in_axes) if batched else fn


def with_deterministic(model, model_args, model_kwargs, fn=None, *, engine="the MCMC kernel"):
    """A ``postprocess_fn``: ``fn(z)`` plus the model's deterministic sites at the values ``z``.

    The model is replayed with its sample sites substituted by ``z`` (traceable, so it runs
    inside the compiled collection loop of ``numpyro.infer.MCMC``); a model without deterministic
    sites costs nothing at run time. An error inside the model is re-raised as itself, with a
    note naming ``engine`` (:func:`~numpyro_bnp.infer._model.trace_model`).
    """

    def postprocess(z):
        out = dict(z if fn is None else fn(z))
        replay = handlers.substitute(model, data=out)
        tr = trace_model(
            replay, model_args, model_kwargs, f"{engine} (recomputing deterministic sites)"
        )
        for name, site in tr.items():
            if site["type"] == "deterministic" and name not in out:
                out[name] = site["value"]
        return out

    return postprocess
