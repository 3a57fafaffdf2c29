r"""Slice sampler for latent trait models with a completely random measure prior.

Zhu, Bouchard-Côté & Campbell, *Slice sampling for general completely random measures*, UAI 2020
(the steps and the choices that differ from the paper: ``docs/crm_slice.md``). The model (paper
Eq. 11): the atoms of a CRM are a series representation ``θ_k = τ(V_k, Γ_k)`` over the arrivals
``Γ_1 < Γ_2 < …`` of a unit-rate Poisson process with marks ``V_k ~ G``; each row ``n`` uses atom
``k`` ``X_nk ~ h(· | θ_k)`` times; the observations are ``y_n ~ N(Σ_k X_nk ψ_k, σ² I)`` with
traits ``ψ_k ~ N(μ_0, σ_0² I)``.

Slice variables ``U_n ~ Unif[0, ξ(k_n)]`` with ``k_n`` the last atom used by row ``n`` and
``ξ(k) = exp(-k / Δ_ξ)`` restrict row ``n`` to the atoms ``k <= K_n = ⌊-Δ_ξ log U_n⌋``, so only
finitely many atoms are ever instantiated; the rest (the tail) is integrated out exactly. One sweep
(the paper's steps, in this order, which matters; the slice density is paper Eq. 25):

1. ``U``: ``U_n = ξ(k_n) · Unif(0, 1)``, hence ``K_n = k_n + ⌊Δ_ξ E_n⌋`` with ``E_n ~ Exp(1)``;
2. reveal atoms up to ``K* = max_n K_n`` from the tail *given that no row uses them*: the thinned
   Poisson process with intensity ``du G(dv) Π_n h(0 | τ(v, u))`` (drawing them from the prior is
   biased: it ignores that no row uses them, see ``docs/crm_slice.md``, "Choices that differ from
   the paper");
3. ``X``: row by row, atoms ``k <= K_n`` in order, ``P(X_nk = x) ∝ h(x|θ_k) f(y_n|…) / ξ(k_n(x))``
   (two-point Gibbs for Bernoulli counts, a ±1 Metropolis step for Poisson / negative-binomial),
   then a few Metropolis exchange moves ``X_nj ↔ X_nk`` per row (not in the paper; they let rows
   move between near-duplicate atoms);
4. prune the trailing unused atoms back into the tail, reveal one sentinel atom;
5. ``Γ``: Metropolis for each interior arrival, flat on ``(Γ_{k-1}, Γ_{k+1})`` times the counts'
   likelihood (random-walk and uniform proposals alternate);
6. ``V``: logit random walk on the uniform coordinate ``P_k = F_G(V_k)`` (skipped when ``G`` is a
   point mass, e.g. the beta process with concentration 1);
7. ``ψ``: the conjugate matrix-normal draw ``Ψ | X, Y`` (each column ``d`` independent);
8. drop the sentinel.

The beta–negative-binomial topic model (paper §4.2) has Poisson word counts instead of the Normal
likelihood: its counts ``X_dk ~ NB(r_d, θ_k)`` are the topics' shares of the words of document
``d``, step 3 is a Gibbs pass over the topic of every word and step 7 the conjugate Dirichlet draw
of the topics (module :mod:`numpyro_bnp.infer._crm_topics`); for the models with a count site
step 3 is :mod:`numpyro_bnp.infer._crm_counts`. The prior side — atoms, count law, thinning, the
moves of steps 5 and 6 — is :mod:`numpyro_bnp.infer._crm_atoms`.

Atoms live in a fixed-capacity buffer; atoms ``k < num_atoms`` are instantiated. A sweep whose
slices ask for more atoms than the capacity is *saturated*: it runs on the truncated model and says
so in the ``saturated`` field. :meth:`CRMSlice.grow` pads a state to a larger capacity between runs.

Each state reports ``log_likelihood`` (``log p(y | X, ψ)``) and ``log_joint``, the log density of
the sampler's target at the state with the slice variables and the atoms after the last
instantiated one integrated out (module :mod:`numpyro_bnp.infer._crm_target`; the names of
``docs/vocabulary.md``).

As a block of :class:`numpyro.infer.Gibbs` the kernel updates the CRM, count and trait sites given
the sites of the other blocks (e.g. the noise scale, sampled by NUTS): each sweep reads the noise
variance and the trait prior from the conditioned model (:meth:`CRMSlice.sample`).
"""

import copy
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from numpyro.infer.gibbs import GIBBS_SITES_KWARG
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity

from numpyro_bnp._checks import (
    FixedOptions,
    model_function,
    nonnegative_int,
    positive_float,
    positive_int,
    renamed_arguments,
)
from numpyro_bnp._math import count_parity
from numpyro_bnp.distributions.crm import REPRESENTATIONS
from numpyro_bnp.distributions.ibp import num_active_features
from numpyro_bnp.infer import _crm_target as target
from numpyro_bnp.infer import _crm_topics as topic_model
from numpyro_bnp.infer._crm_atoms import AtomSeries
from numpyro_bnp.infer._crm_counts import update_counts
from numpyro_bnp.infer._crm_model import read_crm_trait_model
from numpyro_bnp.infer._linear_gaussian import feature_posterior, sample_feature_posterior
from numpyro_bnp.infer._mcmc import chains_batched, over_chains, with_deterministic

__all__ = ["CRMSlice", "CRMSliceState"]


class CRMSliceState(NamedTuple):
    """State of :class:`CRMSlice` (one chain; vectorized chains add a leading axis).

    :ivar i: iteration.
    :ivar z: the sample field: ``{count site: (N, C), trait site: (C, D)}`` plus ``{CRM site:
        (C,)}`` rates ``θ`` (0 beyond ``num_atoms``), for a capacity ``C``; for the topic model
        ``{CRM site: (C,), topic site: (C, V), rate site: (N, C)}`` (0 beyond ``num_atoms``).
    :ivar arrivals: ``(C,)`` arrival times ``Γ_k`` of the instantiated atoms (0 beyond).
    :ivar marks: ``(C,)`` uniform coordinates ``P_k = F_G(V_k)`` of the marks.
    :ivar obs: ``(N, D)`` observations (``(N, 0)`` for a prior-only model); for the topic model
        ``(N, L)`` word ids of each document's tokens (``-1``: padding).
    :ivar residual: ``(N, D)`` ``y - X ψ`` (``(N, 0)`` for a prior-only or topic model).
    :ivar counts: topic model: ``(N, C)`` counts ``X`` (tokens of document ``n`` on atom ``k``);
        ``(N, 0)`` for models with a count site (``X`` is in ``z``).
    :ivar allocation: topic model: ``(N, L)`` atom (0-based) of each token; else ``(N, 0)``.
    :ivar num_atoms: instantiated atoms ``K`` (the last used atom).
    :ivar num_active: atoms used by at least one row.
    :ivar parity: 1 if ``X`` has an even number of non-zero entries (label-invariant test
        function of the paper, Section 5).
    :ivar num_slice_atoms: ``K* = max_n K_n`` of this sweep, before clipping to the capacity.
    :ivar saturated: True when ``K*`` exceeded the capacity (this sweep was truncated).
    :ivar accept_gamma, accept_marks: acceptance rates of this sweep's Γ and V moves.
    :ivar log_likelihood: ``log p(y | X, ψ)`` (0 for a prior-only model); topic model:
        ``log p(y | rates, topics)`` at the rates drawn for the output.
    :ivar log_joint: the log density of the sampler's target at the state,
        ``log p(y, X, ψ_{1:K}, Γ_{1:K}, P_{1:K})`` (see
        :func:`~numpyro_bnp.infer._crm_target.log_joint`) with the slice variables, the atoms
        after the ``K``-th and their traits integrated out.
    """

    i: jnp.ndarray
    z: dict
    arrivals: jnp.ndarray
    marks: jnp.ndarray
    obs: jnp.ndarray
    residual: jnp.ndarray
    num_atoms: jnp.ndarray
    num_active: jnp.ndarray
    parity: jnp.ndarray
    num_slice_atoms: jnp.ndarray
    saturated: jnp.ndarray
    accept_gamma: jnp.ndarray
    accept_marks: jnp.ndarray
    log_likelihood: jnp.ndarray
    log_joint: jnp.ndarray
    counts: jnp.ndarray
    allocation: jnp.ndarray
    rng_key: jnp.ndarray


class CRMSlice(FixedOptions, MCMCKernel):
    r"""Slice sampler for CRM latent trait models, as a NumPyro MCMC kernel (module docstring).

    :param model: a NumPyro model with a CRM site and a count site (Bernoulli or
        negative-binomial counts of a ``BetaProcess``, Poisson counts of any CRM), or a
        ``RecursiveIBP`` site; a Normal trait site ``(K, D)``; a Normal observed site with mean
        ``X @ ψ`` (see :func:`~numpyro_bnp.infer._crm_model.read_crm_trait_model`), e.g.
        :func:`numpyro_bnp.models.linear_gaussian` or
        :func:`numpyro_bnp.models.beta_bernoulli_linear_gaussian`; or the beta–negative-binomial
        topic model :func:`numpyro_bnp.models.bnb_combinatorial_clustering`. Traced without data
        the model is sampled from its prior.
    :param str representation: series representation of the atoms: ``"bondesson"`` (default;
        ``θ = V e^{-Γ/c}``), ``"inverse_levy"`` (``θ = N^{-1}(Γ)``, decreasing atoms) or
        ``"rejection"`` (``θ = ν̃^{-1}(Γ)`` kept when ``V <= dν/dν̃``, else 0; ``V ~ Unif(0, 1)``,
        Campbell et al. 2019) — each where the prior has it
        (:meth:`CompletelyRandomMeasure.series`).
    :param float xi_scale: ``Δ_ξ`` of the slice sequence ``ξ(k) = exp(-k/Δ_ξ)``; it changes the
        speed, never the target.
    :param int max_features: capacity of the atom buffer (``max_atoms`` before); ``None``: the
        number of atoms of the model's CRM site (its ``truncation``, the ``max_features`` of the
        ready models) plus ``Δ_ξ (log N + 6)``.
    :param int n_gamma: Metropolis moves per arrival time and sweep (paper: 10).
    :param float gamma_step: scale of the Γ random walk, in units of ``c / sqrt(1 + Σ_n X_nk)``
        (``c`` the Bondesson constant): about the posterior spread of ``Γ_k``.
    :param int n_marks: Metropolis moves per mark and sweep.
    :param float mark_step: scale ``Δ_V`` of the logit random walk of the marks (paper: 0.3).
    :param int n_swaps: exchange moves per row and sweep after step 3 (``X_nj ↔ X_nk``; not in
        the paper, see :func:`~numpyro_bnp.infer._crm_counts.swap_moves`); 0 gives the paper's
        sweep.

    **Example**

    .. code-block:: python

        >>> import numpy as np
        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp.infer import CRMSlice
        >>> from numpyro_bnp.models import linear_gaussian
        >>> rng = np.random.default_rng(0)
        >>> y = (rng.random((100, 2)) < 0.5) @ rng.normal(size=(2, 5)) + 0.1 * rng.normal(
        ...     size=(100, 5))
        >>> mcmc = MCMC(CRMSlice(linear_gaussian), num_warmup=200, num_samples=200,
        ...             progress_bar=False)
        >>> mcmc.run(random.PRNGKey(0), y, num_obs=100, dim=5, sigma_o=0.1)
        >>> int(np.median(mcmc.get_extra_fields()["num_active"]))
        2
    """

    sample_field = "z"

    fixed_options = (
        "representation",
        "xi_scale",
        "max_features",
        "n_gamma",
        "gamma_step",
        "n_marks",
        "mark_step",
        "n_swaps",
    )

    @renamed_arguments(max_atoms="max_features")
    def __init__(
        self,
        model,
        *,
        representation="bondesson",
        xi_scale=1.0,
        max_features=None,
        n_gamma=10,
        gamma_step=1.0,
        n_marks=5,
        mark_step=0.3,
        n_swaps=5,
    ):
        model_function(model)
        if representation not in REPRESENTATIONS:
            raise ValueError(
                f"representation must be one of {REPRESENTATIONS}, got {representation!r}"
            )
        self._model = model
        self.representation = representation
        self.xi_scale = positive_float(xi_scale, "xi_scale")
        self.max_features = (
            None if max_features is None else positive_int(max_features, "max_features")
        )
        self.n_gamma = nonnegative_int(n_gamma, "n_gamma")
        self.gamma_step = positive_float(gamma_step, "gamma_step")
        self.n_marks = nonnegative_int(n_marks, "n_marks")
        self.mark_step = positive_float(mark_step, "mark_step")
        self.n_swaps = nonnegative_int(n_swaps, "n_swaps")
        self.spec = None
        self._batched = False
        self._gibbs = False
        self._sample_fn = None

    # ------------------------------------------------------------------ numpyro protocol
    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return (
            "z",
            "num_active",
            "parity",
            "num_atoms",
            "num_slice_atoms",
            "saturated",
            "accept_gamma",
            "accept_marks",
            "log_likelihood",
            "log_joint",
        )

    def get_diagnostics_str(self, state):
        sat = ", SATURATED" if bool(state.saturated) else ""
        return (
            f"K+ {int(state.num_active)}, atoms {int(state.num_atoms)}/"
            f"{state.arrivals.shape[-1]}{sat}, acc Γ {float(state.accept_gamma):.2f}"
        )

    def postprocess_fn(self, model_args, model_kwargs):
        """Zero the traits of unused atoms (their values are prior draws, not posterior), then add
        the model's deterministic sites at the sampled values.

        Topic model: no zeroing (topics and rates are zero beyond the instantiated atoms; unused
        instantiated atoms keep their prior topic and their ``Gamma(r_d, θ_k)`` rates).
        """
        spec = self.spec
        if self._topics:
            return with_deterministic(self._model, model_args, model_kwargs)

        def fn(z):
            used = jnp.any(z[spec.count_site] != 0, axis=-2)
            out = dict(z)
            out[spec.trait_site] = jnp.where(used[..., None], z[spec.trait_site], 0.0)
            return out

        return with_deterministic(self._model, model_args, model_kwargs, fn)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """A chain (or a batch of chains) with no instantiated atom.

        ``init_params`` is refused with a ``ValueError``: the sampler's state (arrival times,
        marks, the atom buffer) cannot be rebuilt from site values. As a block of
        :class:`numpyro.infer.Gibbs` the composite always hands every block its sites' values
        drawn from the prior; the block starts from its own empty state instead.
        """
        gibbs = bool(model_kwargs and model_kwargs.get(GIBBS_SITES_KWARG))
        given = init_params is not None and not (isinstance(init_params, dict) and not init_params)
        if given and not gibbs:
            raise ValueError(
                "CRMSlice does not take init_params (got sites "
                f"{sorted(init_params) if isinstance(init_params, dict) else init_params!r}): "
                "every chain starts from no instantiated atom, the first sweeps reveal them from "
                "the prior; to continue a run set mcmc.post_warmup_state = mcmc.last_state"
            )
        self._read(model_args, model_kwargs)
        self._batched = chains_batched(rng_key, "CRMSlice")
        self._sample_fn = over_chains(self._sample_one, self._batched)
        # one compiled program: run eagerly, the first state costs a compilation per operation
        return jax.jit(over_chains(self._init_one, self._batched))(rng_key)

    def sample(self, state, model_args, model_kwargs):
        if self._sample_fn is None:
            raise RuntimeError("CRMSlice.sample called before init")
        if self._gibbs:  # data and hyper-parameters follow the model's arguments and conditioning
            kernel, state = self._at(state, model_args, model_kwargs)
            return kernel._sample_one(state)
        return self._sample_fn(state)

    # ------------------------------------------------------------------ block of numpyro Gibbs
    def refresh(self, state, model_args, model_kwargs):
        """The other Gibbs blocks moved: recompute ``log_likelihood`` and ``log_joint`` at the new
        noise variance and trait prior.

        Nothing else is cached: :meth:`sample` reads the data and the Gaussian parameters itself.
        """
        if not self._gibbs:
            return state
        kernel, state = self._at(state, model_args, model_kwargs)
        spec = self.spec
        zero = jnp.zeros((), self.dtype)
        log_lik = (
            target.log_likelihood(state.residual, kernel._noise_var) if self._observed else zero
        )
        theta = kernel._theta(state.arrivals, state.marks, state.num_atoms)
        log_joint = kernel._log_joint(
            theta,
            state.arrivals,
            state.num_atoms,
            state.z[spec.count_site],
            state.z[spec.trait_site],
            log_lik,
        )
        return state._replace(log_likelihood=log_lik, log_joint=log_joint)

    def wrap_model(self, wrapper):
        """A copy on ``wrapper(model)`` (``numpyro.infer.Gibbs`` conditions the model this way)."""
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel.spec = None
        kernel._sample_fn = None
        return kernel

    def get_constrain_fn(self, model_args, model_kwargs):
        """Identity: the sample field holds the model's (constrained) site values."""
        return identity

    def _at(self, state, model_args, model_kwargs):
        """The kernel and the state at the model's arguments and conditioning: a copy of the
        kernel with the model's noise variance and trait prior, and the state with its data and
        residual (traced values inside the compiled step)."""
        numbers = self.spec.numbers(state.z, model_args, model_kwargs)
        kernel = copy.copy(self)
        kernel._noise_var = jnp.asarray(numbers.noise_var, self.dtype)
        kernel._trait_loc = jnp.asarray(numbers.trait_loc, self.dtype)
        kernel._trait_var = jnp.asarray(numbers.trait_var, self.dtype)
        if self._observed:
            spec = self.spec
            obs = jnp.asarray(numbers.obs, self.dtype)
            x, traits = state.z[spec.count_site], state.z[spec.trait_site]
            state = state._replace(obs=obs, residual=obs - x.astype(self.dtype) @ traits)
        return kernel, state

    # ------------------------------------------------------------------ set-up
    def _read(self, model_args, model_kwargs):
        spec = read_crm_trait_model(self._model, model_args, model_kwargs, engine="CRMSlice")
        crm = spec.crm
        reasons = crm._representations()
        if reasons[self.representation] is not None:
            raise ValueError(
                f"CRMSlice: representation={self.representation!r} does not exist for the prior "
                f"of site {spec.crm_site or spec.count_site!r} ({type(crm).__name__}): "
                f"{reasons[self.representation]}"
            )
        self._gibbs = bool(model_kwargs and model_kwargs.get(GIBBS_SITES_KWARG))
        dt = jnp.result_type(float)
        n = spec.num_rows
        atoms = AtomSeries(
            crm,
            self.representation,
            spec.likelihood,
            spec.total_count,
            n,
            dt,
            n_gamma=self.n_gamma,
            gamma_step=self.gamma_step,
            n_marks=self.n_marks,
            mark_step=self.mark_step,
        )
        if self._gibbs and spec.crm_site is not None and not atoms.decreasing:
            # the other blocks evaluate the CRM density at the exported atoms, which is finite
            # only for decreasing atoms (the K largest); Bondesson atoms with random marks and
            # rejection atoms (zeros where rejected) are not in order
            raise ValueError(
                f"CRMSlice as a Gibbs block needs decreasing atoms at site {spec.crm_site!r}: "
                f"use representation='inverse_levy' (representation={self.representation!r} of "
                f"{type(crm).__name__} gives atoms out of order)"
            )
        self.spec = spec
        self.dtype = dt
        self._atoms = atoms
        self._observed = spec.obs_value is not None
        self._topics = spec.observation == "topics"
        if self._topics:
            self._topic_beta = jnp.asarray(spec.topic_concentration, dt)
            self._noise_var = None
            words = topic_model.document_tokens(spec.obs_value) if self._observed else None
            self._obs = None if words is None else jnp.asarray(words)
        else:
            self._obs = jnp.asarray(spec.obs_value, dt) if self._observed else None
            self._noise_var = jnp.asarray(spec.noise_var, dt)
            self._trait_loc = jnp.asarray(spec.trait_loc, dt)
            self._trait_var = jnp.asarray(spec.trait_var, dt)
            self._shared_var = bool(
                np.all(spec.noise_var == spec.noise_var[0])
                and np.all(spec.trait_var == spec.trait_var[0])
            )
        self._r = atoms.total_count
        if self._gibbs:
            # the other blocks run the model on the exported values: they need its shapes
            if self.max_features not in (None, spec.truncation):
                raise ValueError(
                    f"CRMSlice as a Gibbs block uses the {spec.truncation} atoms of the model's "
                    f"CRM site as its capacity (the other blocks see the model's shapes); got "
                    f"max_features={self.max_features}: set the model's max_features (the CRM's "
                    "truncation) instead"
                )
            self.capacity = spec.truncation
        elif self.max_features is not None:
            self.capacity = self.max_features
        else:
            self.capacity = spec.truncation + math.ceil(self.xi_scale * (math.log(n) + 6.0))

    def _init_one(self, rng_key):
        """A chain's first state, its atoms instantiated up to the last used one (as after a
        sweep). With a count site: no count, no instantiated atom, traits from the prior. Topic
        model: every token on atom 1, at ``Γ_1 = 1``, uniform topics (any start with positive
        density will do; the first sweep moves them and computes ``θ``)."""
        spec, dt, cap, n = self.spec, self.dtype, self.capacity, self.spec.num_rows
        key, key_psi = random.split(rng_key)
        zero, empty = jnp.zeros((), dt), jnp.zeros((n, 0), jnp.int32)
        if self._topics:
            obs = self._obs if self._observed else empty
            allocation = jnp.zeros(obs.shape, jnp.int32)
            x = counts = topic_model.token_counts(obs, allocation, cap)
            traits = jnp.full((cap, spec.dim), 1.0 / spec.dim, dt)
            z = {spec.crm_site: jnp.zeros(cap, dt), spec.trait_site: traits}
            z[spec.rate_site] = jnp.zeros((n, cap), dt)
            residual, log_lik = jnp.zeros((n, 0), dt), zero
        else:
            x, traits = jnp.zeros((n, cap), jnp.int32), self._draw_traits(key_psi, cap)
            z = {spec.count_site: x, spec.trait_site: traits}
            if spec.crm_site is not None:
                z[spec.crm_site] = jnp.zeros(cap, dt)
            obs = residual = self._obs if self._observed else jnp.zeros((n, 0), dt)
            log_lik = target.log_likelihood(residual, self._noise_var) if self._observed else zero
            counts = allocation = empty
        num_atoms = jnp.any(x > 0).astype(jnp.int32)
        arrivals = jnp.zeros(cap, dt).at[0].set(num_atoms.astype(dt))
        marks = jnp.full(cap, 0.5, dt)
        theta = self._theta(arrivals, marks, num_atoms)
        log_joint = self._log_joint(theta, arrivals, num_atoms, x, traits, log_lik, allocation, obs)
        return CRMSliceState(
            i=jnp.zeros((), jnp.int32),
            z=z,
            arrivals=arrivals,
            marks=marks,
            obs=obs,
            residual=residual,
            num_atoms=num_atoms,
            num_active=num_active_features(x).astype(jnp.int32),
            parity=count_parity(x),
            num_slice_atoms=jnp.zeros((), jnp.int32),
            saturated=jnp.zeros((), bool),
            accept_gamma=zero,
            accept_marks=zero,
            log_likelihood=log_lik,
            log_joint=log_joint,
            counts=counts,
            allocation=allocation,
            rng_key=key,
        )

    @renamed_arguments(max_atoms="max_features")
    def grow(self, state, max_features=None):
        """Pad ``state`` (one chain or a batch) to capacity ``max_features`` (default: double;
        ``max_atoms`` before).

        Between runs: ``mcmc.post_warmup_state = kernel.grow(mcmc.last_state)`` then
        ``mcmc.run(...)`` continues the chains with the larger buffer (one recompilation).
        """
        old = state.arrivals.shape[-1]
        new = 2 * old if max_features is None else positive_int(max_features, "max_features")
        if new < old:
            raise ValueError(f"max_features must be >= the current capacity {old}, got {new}")
        pad = new - old
        spec = self.spec

        def pad_last(x, axis):
            widths = [(0, 0)] * x.ndim
            widths[axis] = (0, pad)
            return jnp.pad(x, widths)

        z = dict(state.z)
        z[spec.trait_site] = pad_last(z[spec.trait_site], -2)
        for name in (spec.count_site, spec.crm_site, spec.rate_site):
            if name is not None:
                z[name] = pad_last(z[name], -1)
        self.capacity = new
        return state._replace(
            z=z,
            counts=pad_last(state.counts, -1) if self._topics else state.counts,
            arrivals=pad_last(state.arrivals, -1),
            marks=jnp.pad(
                state.marks, [(0, 0)] * (state.marks.ndim - 1) + [(0, pad)], constant_values=0.5
            ),
            saturated=jnp.zeros_like(state.saturated),
        )

    # ------------------------------------------------------------------ model pieces
    def _draw_traits(self, key, num):
        """``num`` i.i.d. traits from the prior ``H = N(μ_0, σ_0² I)`` (topics: ``Dir(β)``):
        ``(num, D)``."""
        if self._topics:
            zeros = jnp.zeros((num, self.spec.dim), self.dtype)
            return topic_model.draw_topics(key, self._topic_beta, zeros)
        eps = random.normal(key, (num, self.spec.dim), self.dtype)
        return self._trait_loc + jnp.sqrt(self._trait_var) * eps

    def _theta(self, arrivals, marks, num_atoms):
        """``(C,)`` atoms ``θ_k = τ(V_k, Γ_k)`` of the instantiated atoms, 0 beyond."""
        live = jnp.arange(arrivals.shape[-1]) < num_atoms
        return jnp.where(live, self._atoms.theta(jnp.where(live, arrivals, 1.0), marks), 0.0)

    def _log_joint(
        self, theta, arrivals, num_atoms, x, traits, log_lik, allocation=None, words=None
    ):
        """The ``log_joint`` field: :func:`~numpyro_bnp.infer._crm_target.log_joint` at this
        kernel's prior (the topic concentration, or the trait prior ``N(μ_0, σ_0² I)``)."""
        if self._topics:
            data = {"allocation": allocation, "words": words} if self._observed else {}
            prior = {"topic_beta": self._topic_beta, **data}
        else:
            prior = {"trait_loc": self._trait_loc, "trait_var": self._trait_var}
        return target.log_joint(
            self._atoms, theta, arrivals, num_atoms, x, traits, log_lik, **prior
        )

    # ------------------------------------------------------------------ sweep steps
    def _reveal(self, key, gamma, marks, traits, start, stop):
        """Instantiate atoms ``start..stop-1`` (0-based) from the thinned tail."""

        def body(j, carry):
            gamma, marks, traits, key = carry
            key, k_thin, k_trait = random.split(key, 3)
            previous = jnp.where(j > 0, gamma[jnp.maximum(j - 1, 0)], 0.0)
            u, mark = self._atoms.thin(k_thin, previous)
            trait = self._draw_traits(k_trait, 1)[0]
            return gamma.at[j].set(u), marks.at[j].set(mark), traits.at[j].set(trait), key

        gamma, marks, traits, _ = lax.fori_loop(start, stop, body, (gamma, marks, traits, key))
        return gamma, marks, traits

    def _trait_step(self, key, x, obs, allocation):
        """``Ψ | X, Y``: per column, ``N(P^{-1} b, P^{-1})`` with ``P = XᵀX/σ² + I/σ_0²``.

        Topic model: ``ψ_k ~ Dir(β + word counts of the tokens on atom k)``.
        """
        cap = x.shape[1]
        if not self._observed:
            return self._draw_traits(key, cap)
        if self._topics:
            words = topic_model.word_counts(obs, allocation, cap, self.spec.dim, self.dtype)
            return topic_model.draw_topics(key, self._topic_beta, words)
        xf = x.astype(self.dtype)
        noise_var, trait_var = self._noise_var, self._trait_var
        if self._shared_var:  # one precision matrix for all columns
            noise_var, trait_var = noise_var[0], trait_var[0]
        mean, chol = feature_posterior(xf.T @ xf, xf.T @ obs, noise_var, trait_var, self._trait_loc)
        return sample_feature_posterior(key, mean, chol)

    # ------------------------------------------------------------------ one sweep
    def _sample_one(self, state):
        spec = self.spec
        x = state.counts if self._topics else state.z[spec.count_site]
        traits = state.z[spec.trait_site]
        cap = x.shape[1]
        index = jnp.arange(1, cap + 1, dtype=jnp.int32)
        key, k_u, k_ext, k_x, k_sent, k_g, k_v, k_psi = random.split(state.rng_key, 8)

        # 1. slice variables: K_n = k_n + floor(Δ_ξ E_n)
        last = jnp.max(jnp.where(x > 0, index, 0), axis=1).astype(jnp.int32)
        e = random.exponential(k_u, last.shape, self.dtype)
        wanted = last + jnp.floor(self.xi_scale * e).astype(jnp.int32)
        slice_atoms = jnp.minimum(wanted, cap).astype(jnp.int32)
        k_star = jnp.max(slice_atoms)
        num_slice_atoms = jnp.max(wanted)

        # 2. reveal atoms up to K* from the thinned tail
        gamma, marks = state.arrivals, state.marks
        num_atoms = jnp.maximum(state.num_atoms, k_star)
        gamma, marks, traits = self._reveal(k_ext, gamma, marks, traits, state.num_atoms, k_star)
        live = index <= num_atoms
        theta = jnp.where(live, self._atoms.theta(jnp.where(live, gamma, 1.0), marks), 0.0)

        # 3. counts, restricted by the slices
        allocation = state.allocation
        if self._topics and self._observed:  # the topic of every token
            allocation, x = topic_model.allocate_tokens(
                k_x, state.obs, allocation, x, theta, traits, self._r, slice_atoms, self.xi_scale
            )
            residual = state.residual
        else:
            noise_var = self._noise_var if self._observed else None
            x, residual = update_counts(
                k_x,
                x,
                state.residual,
                traits,
                theta,
                slice_atoms,
                k_star,
                atoms=self._atoms,
                noise_var=noise_var,
                xi_scale=self.xi_scale,
                n_swaps=self.n_swaps,
            )

        # 4. prune trailing unused atoms, reveal one sentinel
        used = jnp.any(x > 0, axis=0)
        num_atoms = jnp.max(jnp.where(used, index, 0)).astype(jnp.int32)
        with_sentinel = jnp.minimum(num_atoms + 1, cap).astype(jnp.int32)
        gamma, marks, traits = self._reveal(k_sent, gamma, marks, traits, num_atoms, with_sentinel)

        # 5.-6. arrivals and marks
        totals = jnp.sum(x, axis=0).astype(self.dtype)
        gamma, accept_gamma = self._atoms.move_arrivals(k_g, gamma, marks, totals, with_sentinel)
        marks, accept_marks = self._atoms.move_marks(k_v, gamma, marks, totals, with_sentinel)

        # 7. traits; 8. drop the sentinel
        traits = self._trait_step(k_psi, x, state.obs, allocation)
        live = index <= num_atoms
        gamma = jnp.where(live, gamma, 0.0)
        marks = jnp.where(live, marks, 0.5)
        theta = jnp.where(live, self._atoms.theta(jnp.where(live, gamma, 1.0), marks), 0.0)
        if self._topics:  # rates | X, θ for the output; nothing beyond the instantiated atoms
            key, k_rates = random.split(key)
            traits = jnp.where(live[:, None], traits, 0.0)
            rates = topic_model.draw_rates(k_rates, self._r, x, theta)
            z = {spec.crm_site: theta, spec.trait_site: traits, spec.rate_site: rates}
            log_lik = jnp.zeros((), self.dtype)
            if self._observed:
                log_lik = topic_model.log_likelihood(state.obs, rates, traits)
        else:
            if self._observed:
                residual = state.obs - x.astype(self.dtype) @ traits
                log_lik = target.log_likelihood(residual, self._noise_var)
            else:
                log_lik = jnp.zeros((), self.dtype)
            z = {spec.count_site: x, spec.trait_site: traits}
            if spec.crm_site is not None:
                z[spec.crm_site] = theta
        log_joint = self._log_joint(
            theta, gamma, num_atoms, x, traits, log_lik, allocation, state.obs
        )
        return CRMSliceState(
            i=state.i + 1,
            z=z,
            arrivals=gamma,
            marks=marks,
            obs=state.obs,
            residual=residual,
            num_atoms=num_atoms.astype(jnp.int32),
            num_active=num_active_features(x).astype(jnp.int32),
            parity=count_parity(x),
            num_slice_atoms=num_slice_atoms.astype(jnp.int32),
            saturated=num_slice_atoms > cap,
            accept_gamma=accept_gamma,
            accept_marks=accept_marks,
            log_likelihood=log_lik.astype(self.dtype),
            log_joint=log_joint,
            counts=x if self._topics else state.counts,
            allocation=allocation,
            rng_key=key,
        )
