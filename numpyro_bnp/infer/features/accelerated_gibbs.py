r"""Baseline samplers that the library's own engines are measured against.

:class:`AcceleratedIBPGibbs` is the accelerated collapsed Gibbs sampler of F. Doshi-Velez and
Z. Ghahramani, *Accelerated sampling for the Indian buffet process*, ICML 2009, for the
linear-Gaussian IBP model

.. math::
    Z \sim \mathrm{IBP}(α, β), \quad A_k \sim N(0, σ_A^2 I_D), \quad
    x_n \mid Z, A \sim N(z_n A, σ_X^2 I_D),

with the features ``A`` integrated out. The posterior of ``A`` given all rows is kept in
information form, shared by the ``D`` columns (Doshi-Velez & Ghahramani, Sec. 3):

.. math::
    P = Z^\top Z / σ_X^2 + I / σ_A^2, \quad h = Z^\top X / σ_X^2, \quad Σ = P^{-1},\ μ = Σ h.

Row ``n`` is updated in three steps:

1. **remove** its contribution, a rank-one Sherman-Morrison downdate of ``(Σ, μ)`` to the
   posterior given the other rows, ``(Σ_{-n}, μ_{-n})``;
2. **shared features** (``m_{-n,k} > 0``): Gibbs flips of ``z_nk`` with the exact collapsed
   conditional, since ``p(X | Z) = p(X_{-n} | Z_{-n})\, p(x_n | z_n, X_{-n}, Z_{-n})`` and

   .. math::
       p(z_{nk} = 1 \mid \cdot) \propto \frac{m_{-n,k}}{β + N - 1}\,
       N\big(x_n;\ z_n μ_{-n},\ (σ_X^2 + z_n Σ_{-n} z_n^\top) I_D\big)

   (the two-parameter IBP predictive, row ``n`` treated as the last customer); the predictive
   mean and variance change by O(K + D) per flip;
3. **new features**: the features only row ``n`` uses are replaced by ``k`` new ones, ``k`` drawn
   from ``Poisson(k; αβ/(β + N - 1)) N(x_n; z_n μ_{-n}, (σ_X^2 + z_n Σ_{-n} z_n^\top + k σ_A^2)
   I_D)`` over ``k = 0..`` the number of free slots, then the row is **added back** (rank-one
   update).

Each row costs O(K² + K D), a sweep O(N (K² + K D)). Round-off: ``Z^T Z`` is kept exactly (integer
counts) and ``Z^T X`` by additions; ``(Σ, μ)`` are recomputed from them every
``refresh_every`` rows (O(K³ + K² D), independent of ``N``) and at the start of each sweep, and the
rows/columns of features no other row uses are reset to the prior after each downdate.

**Capacity.** ``Z`` lives in the model's fixed capacity ``K`` (the ``max_features`` of its
``RecursiveIBP`` site); unused columns are all zero. The chain targets the posterior restricted
to at most ``K`` features (the new-feature draw is cut at the number of free slots), and the state
field ``saturated`` is True in a sweep where the number of active features reached ``K``: a chain
that saturates is truncated. Such a sweep is never silent: the kernel warns on the host (or
raises, ``on_saturation="error"``; :func:`numpyro_bnp.infer.core.mcmc.report_saturation`) with the
number of saturated sweeps and the chains; rebuild the model with a larger ``max_features``.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln
from numpyro import handlers
from numpyro.infer.mcmc import MCMCKernel

from numpyro_bnp._checks import (
    FixedOptions,
    is_concrete,
    model_function,
    observed_array,
    positive_int,
)
from numpyro_bnp._math import count_parity
from numpyro_bnp.distributions.ibp import RecursiveIBP, num_active_features
from numpyro_bnp.infer.core.mcmc import (
    chains_batched,
    on_saturation_option,
    over_chains,
    report_saturation,
    with_deterministic,
)
from numpyro_bnp.infer.core.model import trace_model
from numpyro_bnp.infer.features.feature_model import read_feature_model
from numpyro_bnp.infer.features.linear_gaussian import (
    add_row,
    collapsed_log_marginal,
    entry_moments,
    feature_posterior,
    posterior_covariance,
    predictive_log_density,
    prior_for_unshared,
    remove_row,
    sample_feature_posterior,
    set_entry,
)

__all__ = ["AcceleratedIBPGibbs", "AcceleratedIBPGibbsState"]

_ENGINE = "AcceleratedIBPGibbs"


class AcceleratedIBPGibbsState(NamedTuple):
    """State of :class:`AcceleratedIBPGibbs` (one chain; vectorized chains add a leading axis).

    :ivar i: number of sweeps done (int32).
    :ivar z: the sample, ``{Z site: (N, K) int32 in buffet order, A site: (K, D)}`` with ``A``
        drawn from its Gaussian posterior given ``Z``.
    :ivar num_active: number of active features (int32).
    :ivar parity: :func:`~numpyro_bnp.diagnostics.count_parity` of ``Z`` (int32).
    :ivar log_joint: ``log p(Z) + log p(X | Z)`` with ``A`` integrated out (the sampler's target;
        ``p(Z)`` is the buffet-order pmf of the model's ``RecursiveIBP``).
    :ivar log_likelihood: ``log p(X | Z)``, ``A`` integrated out (the collapsed likelihood of
        :func:`~numpyro_bnp.infer.features.linear_gaussian.collapsed_log_marginal`).
    :ivar saturated: True if the number of active features reached the capacity in the sweep.
    :ivar num_saturated: saturated sweeps of this chain so far (int32).
    :ivar rng_key: PRNG key.
    """

    i: jnp.ndarray
    z: dict
    num_active: jnp.ndarray
    parity: jnp.ndarray
    log_joint: jnp.ndarray
    log_likelihood: jnp.ndarray
    saturated: jnp.ndarray
    num_saturated: jnp.ndarray
    rng_key: jnp.ndarray


class _Config(NamedTuple):
    """Static hyper-parameters read from the model (host floats and ints)."""

    alpha: float
    beta: float
    num_rows: int
    capacity: int
    dim: int
    noise_var: float
    feature_var: float
    z_site: str
    a_site: str
    obs_site: str


def _read_config(model, model_args, model_kwargs):
    spec = read_feature_model(model, model_args, model_kwargs, engine=_ENGINE)
    if spec.likelihood != "linear_gaussian":
        raise ValueError(
            f"{_ENGINE} expected a linear-Gaussian observed site {spec.obs_site!r}: a Normal "
            f"with mean {spec.ibp_site} @ {spec.feature_site} and no per-row weights (found the "
            f"{spec.likelihood!r} likelihood); the model has: {'; '.join(spec.site_summary)}"
        )
    if np.any(spec.feature_loc != 0.0) or np.any(spec.feature_var != spec.feature_var[0]):
        raise ValueError(
            f"{_ENGINE} expected the feature site {spec.feature_site!r} to have prior N(0, σ_A²) "
            f"with one σ_A for all entries; got means {spec.feature_loc} and variances "
            f"{spec.feature_var}"
        )
    if np.any(spec.noise_var != spec.noise_var[0]):
        raise ValueError(
            f"{_ENGINE} expected the observed site {spec.obs_site!r} to have one noise scale for "
            f"all {spec.dim} columns; got variances {spec.noise_var}"
        )
    return _Config(
        alpha=spec.alpha,
        beta=spec.beta,
        num_rows=spec.num_rows,
        capacity=spec.max_features,
        dim=spec.dim,
        noise_var=float(spec.noise_var[0]),
        feature_var=float(spec.feature_var[0]),
        z_site=spec.ibp_site,
        a_site=spec.feature_site,
        obs_site=spec.obs_site,
    )


def _observed(model, cfg, model_args, model_kwargs):
    """The observed value ``X`` ``(N, D)`` of the model as given (traceable; ``Z``, ``A``
    substituted); the callers check it and cast it to the working dtype."""
    data = {
        cfg.z_site: jnp.zeros((cfg.num_rows, cfg.capacity), jnp.int32),
        cfg.a_site: jnp.zeros((cfg.capacity, cfg.dim)),
    }
    tr = trace_model(handlers.substitute(model, data=data), model_args, model_kwargs, _ENGINE)
    site = tr[cfg.obs_site]
    if not site["is_observed"]:
        raise ValueError(
            f"{_ENGINE} needs data: the site {cfg.obs_site!r} is not observed (pass the "
            "observations to the model, e.g. mcmc.run(key, obs=X, ...))"
        )
    return site["value"]


def _posterior(ztz, ztx, cfg):
    """``(Σ, μ)`` of ``A`` from ``Z^T Z`` and ``Z^T X``; also the Cholesky factor of ``P``."""
    mean, chol = feature_posterior(ztz, ztx, cfg.noise_var, cfg.feature_var)
    return posterior_covariance(chol), mean, chol


def _buffet_order(z):
    """Column permutation that puts ``z`` ``(N, K)`` in buffet order (unused columns last)."""
    num_rows, capacity = z.shape
    used = jnp.any(z != 0, axis=0)
    first = jnp.where(used, jnp.argmax(z != 0, axis=0), num_rows)
    return jnp.argsort(first * capacity + jnp.arange(capacity))


def _finish(key, z, x, cfg, i, saturated, num_saturated):
    """Buffet-order ``z``, draw ``A | Z, X`` and the diagnostics: the state after a sweep."""
    perm = _buffet_order(z)
    z = z[:, perm].astype(jnp.int32)
    zf = z.astype(x.dtype)
    ztx = zf.T @ x
    mean, chol = feature_posterior(zf.T @ zf, ztx, cfg.noise_var, cfg.feature_var)
    key, key_a = random.split(key)
    a = sample_feature_posterior(key_a, mean, chol)
    prior = RecursiveIBP(cfg.alpha, cfg.beta, num_rows=cfg.num_rows, max_features=cfg.capacity)
    log_lik = collapsed_log_marginal(
        chol, ztx, mean, jnp.sum(x * x), cfg.num_rows, cfg.noise_var, cfg.feature_var
    )
    log_joint = prior.log_prob(z) + log_lik
    return AcceleratedIBPGibbsState(
        i=jnp.asarray(i, jnp.int32),
        z={cfg.z_site: z, cfg.a_site: a},
        num_active=num_active_features(z).astype(jnp.int32),
        parity=count_parity(z),
        log_joint=log_joint.astype(x.dtype),
        log_likelihood=log_lik.astype(x.dtype),
        saturated=jnp.asarray(saturated, bool),
        num_saturated=jnp.asarray(num_saturated, jnp.int32),
        rng_key=key,
    )


@functools.partial(jax.jit, static_argnames=("cfg",))
def _init_chain(key, z, x, cfg):
    """Initial state from ``z`` ``(N, K)``, or from a draw of the IBP prior if ``z`` is None."""
    key, key_z = random.split(key)
    if z is None:
        prior = RecursiveIBP(cfg.alpha, cfg.beta, num_rows=cfg.num_rows, max_features=cfg.capacity)
        z = prior.sample(key_z)
    return _finish(key, z, x, cfg, 0, num_active_features(z) >= cfg.capacity, 0)


def _row_update(n, carry, x, cfg):
    """Resample row ``n`` of ``z`` (steps 1-3 of the module docstring)."""
    z, ztz, ztx, cov, mean, key, max_active = carry
    dtype = x.dtype
    capacity, dim = cfg.capacity, cfg.dim
    sx = jnp.sqrt(jnp.asarray(cfg.noise_var, dtype))
    sa2 = jnp.asarray(cfg.feature_var, dtype)
    zn, xn = z[n], x[n]
    key, key_flip, key_new = random.split(key, 3)

    # 1. remove row n; the features no other row uses get their prior
    cov, mean = remove_row(cov, mean, zn, xn, sx)
    counts = jnp.diagonal(ztz) - zn  # m_{-n,k}
    shared = counts > 0
    cov, mean = prior_for_unshared(cov, mean, shared, sa2)

    # 2. Gibbs flips of the shared features (predictive carried as in entry_moments)
    prior_logit = jnp.log(jnp.maximum(counts, 1.0)) - jnp.log(
        cfg.beta + cfg.num_rows - 1.0 - counts
    )
    unif = random.uniform(key_flip, (capacity,), dtype)

    def loglik(v, rr):
        return predictive_log_density(rr, v, dim)

    def flip(k, c):
        zn, s, v, r = c
        on = zn[k]
        moments = entry_moments(k, on, s, v, r, cov, mean)
        (v0, r0), (v1, r1) = moments
        logit = prior_logit[k] + loglik(v1, r1 @ r1) - loglik(v0, r0 @ r0)
        new = jnp.where(shared[k], (unif[k] < jax.nn.sigmoid(logit)).astype(dtype), on)
        return zn.at[k].set(new), *set_entry(k, on, new, s, cov, moments)

    s = cov @ zn
    init = (zn, s, sx**2 + zn @ s, xn - zn @ mean)
    zn, s, v, r = lax.fori_loop(0, capacity, flip, init)

    # 3. new features: replace row n's singletons by k ~ p(k | ·), k <= number of free slots
    singles = jnp.sum(jnp.where(shared, 0.0, zn))
    v_base = v - singles * sa2  # singletons have prior covariance σ_A² I, mean 0
    rr = r @ r
    num_free = capacity - jnp.sum(shared)
    ks = jnp.arange(capacity + 1, dtype=dtype)
    rate = cfg.alpha * cfg.beta / (cfg.beta + cfg.num_rows - 1.0)
    logits = ks * jnp.log(rate) - gammaln(ks + 1.0) + loglik(v_base + ks * sa2, rr)
    logits = jnp.where(ks <= num_free, logits, -jnp.inf)
    num_new = random.categorical(key_new, logits)
    free = ~shared
    zn_new = jnp.where(shared, zn, 0.0)
    zn_new = jnp.where(free & (jnp.cumsum(free) <= num_new), 1.0, zn_new)

    # 4. add row n back
    cov, mean = add_row(cov, mean, zn_new, xn, sx)
    z_old = z[n]
    ztz = ztz + jnp.outer(zn_new, zn_new) - jnp.outer(z_old, z_old)
    ztx = ztx + jnp.outer(zn_new - z_old, xn)
    z = z.at[n].set(zn_new)
    max_active = jnp.maximum(max_active, (jnp.sum(shared) + num_new).astype(jnp.int32))
    return z, ztz, ztx, cov, mean, key, max_active


def _sweep(state, x, cfg, refresh_every):
    """One Gibbs sweep over all rows, then :func:`_finish`."""
    dtype = x.dtype
    key, key_sweep = random.split(state.rng_key)
    z = state.z[cfg.z_site].astype(dtype)
    ztz, ztx = z.T @ z, z.T @ x
    num_blocks = -(-cfg.num_rows // refresh_every)

    def block(b, carry):
        z, ztz, ztx, _, _, key, max_active = carry
        cov, mean, _ = _posterior(ztz, ztx, cfg)
        lo = b * refresh_every
        hi = jnp.minimum(lo + refresh_every, cfg.num_rows)
        carry = (z, ztz, ztx, cov, mean, key, max_active)
        return lax.fori_loop(lo, hi, functools.partial(_row_update, x=x, cfg=cfg), carry)

    eye = jnp.eye(cfg.capacity, dtype=dtype)
    carry = (z, ztz, ztx, eye, jnp.zeros_like(ztx), key_sweep, jnp.asarray(0, jnp.int32))
    z, *_, max_active = lax.fori_loop(0, num_blocks, block, carry)
    saturated = max_active >= cfg.capacity
    num_saturated = state.num_saturated + saturated.astype(jnp.int32)
    return _finish(key, z, x, cfg, state.i + 1, saturated, num_saturated)


class AcceleratedIBPGibbs(FixedOptions, MCMCKernel):
    r"""Accelerated collapsed Gibbs for the linear-Gaussian IBP model, as a NumPyro ``MCMCKernel``.

    Doshi-Velez & Ghahramani (2009); see the module docstring for the algorithm. The model is read
    through the model contract (:mod:`numpyro_bnp.infer.features.feature_model`): one
    ``RecursiveIBP`` site ``Z``
    ``(N, K)``, one ``Normal(0, σ_A)`` feature site ``A`` ``(K, D)`` and an observed ``Normal``
    site with mean ``Z @ A`` and one noise scale σ_X, e.g.
    :func:`numpyro_bnp.models.linear_gaussian`. α, β, σ_A, σ_X and the capacity ``K`` are taken
    from the model as given.

    Each MCMC iteration is one sweep over the rows. The sample (``sample_field``) is the dict of
    site values ``{"Z": (N, K) int32 in buffet order, "A": (K, D)}``, ``A`` drawn from its Gaussian
    posterior given ``Z``, so ``arviz.from_numpyro`` computes the log-likelihood. Diagnostics,
    recorded by default (``extra_fields``, ArviZ ``sample_stats``): ``num_active``, ``parity``
    (:func:`~numpyro_bnp.diagnostics.count_parity`), ``log_joint`` (``log p(Z) + log p(X | Z)``),
    ``log_likelihood`` (``log p(X | Z)``; both with ``A`` integrated out) and ``saturated`` (see
    *Capacity* in the module docstring). Chains start from a draw of the IBP prior, or from
    ``init_params={"Z": z}``.

    :param model: a NumPyro model function of the form above.
    :param int refresh_every: rows between recomputations of the feature posterior from the
        exact sufficient statistics (round-off control; any value gives the same chain in exact
        arithmetic).
    :param str on_saturation: a sweep in which the active features fill the capacity ``"warn"`` s
        (a ``RuntimeWarning`` on the host, again each time a chain's count of such sweeps
        doubles) or raises (``"error"``: a ``RuntimeError`` stops the run).

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp.infer import AcceleratedIBPGibbs
        >>> from numpyro_bnp.models import linear_gaussian
        >>> x = random.normal(random.PRNGKey(0), (20, 3))
        >>> mcmc = MCMC(AcceleratedIBPGibbs(linear_gaussian), num_warmup=50, num_samples=100,
        ...             progress_bar=False)
        >>> mcmc.run(random.PRNGKey(1), x, num_obs=20, dim=3, sigma_o=1.0, max_features=16,
        ...          extra_fields=("num_active", "parity"))
        >>> mcmc.get_samples()["Z"].shape
        (100, 20, 16)
    """

    sample_field = "z"

    fixed_options = ("refresh_every", "on_saturation")

    def __init__(self, model, *, refresh_every=64, on_saturation="warn"):
        self._model = model_function(model)
        self.refresh_every = positive_int(refresh_every, "refresh_every")
        self.on_saturation = on_saturation_option(on_saturation, _ENGINE)
        self._cfg = None
        self._batched = False

    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return ("z", "num_active", "parity", "log_joint", "log_likelihood", "saturated")

    def _config(self, model_args, model_kwargs):
        cfg = _read_config(self._model, model_args, model_kwargs)
        x = _observed(self._model, cfg, model_args, model_kwargs)
        if is_concrete(x):
            name = f"the data of the observed site {cfg.obs_site!r}"
            observed_array(x, name, dtype=jnp.result_type(float), dim=cfg.dim)
        return cfg, x

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        cfg, x = self._config(model_args, model_kwargs)
        self._cfg = cfg
        x = jnp.asarray(x, jnp.result_type(float))
        self._batched = chains_batched(rng_key, _ENGINE)
        shape = (cfg.num_rows, cfg.capacity)
        z0 = None
        if init_params is not None:
            if not isinstance(init_params, dict) or cfg.z_site not in init_params:
                raise ValueError(f"init_params must be a dict with the site {cfg.z_site!r}")
            z0 = jnp.asarray(init_params[cfg.z_site])
            expected = ((len(rng_key),) if self._batched else ()) + shape
            if z0.shape != expected:
                raise ValueError(f"init_params[{cfg.z_site!r}] must have shape {expected}")
            if not bool(jnp.all((z0 == 0) | (z0 == 1))):
                raise ValueError(f"init_params[{cfg.z_site!r}] must be binary")

        def init_fn(key, z):
            return _init_chain(key, z, x, cfg)

        init_fn = over_chains(init_fn, self._batched, (0, None if z0 is None else 0))
        return init_fn(rng_key, z0)

    def sample(self, state, model_args, model_kwargs):
        cfg = self._cfg
        if cfg is None:
            raise RuntimeError(f"{_ENGINE}.init must run before sample")
        x = _observed(self._model, cfg, model_args, model_kwargs)
        x = jnp.asarray(x, jnp.result_type(float))
        sweep = functools.partial(_sweep, x=x, cfg=cfg, refresh_every=self.refresh_every)
        state = over_chains(sweep, self._batched)(state)
        report_saturation(
            state.saturated,
            state.num_saturated,
            state.i,
            on_saturation=self.on_saturation,
            engine=_ENGINE,
            capacity=(
                f"the feature capacity ({cfg.capacity}, the max_features of the model's "
                f"RecursiveIBP site {cfg.z_site!r})"
            ),
            remedy="Rebuild the model with a larger max_features",
        )
        return state

    def postprocess_fn(self, model_args, model_kwargs):
        """The sampled site values plus the model's deterministic sites at them."""
        return with_deterministic(self._model, model_args, model_kwargs, engine=_ENGINE)

    def get_diagnostics_str(self, state):
        sat = ", saturated" if bool(state.saturated) else ""
        return f"{int(state.num_active)} active features{sat}"
