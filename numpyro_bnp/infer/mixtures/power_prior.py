r"""Power-prior streaming variational Bayes: Dirichlet-process mixtures on drifting streams.

Casado & Pérez, *Dirichlet process mixture models for non-stationary data streams*, ICDM 2022
(``docs/power_prior.md``). The stream comes in batches ``x_1, x_2, …``; each batch is fitted by
collapsed variational inference for a truncated DP mixture (:mod:`.collapsed_vi`, Kurihara,
Welling & Teh 2007) whose component priors are the previous batch's posteriors, tempered
towards the model's prior by a *power prior* (natural parameters, per component ``k``):

.. math::
    \hat λ_{t,k} = ρ_{t,k}\, λ_{t-1,k} + (1 - ρ_{t,k})\, λ_0 ,
    \qquad \hat p(θ) \propto q(θ \mid λ_{t-1})^{ρ}\, p(θ \mid λ_0)^{1-ρ}

(:meth:`~numpyro_bnp.families.ConjugateFamily.interpolate`). ``ρ = 1`` is streaming variational
Bayes (posterior becomes prior), ``ρ = 0`` an independent fit of every batch. ``forgetting``:

* a number ``ρ ∈ [0, 1]``: the same ρ for every batch and component (the paper's Algorithm 1);
* ``"hpp"``: one ``ρ_t`` per batch with a truncated-exponential prior ``p(ρ | γ) ∝ e^{γρ}`` on
  ``[0, 1]`` and variational posterior ``q(ρ_t | ω_t)`` of the same family (Algorithm 2); the
  batch maximises the surrogate ELBO ``… − E[ρ] KL(q_t ‖ q_{t−1}) − (1 − E[ρ]) KL(q_t ‖ p_0)
  − KL(q(ρ) ‖ p(ρ))``, whose ``ω`` update is closed-form (Masegosa et al. 2017),
  ``ω_t = γ + KL(q_t ‖ p_0) − KL(q_t ‖ q_{t−1})``, alternated with the collapsed fit until the
  surrogate ELBO settles;
* ``"mhpp"``: one ``ρ_{t,k}`` per component, each with its own ``ω_{t,k}`` (Algorithm 3), so
  that only the components that changed are forgotten.

``E[ρ | ω] = 1/(1 − e^{−ω}) − 1/ω``: a drop of ``E[ρ_t]`` marks a change of the stream. The
mixture weights are collapsed: they carry no state across batches (the predictive's weights
are those of the last batch's counts); components keep their identity by their index.
"""

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import logsumexp

from numpyro_bnp._checks import (
    finite_float,
    floating_dtype,
    model_function,
    positive_float,
    positive_int,
    prng_key,
)
from numpyro_bnp._math import stick_breaking_weights
from numpyro_bnp.infer.core import streaming
from numpyro_bnp.infer.core.model_engine import ModelEngine
from numpyro_bnp.infer.mixtures import collapsed_vi
from numpyro_bnp.infer.mixtures.model import read_mixture_model

__all__ = ["PowerPriorInfo", "PowerPriorResult", "PowerPriorSVB", "PowerPriorState"]

MAX_FORGETTING_ROUNDS = 10  # alternations of the collapsed fit and the ω update per batch
FRESH_KL = 1e-3  # a component whose prior is within this KL (nats) of the model's is seeded anew
CLUSTER_WEIGHT = 0.01  # a cluster counts when its predictive weight exceeds this
_PAD = 256  # batches are padded to a multiple of this many rows (fewer compilations)


def truncated_exponential_mean(omega):
    """``E[ρ | ω] = 1/(1 − e^{−ω}) − 1/ω`` of ``q(ρ | ω) ∝ e^{ωρ}`` on ``[0, 1]`` (½ at ω = 0;
    its series ``½ + ω/12`` for ``|ω| < 1e-3``)."""
    small = jnp.abs(omega) < 1e-3
    safe = jnp.where(small, 1.0, omega)
    return jnp.where(small, 0.5 + omega / 12.0, -1.0 / jnp.expm1(-safe) - 1.0 / safe)


def _log_normalizer(omega):
    """``A(ω) = log((e^ω − 1)/ω)`` (0 at ω = 0)."""
    small = jnp.abs(omega) < 1e-3
    safe = jnp.where(small, 1.0, omega)
    big = jnp.where(
        safe > 0,
        safe + jnp.log(-jnp.expm1(-safe)) - jnp.log(jnp.abs(safe)),
        jnp.log(-jnp.expm1(safe)) - jnp.log(jnp.abs(safe)),
    )
    return jnp.where(small, omega / 2.0 + omega**2 / 24.0, big)


def truncated_exponential_kl(omega, gamma):
    """``KL(q(ρ | ω) ‖ p(ρ | γ)) = (ω − γ) E[ρ | ω] − A(ω) + A(γ)``."""
    return (
        (omega - gamma) * truncated_exponential_mean(omega)
        - _log_normalizer(omega)
        + _log_normalizer(gamma)
    )


class PowerPriorState(NamedTuple):
    """The state after ``num_batches`` batches (``T`` components).

    :ivar params: the family's posterior parameters of the last batch (leading axis ``T``).
    :ivar counts: ``(T,)`` the last batch's expected counts ``E[N_k]`` (the predictive's weights).
    :ivar rho: ``(T,)`` ``E[ρ]`` each component's prior used for the last batch.
    :ivar num_batches: batches absorbed; :ivar num_seen: rows absorbed.
    :ivar rng_key: the key the batches' seeding keys are folded from (by batch number).
    """

    params: object
    counts: jnp.ndarray
    rho: jnp.ndarray
    num_batches: jnp.ndarray
    num_seen: jnp.ndarray
    rng_key: jnp.ndarray


class PowerPriorInfo(NamedTuple):
    """What one batch did: ``expected_rho`` ``(T,)`` (the same for all with a fixed ρ or HPP),
    the (surrogate) ``elbo``, ``num_clusters`` (predictive weight above ``CLUSTER_WEIGHT``),
    ``num_iter`` (collapsed sweeps, all rounds), ``rounds`` (fits alternated with the ω
    update, both starts together) and ``converged`` (every fit met ``tol``)."""

    expected_rho: jnp.ndarray
    elbo: jnp.ndarray
    num_clusters: jnp.ndarray
    num_iter: jnp.ndarray
    rounds: jnp.ndarray
    converged: jnp.ndarray


def _weights(state, alpha):
    """``(T,)`` the predictive's weights: the stick-breaking of the expected sticks
    ``E[v_k] = (1 + N_k)/(1 + α + N_{≥k})`` of the last batch's counts (``v_T = 1``; Kurihara,
    Welling & Teh 2007)."""
    at_least = jnp.cumsum(state.counts[::-1])[::-1]
    sticks = (1.0 + state.counts) / (1.0 + alpha + at_least)
    return stick_breaking_weights(sticks[:-1])


class PowerPriorSVB(ModelEngine):
    """Power-prior streaming variational Bayes on a NumPyro DP mixture (module docstring).

    :param model: a mixture model read by the mixture-model contract (``docs/model_contract.md``):
        a truncated stick-breaking DP mixture such as :func:`numpyro_bnp.models.dp_mixture`, or
        an NGGP mixture with ``sigma = 0`` (a DP), with conjugate components of a dense family
        (Normal–Wishart, Normal–Gamma, known-noise Normal, Gamma–Poisson, Beta–Bernoulli).
    :param forgetting: ``ρ`` in ``[0, 1]`` (1: streaming VB, 0: every batch on its own),
        ``"hpp"`` (one learned ρ per batch) or ``"mhpp"`` (one per component).
    :param float gamma: the natural parameter ``γ`` of the truncated-exponential prior of ρ
        (required for ``"hpp"`` and ``"mhpp"``; ``γ > 0`` leans to remembering, ``γ < 0`` to
        forgetting, ``E[ρ | γ]`` is the prior mean: 0.508 at γ = 0.1).
    :param int truncation: ``T``, the number of components; default the model's clusters plate.
    :param int max_iter: the most collapsed sweeps of one fit (default 100, the paper's).
    :param float tol: a fit stops when its ELBO changes by less than ``tol`` times its size.
    :param dtype: floating dtype (default float32 unless x64 is on).
    """

    fixed_options = ("model", "forgetting", "gamma", "truncation", "max_iter", "tol", "dtype")
    state_type = PowerPriorState

    def __init__(
        self,
        model,
        *,
        forgetting="hpp",
        gamma=None,
        truncation=None,
        max_iter=100,
        tol=1e-5,
        dtype=None,
    ):
        model_function(model)
        if isinstance(forgetting, str):
            if forgetting not in ("hpp", "mhpp"):
                raise ValueError(
                    f"forgetting must be a number in [0, 1], 'hpp' or 'mhpp', got {forgetting!r}"
                )
            if gamma is None:
                raise TypeError(
                    f"forgetting={forgetting!r} needs gamma, the natural parameter of the "
                    "prior of rho (e.g. 0.1: E[rho] = 0.508 a priori; larger remembers more)"
                )
            gamma = finite_float(gamma, "gamma")
        else:
            forgetting = finite_float(forgetting, "forgetting")
            if not 0.0 <= forgetting <= 1.0:
                raise ValueError(f"forgetting must lie in [0, 1], got {forgetting}")
            if gamma is not None:
                raise ValueError("gamma is the prior of a learned rho: pass it only with 'hpp'")
        self.model = model
        self.forgetting = forgetting
        self.gamma = gamma
        self.truncation = None if truncation is None else positive_int(truncation, "truncation")
        self.max_iter = positive_int(max_iter, "max_iter")
        self.tol = positive_float(tol, "tol")
        self.dtype = floating_dtype(dtype)

    @property
    def options(self):
        """The engine's options as JSON-storable values (recorded in checkpoints)."""
        return {
            "forgetting": self.forgetting,
            "gamma": self.gamma,
            "truncation": self.truncation,
            "max_iter": self.max_iter,
            "tol": self.tol,
            "dtype": np.dtype(self.dtype).name,
        }

    # ------------------------------------------------------------------ set-up
    def _read_model(self, model_args, model_kwargs):
        name = type(self).__name__
        spec = read_mixture_model(
            self.model, model_args, model_kwargs, engine=name, partitions=("nggp", "stick_breaking")
        )
        if spec.sigma != 0.0:
            raise ValueError(
                f"{name} fits Dirichlet-process mixtures; the NGGP site {spec.partition_site!r} "
                f"has sigma = {spec.sigma} (use sigma=0, or ADFNRM / EPNRM for sigma > 0)"
            )
        if spec.obs_kind == "documents":
            raise ValueError(
                f"{name} takes dense observations; for word-count documents use ADFNRM or EPNRM"
            )
        self.spec = spec
        self.kind = f"dp_{type(spec.family).__name__}"
        self.dim = spec.dim
        self.num_components = self.truncation or spec.max_clusters
        self._family = jax.tree.map(lambda a: jnp.asarray(a, self.dtype), spec.family)
        self._alpha = jnp.asarray(spec.mass, self.dtype)
        self._update_fn = jax.jit(self._update)
        self._score_fn = jax.jit(self._scores)

    def init(self, rng_key, *model_args, **model_kwargs):
        """Read the model (one trace) and return the state of no batches.

        :param rng_key: a JAX PRNG key: the seeding of each batch's fit is folded from it
            (``None``: ``PRNGKey(0)``, e.g. for a state about to be replaced by a loaded one).
        """
        self._read(model_args, model_kwargs)
        key = random.PRNGKey(0) if rng_key is None else prng_key(rng_key)
        if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = random.key_data(key)
        return self.empty(self.num_components)._replace(rng_key=key)

    def empty(self, capacity):
        """The state of no batches with ``capacity`` components (all at the model's prior)."""
        self._require_init()
        dt = self.dtype
        return PowerPriorState(
            params=self._family.init_clusters(capacity),
            counts=jnp.zeros(capacity, dt),
            rho=jnp.ones(capacity, dt),
            num_batches=jnp.zeros((), jnp.int32),
            num_seen=jnp.zeros((), jnp.int32),
            rng_key=jnp.zeros(2, jnp.uint32),
        )

    def check_batch(self, batch, name="batch"):
        """Validate one batch on the host: finite rows ``(n, D)`` in the support of the
        observed site; returned in the engine's dtype."""
        self._require_init()
        arr = streaming.check_batch(batch, dim=self.dim, dtype=self.dtype, name=name)
        self.spec.check_observed(arr, name)
        return arr

    def check_state(self, state, name="state"):
        """Raise ``TypeError``/``ValueError`` naming the field unless ``state`` can continue
        the stream here: a :class:`PowerPriorState` with ``T`` components of this engine's
        family, shapes and dtypes, finite values, ``counts >= 0``, ``rho`` in ``[0, 1]``."""
        self._require_init()
        if not isinstance(state, PowerPriorState):
            raise TypeError(f"{name} must be a PowerPriorState, got {type(state).__name__}")
        template = self.empty(self.num_components)
        try:
            pairs = jax.tree.map(lambda a, b: (a, b), template, state)
        except ValueError:
            raise ValueError(
                f"{name} must hold the {type(template.params).__name__} of the model's family"
            ) from None
        for path, (want, value) in jax.tree_util.tree_leaves_with_path(
            pairs, is_leaf=lambda x: isinstance(x, tuple) and not hasattr(x, "_fields")
        ):
            value = np.asarray(value)
            field = f"{name}{jax.tree_util.keystr(path)}"
            if value.shape != want.shape or value.dtype != want.dtype:
                raise ValueError(
                    f"{field} must have shape {want.shape} and dtype {want.dtype} "
                    f"(T = {self.num_components} components), got {value.shape} {value.dtype}"
                )
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"{field} holds NaN or infinite values")
        if (np.asarray(state.counts) < 0).any():
            raise ValueError(f"{name}.counts must be >= 0")
        rho = np.asarray(state.rho)
        if ((rho < 0) | (rho > 1)).any():
            raise ValueError(f"{name}.rho must lie in [0, 1]")

    @staticmethod
    def capacity(state):
        return state.counts.shape[0]

    @staticmethod
    def num_seen(state):
        return int(state.num_seen)

    # ------------------------------------------------------------------ one batch
    def _fit(self, prior, obs, mask, key, claimed_only=False):
        """Collapsed fit of a batch against the component priors ``prior``: from both starts of
        :func:`~.collapsed_vi.initial_responsibilities`, the one of the higher ELBO, or, with
        ``claimed_only``, from the first (the components claim the batch)."""
        family = self._family
        fresh = family.kl(prior, family.init_clusters(self.num_components)) < FRESH_KL
        starts = collapsed_vi.initial_responsibilities(family, prior, obs, mask, fresh, key)
        fits = jax.vmap(
            lambda phi: collapsed_vi.fit(
                family, prior, obs, mask, phi, self._alpha, self.max_iter, self.tol
            )
        )(starts)
        best = jnp.where(claimed_only, 0, jnp.argmax(fits.elbo))
        fit = jax.tree.map(lambda a: a[best], fits)
        num_iter = jnp.sum(fits.num_iter).astype(jnp.int32)
        return fit._replace(converged=jnp.all(fits.converged), num_iter=num_iter)

    def _learned_rho(self, fit, prior, base, previous):
        """``(E[ρ | ω] (T,), surrogate ELBO)`` after a fit: the closed-form ``ω`` update
        ``γ + KL(q ‖ p_0) − KL(q ‖ q_{t−1})`` (per component for MHPP; for HPP summed over the
        components the batch uses, each weighted by ``min(E[N_k], 1)``), and the fit's ELBO
        with its KL to the power prior replaced, for those components, by the ``E[ρ]``-mixture
        of the KLs to the last posterior and to the model's prior (the two differ by a constant
        in ``q(θ), q(z)``: the paper's surrogate bound), at the new ``q(ρ | ω)``.

        HPP's weights are a change from the paper, which sums over every component: a
        component the batch leaves without rows keeps its tempered prior as its posterior, so
        its terms say nothing about the batch but echo the ρ they were fitted at (``KL(q_{t−1}
        ‖ p_0) > 0``, remember, near ρ = 1; ``−KL(p_0 ‖ q_{t−1}) < 0``, forget, near ρ = 0),
        and with ``T = 30`` components of which a batch uses a few they outvote the batch.
        """
        family, gamma = self._family, jnp.asarray(self.gamma, self.dtype)
        kl_base = family.kl(fit.params, base)
        kl_prev = family.kl(fit.params, previous)
        kl_prior = family.kl(fit.params, prior)
        if self.forgetting == "hpp":
            used = jnp.minimum(fit.phi.sum(0), 1.0)
            omega = gamma + jnp.sum(used * (kl_base - kl_prev))
            rho = jnp.full(kl_base.shape, truncated_exponential_mean(omega))
            kl_rho = truncated_exponential_kl(omega, gamma)
        else:
            used = jnp.ones_like(kl_base)
            omega = gamma + kl_base - kl_prev
            rho = truncated_exponential_mean(omega)
            kl_rho = jnp.sum(truncated_exponential_kl(omega, gamma))
        mixed = rho * kl_prev + (1 - rho) * kl_base
        surrogate = fit.elbo + jnp.sum(used * (kl_prior - mixed)) - kl_rho
        return rho, surrogate

    def _update(self, state, obs, mask):
        """One batch (jitted): the fit against the power prior and, for a learned ρ, its
        alternation with the ω update until the surrogate ELBO settles (at most
        ``MAX_FORGETTING_ROUNDS`` fits), from two starts (the better surrogate kept)."""
        family, num, dt = self._family, self.num_components, self.dtype
        base, previous = family.init_clusters(num), state.params
        key = random.fold_in(state.rng_key, state.num_batches)

        def fit_at(rho, claimed_only=False):
            prior = family.interpolate(previous, base, rho)
            return prior, self._fit(prior, obs, mask, key, claimed_only)

        if not isinstance(self.forgetting, str):
            rho = jnp.full(num, self.forgetting, dt)
            fit = fit_at(rho)[1]
            value, rounds, converged, num_iter = fit.elbo, 1, fit.converged, fit.num_iter
        else:

            def alternate(rho, claimed_first):
                """Fits alternated with the ω update from ``E[ρ] = rho`` until the surrogate
                settles (at most ``MAX_FORGETTING_ROUNDS`` fits)."""

                def round_(carry):
                    rho, _, value, _, num_iter, rounds, converged = carry
                    # a remembering start's first round fits from the components' claim on
                    # the batch, so that a component whose data moved is pulled by them and
                    # the ω update sees the change (from the better of both starts, a moved
                    # cluster is born anew in a free slot, the old one keeps its posterior
                    # and ρ stays high)
                    prior, fit = fit_at(rho, claimed_only=claimed_first & (rounds == 0))
                    rho, surrogate = self._learned_rho(fit, prior, base, previous)
                    settled = jnp.abs(surrogate - value) <= self.tol * jnp.abs(surrogate)
                    num_iter, converged = num_iter + fit.num_iter, converged & fit.converged
                    return rho, fit, surrogate, settled, num_iter, rounds + 1, converged

                def going(carry):
                    return ~carry[3] & (carry[5] < MAX_FORGETTING_ROUNDS)

                shapes = jax.eval_shape(lambda: fit_at(rho)[1])
                blank = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
                zero = jnp.zeros((), jnp.int32)
                start = (rho, blank, jnp.asarray(jnp.inf, dt), jnp.zeros((), bool), zero, zero)
                # E[ρ] of the final q(ρ | ω); the last fit used the round before's (they agree
                # once the surrogate has settled)
                return lax.while_loop(going, round_, (*start, jnp.ones((), bool)))

            # two starts, the better surrogate kept: ω at γ (the prior of ρ_t, with the
            # components' claim first) and ρ = 0 (the batch on its own). From the first alone
            # the alternation can settle on remembering although the batch has changed: the
            # strong remembered components swallow it and the fit stays close to them
            # (digits stream of `python -m numpyro_bnp bench power_prior`, noise from batch
            # 11: E[ρ] 1.000 and ARI 0.00 from then on)
            prior_rho = truncated_exponential_mean(jnp.asarray(self.gamma, dt))
            rhos = jnp.stack([jnp.full(num, prior_rho, dt), jnp.zeros(num, dt)])
            runs = jax.vmap(alternate)(rhos, jnp.array([True, False]))
            best = jnp.argmax(runs[2])
            rho, fit, value, _, _, _, _ = jax.tree.map(lambda a: a[best], runs)
            num_iter, rounds, converged = jnp.sum(runs[4]), jnp.sum(runs[5]), jnp.all(runs[6])
        new = PowerPriorState(
            params=fit.params,
            counts=fit.phi.sum(0),
            rho=rho.astype(dt),
            num_batches=state.num_batches + 1,
            num_seen=state.num_seen + jnp.sum(mask).astype(jnp.int32),
            rng_key=state.rng_key,
        )
        info = PowerPriorInfo(
            expected_rho=new.rho,
            elbo=value,
            num_clusters=jnp.sum(_weights(new, self._alpha) > CLUSTER_WEIGHT).astype(dt),
            num_iter=jnp.asarray(num_iter, jnp.int32),
            rounds=jnp.asarray(rounds, jnp.int32),
            converged=jnp.asarray(converged),
        )
        return new, info

    def update(self, state, batch):
        """Absorb one batch: ``(state, info)`` (the ``partial_fit`` of a stream).

        ``state`` and ``batch`` ``(n, D)`` are checked first (:meth:`check_state`,
        :meth:`check_batch`): a bad batch raises and ``state``, which is never modified, stays
        valid. Warns when a fit stopped at
        ``max_iter`` before meeting ``tol``, or when every component holds more than
        ``CLUSTER_WEIGHT`` of the predictive weight (the truncation may be too small).

        :return: the new :class:`PowerPriorState` and the batch's :class:`PowerPriorInfo`.
        :raises NonFiniteStateError: when the fit turns NaN (the state passed in is kept).
        """
        self.check_state(state)
        rows = self.check_batch(batch)
        num = rows.shape[0]
        size = -(-num // _PAD) * _PAD
        obs = np.zeros((size, self.dim), self.dtype)
        obs[:num] = rows
        mask = (np.arange(size) < num).astype(self.dtype)
        new, info = self._update_fn(state, jnp.asarray(obs), jnp.asarray(mask))
        bad = streaming.nonfinite_fields(new)
        if bad:
            raise streaming.NonFiniteStateError(
                f"batch {int(state.num_batches) + 1} made the state's {bad} NaN or infinite; "
                "the state passed in is unchanged (check the data's scale against the "
                "component prior)"
            )
        batch_no = int(new.num_batches)
        if not bool(info.converged):
            warnings.warn(
                f"batch {batch_no}: the collapsed fit stopped after max_iter={self.max_iter} "
                f"sweeps before its ELBO met tol={self.tol}; raise max_iter or tol",
                RuntimeWarning,
                stacklevel=2,
            )
        if int(info.num_clusters) == self.num_components:
            warnings.warn(
                f"batch {batch_no}: every one of the T={self.num_components} components holds "
                f"more than {CLUSTER_WEIGHT:.0%} of the weight: the truncation may be too "
                "small (raise the model's truncation or the engine's)",
                RuntimeWarning,
                stacklevel=2,
            )
        return new, info

    def run(
        self, rng_key, batches, *model_args, progress_bar=True, init_state=None, **model_kwargs
    ):
        """Fit a stream of batches, one :meth:`update` each.

        :param rng_key: a JAX PRNG key (the seeding of the fits; a resumed state keeps its own).
        :param batches: an iterable of arrays ``(n_t, D)`` (a single 2-D array is one batch).
        :param progress_bar: a ``tqdm`` bar over the batches, showing the clusters and E[ρ].
        :param init_state: continue from this state (e.g. :meth:`load`), checked first.
        :return: :class:`PowerPriorResult`; its traces hold one entry per batch.
        """
        state = self._start(rng_key, model_args, model_kwargs, init_state)
        if isinstance(batches, np.ndarray | jax.Array) and np.ndim(batches) == 2:
            batches = [batches]
        infos, times = [], []
        bar = _progress(batches, progress_bar)
        try:
            for batch in bar:
                state, info = self.update(state, batch)
                infos.append(jax.tree.map(np.asarray, info))
                times.append(int(state.num_batches))
                if progress_bar:
                    bar.set_postfix(
                        clusters=int(info.num_clusters), rho=f"{info.expected_rho.mean():.3f}"
                    )
        finally:
            if progress_bar:
                bar.close()
        if not infos:
            raise ValueError("batches is empty: pass an iterable of (n, D) arrays")
        traces = {k: np.stack([getattr(i, k) for i in infos]) for k in PowerPriorInfo._fields}
        return PowerPriorResult(self, state, traces, np.asarray(times))

    # ------------------------------------------------------------------ read-outs
    def _scores(self, state, obs):
        """``(M, T)`` log weight plus log predictive of each row under each component."""
        log_w = jnp.log(_weights(state, self._alpha))
        log_pred = jax.vmap(lambda x: self._family.log_predictive(state.params, x))(obs)
        return log_w + log_pred

    def _score_rows(self, state, obs, batch_size):
        rows = self.check_batch(obs, name="obs")
        batch_size = positive_int(batch_size, "batch_size")
        out = []
        for start in range(0, rows.shape[0], batch_size):
            block = rows[start : start + batch_size]
            pad = np.zeros((batch_size, self.dim), self.dtype)
            pad[: len(block)] = block
            out.append(np.asarray(self._score_fn(state, jnp.asarray(pad)))[: len(block)])
        return np.concatenate(out)

    def log_predictive(self, state, obs, *, batch_size=256):
        """``(M,)`` the log density of each row of ``obs`` under the predictive mixture
        ``Σ_k π_k p(x | λ_k)`` (Student-t components for Gaussians; the weights of the last
        batch's expected sticks)."""
        return logsumexp(self._score_rows(state, obs, batch_size), axis=1)

    def predict_proba(self, state, obs, *, batch_size=256):
        """``(M, T)`` each row's posterior probability of each component."""
        scores = self._score_rows(state, obs, batch_size)
        return np.exp(scores - logsumexp(scores, axis=1, keepdims=True))

    def predict(self, state, obs, *, batch_size=256):
        """``(M,)`` each row's most probable component."""
        return np.argmax(self._score_rows(state, obs, batch_size), axis=1)

    def posterior_draws(self, rng_key, state, num_draws, obs=None):
        """Draws of the sticks ``v_k ~ Beta(1 + N_k, α + N_{>k})`` (the last batch's counts),
        their ``weights`` and the components, under the model's site names, for ``to_arviz``."""
        del obs
        key_w, key_c = random.split(rng_key)
        counts = state.counts
        above = jnp.cumsum(counts[::-1])[::-1] - counts
        sticks = random.beta(
            key_w, 1.0 + counts, self._alpha + above, shape=(num_draws, counts.shape[0])
        )
        weights = stick_breaking_weights(sticks[:, :-1])
        keys = random.split(key_c, num_draws)
        components = jax.vmap(lambda k: self._family.sample(k, state.params))(keys)
        draws = {"weights": weights, **self.spec.component_values(components)}
        dims = {}
        for site, value in draws.items():
            dims[site] = ["cluster"] + [f"{site}_dim_{i}" for i in range(np.ndim(value) - 2)]
        coords = {"cluster": np.arange(counts.shape[0])}
        if self.spec.sticks_site is not None:  # the model's sticks site, e.g. ``v``
            draws[self.spec.sticks_site] = sticks[:, :-1]
            dims[self.spec.sticks_site] = ["stick"]
            coords["stick"] = np.arange(counts.shape[0] - 1)
        return draws, dims, coords


def _progress(batches, enabled):
    if not enabled:
        return batches
    from tqdm.auto import tqdm

    return tqdm(batches, desc="PowerPriorSVB", unit="batch")


class PowerPriorResult(streaming.StreamingResult):
    """The end of a :class:`PowerPriorSVB` run: the final ``state`` and one trace entry per
    batch (:class:`PowerPriorInfo` fields; ``time`` is the batch number)."""

    @property
    def expected_rho(self):
        """``(num_batches, T)`` E[ρ] of each batch and component."""
        return self.traces["expected_rho"]

    @property
    def weights(self):
        """``(T,)`` the predictive mixture's weights."""
        return np.asarray(_weights(self.state, self.engine._alpha))

    @property
    def components(self):
        """The components' posterior parameters (the family's ``NamedTuple``, leading ``T``)."""
        return jax.tree.map(np.asarray, self.state.params)

    def log_predictive(self, obs, *, batch_size=256):
        """See :meth:`PowerPriorSVB.log_predictive`."""
        return self.engine.log_predictive(self.state, obs, batch_size=batch_size)

    def predict_proba(self, obs, *, batch_size=256):
        """See :meth:`PowerPriorSVB.predict_proba`."""
        return self.engine.predict_proba(self.state, obs, batch_size=batch_size)

    def predict(self, obs, *, batch_size=256):
        """See :meth:`PowerPriorSVB.predict`."""
        return self.engine.predict(self.state, obs, batch_size=batch_size)
