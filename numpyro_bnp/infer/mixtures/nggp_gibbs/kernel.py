r"""The collapsed ("marginal") Gibbs sampler for NGGP mixtures, as a NumPyro ``MCMCKernel``.

Favaro & Teh, *MCMC for normalized random measure mixture models*, Stat. Sci. 2013 (the
marginal sampler of their Section 3; ``docs/nrm.md``, "The marginal Gibbs sampler"). The model
is a mixture whose partition has an :class:`~numpyro_bnp.distributions.NGGP` prior (mass ``a``,
discount ``σ``, tilt ``τ``) and whose components are conjugate to the likelihood
(:mod:`numpyro_bnp.families`):

.. math::
    z \sim \mathrm{NGGP}(a, σ, τ), \quad θ_k \sim H_0, \quad x_n \mid z, θ \sim F(θ_{z_n}).

The components are integrated out: the chain's state is the partition ``z`` and an auxiliary
variable ``U``, and one MCMC iteration is one sweep of four steps (an exact draw of ``log U``,
the NGGP's hyper-parameter sites, each label in turn, ``split_merge`` merge–split moves), set
out with their equations in :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep`.

The components in the sample are draws from their conjugate posteriors given the partition
(empty slots: prior draws); they are output, not part of the chain. Labels are canonical
(clusters numbered in order of first appearance), so the sample is a valid value of the model's
NGGP site.

**Components that are not conjugate** (any prior in the clusters plate, any likelihood that reads
each row's own cluster) are kept in the chain instead and the labels move with auxiliary
components, Neal's Algorithm 8 (:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.auxiliary`;
``docs/nrm.md``,
"Components that are not conjugate"); the kernel's ``collapsed`` attribute says which sampler the
model got.

**Capacity.** The clusters live in the model's clusters plate (``K`` slots, the
``max_clusters`` of the ready models; each row costs ``K`` predictives). A sweep that finds all
slots occupied when a row could open a new cluster runs on the truncated model: its
``saturated`` field is True and a ``RuntimeWarning`` says so on the host, with how many of the
chain's passes were saturated (the first state's sequential pass counts as one), again each time
that count doubles, for one chain or vectorized chains
(:func:`numpyro_bnp.infer.core.mcmc.report_saturation`); with ``on_saturation="error"`` the run
stops instead. Rebuild the model with a larger ``max_clusters``.

**First state.** Without ``init_params`` a chain starts from one sequential pass in which row
``n`` joins a cluster with the exact predictive of the first ``n - 1`` rows' partition,
``(n_k - σ) V_{n,K}`` against ``V_{n,K+1}`` (Gibbs-type EPPF weights), times the conjugate
predictive: a draw of the sequential (particle) approximation of the posterior. Hyper-parameter
sites start at the values in ``init_params``, else at the reader's fixed point of their support
(as a block of ``numpyro.infer.Gibbs``: the composite's prior draws).
"""

import copy
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import logsumexp
from numpyro import handlers
from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity

from numpyro_bnp._checks import FixedOptions, is_concrete, model_function, nonnegative_int
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer.core import streaming
from numpyro_bnp.infer.core.mcmc import (
    chains_batched,
    on_saturation_option,
    over_chains,
    report_saturation,
    with_deterministic,
)
from numpyro_bnp.infer.core.model import trace_model, unwrap
from numpyro_bnp.infer.core.tempering import temperature_ladder, temperatures_option
from numpyro_bnp.infer.mixtures.documents import check_documents
from numpyro_bnp.infer.mixtures.model import read_mixture_model
from numpyro_bnp.infer.mixtures.nggp_gibbs import auxiliary
from numpyro_bnp.infer.mixtures.nggp_gibbs.sweep import (
    NGGPMarginalGibbsState,
    _Config,
    _documents,
    _init_chain,
    _log_predictive_draws,
    _refresh,
    _step,
)
from numpyro_bnp.infer.mixtures.nggp_gibbs.tempering import tempered_init_chain, tempered_step

__all__ = ["NGGPMarginalGibbs", "NGGPMarginalGibbsState"]

_ENGINE = "NGGPMarginalGibbs"


def _check_width(most, width):
    if most > width:
        raise ValueError(
            f"{_ENGINE}: a document has {int(most)} distinct words, more than the {width} of "
            "the data the chain was started on; start a new chain (MCMC.run without "
            "post_warmup_state) on these documents"
        )


def _default_pairs(num_rows, num_pairs):
    """``num_pairs`` distinct pairs of distinct rows, fixed (NumPy seed 0)."""
    if num_rows < 2:
        return ()
    rng = np.random.default_rng(0)
    total = num_rows * (num_rows - 1) // 2
    picks = rng.choice(total, size=min(num_pairs, total), replace=False)
    first = np.floor((1 + np.sqrt(1 + 8 * picks)) / 2).astype(int)  # pick -> (first, second)
    second = picks - first * (first - 1) // 2
    return tuple((int(a), int(b)) for a, b in zip(second, first, strict=True))


class NGGPMarginalGibbs(FixedOptions, MCMCKernel):
    r"""Collapsed Gibbs sampling of NGGP mixtures (Favaro & Teh 2013), a NumPyro ``MCMCKernel``.

    See the module docstring and :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep` for the
    algorithm. The
    model is read through the mixture-model contract (``docs/model_contract.md``, "Mixture
    models"): an :class:`~numpyro_bnp.distributions.NGGP` partition site, component sites in a
    clusters plate of ``K`` slots with a prior conjugate to the likelihood, and one observed
    site, e.g. :func:`numpyro_bnp.models.nggp_gaussian_mixture`. Traced without data
    (``obs=None``) the chain samples the partition prior.

    **Hyper-parameters.** The NGGP's ``mass``, ``sigma`` and ``tau`` are numbers, or set by
    scalar latent sites of the model (its *hyper-parameter sites*), e.g.
    ``mass = numpyro.sample("mass", dist.Gamma(2.0, 2.0))``, ``sigma ~ Beta``, ``tau ~
    Gamma``, which the kernel updates exactly in each sweep
    (:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep`, step 2): a site that is the mass itself
    with a ``Gamma(α, β)`` prior by its conjugate draw ``a | z, U ~ Gamma(α + K, β + ψ(U)/a)``; any
    other (any prior, any function of the site) by slice sampling on its unconstrained line. A
    hyper-parameter site may set only the NGGP's parameters (or another such site's prior), and
    over its whole support they must be valid (``mass > 0``, ``0 <= sigma < 1``, ``tau >= 0``);
    otherwise a ``ValueError`` names it. Its values are in the sample, beside the labels and the
    components.

    **As a block of** :class:`numpyro.infer.Gibbs` the kernel updates the partition, the
    components and its hyper-parameter sites given the sites of the other blocks (e.g. a noise
    scale ``sigma_o ~ HalfNormal`` of a known-noise family, or the mass, sampled by
    ``NUTS``): each sweep reads the family (the components' prior and the noise) and the
    NGGP's parameters from the model conditioned on the other blocks' values, and
    :meth:`refresh` recomputes ``log_likelihood`` and ``log_joint`` after they moved. The block
    starts from its sequential pass (the labels ``Gibbs`` hands it are prior draws; its
    hyper-parameter sites start at theirs); ``Gibbs`` runs one chain per key
    (``chain_method="sequential"`` for several).

    Each MCMC iteration is one sweep. The sample (``sample_field``) is the dict of the model's
    site values: the canonical labels ``(N,)`` and one draw of the components ``(K, ...)``
    from their posterior given the labels, so ``arviz.from_numpyro`` computes the
    log-likelihood and ``numpyro.infer.Predictive`` runs on the samples. Diagnostics for
    ``extra_fields``: ``num_clusters``, ``log_u``, ``log_joint``, ``log_likelihood``,
    ``co_clustered`` and ``saturated`` (:class:`NGGPMarginalGibbsState`); with
    ``temperatures``, ``swap_rate``, ``swapped`` and the hot replicas' fields
    (``"replicas.num_clusters"``, ...). Chains start from a
    sequential pass (module docstring) or from ``init_params={partition site: labels (N,)}``
    (any integer labels in ``[0, K)``; hyper-parameter sites may be given too, the others
    start at a fixed point of their supports). Held-out rows: :meth:`log_predictive`.

    :param model: a NumPyro mixture model function of the form above.
    :param int num_pairs: how many fixed pairs of rows (NumPy seed 0) the ``co_clustered``
        diagnostic follows; or give them as ``pairs``.
    :param pairs: ``(P, 2)`` row indices, instead of ``num_pairs`` random ones.
    :param int split_merge: merge–split moves per sweep, after the labels
        (:mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.sweep`, step 4; ``0``: none; ``None``, the
        default: 5
        for conjugate components, 0 for others, which cannot have them: a positive value is
        refused there). Each is a pass over the rows with two predictives per row (the label
        sweep: ``K`` per row).
    :param str on_saturation: a pass in which every cluster slot was occupied ``"warn"`` s
        (the default) or raises (``"error"``; "Capacity" in the module docstring).
    :param int split_merge_scans: restricted Gibbs scans of the rows of each merge–split move
        after its sequential allocation (Jain & Neal 2004;
        :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.split_merge`):
        ``0``, the allocation is the split proposal (Dahl 2005); ``t ≥ 1``, it and ``t − 1``
        scans build the launch state and the last scan proposes. Each scan costs one more pass
        over the two clusters' rows.
    :param temperatures: tempered replicas (parallel tempering: Geyer 1991; Earl & Deem 2005;
        ``docs/nrm.md``, "Tempered replicas";
        :mod:`numpyro_bnp.infer.mixtures.nggp_gibbs.tempering`):
        ``None`` (default) runs one replica; a sequence of inverse temperatures
        ``1 = β_0 > β_1 > … > 0`` runs one replica per ``β_r``, replica ``r`` on
        ``p(h) p(z, U | h) p(X | z)^{β_r}`` (the collapsed marginal likelihood raised to
        ``β_r``: its label step and merge–split moves use the predictives to the power
        ``β_r``). All replicas of a chain are swept as one vectorized program (``R`` replicas
        cost about ``R`` sweeps); after each sweep adjacent replicas exchange their states,
        hyper-parameter sites included, with probability ``min(1, exp((β_r - β_{r+1})(ℓ_{r+1}
        - ℓ_r)))``, ``ℓ`` the untempered ``log_likelihood`` (even pairs after even sweeps, odd
        pairs after odd ones). An int ``R >= 2`` gives ``R`` replicas on the geometric ladder
        ``β_r = exp(-r √(2 / (N D)))``, ``N D`` the number of cells of the observed ``(N, D)``
        array (documents: ``D`` the vocabulary size; 1 without data), as ``CRMSlice``'s
        ladder. The sample and the fields are the untempered replica's (``saturated``: any
        replica's); ``swap_rate`` and ``swapped`` (``extra_fields``) report the exchanges
        (:class:`NGGPMarginalGibbsState`). Not as a block of :class:`numpyro.infer.Gibbs` (a
        ``ValueError``).
    :param int num_auxiliary: ``M``, the auxiliary components offered to each row when the
        components are not conjugate (Neal's Algorithm 8; default 3; ignored for conjugate
        components).

    :ivar collapsed: after :meth:`init`, True when the components are a conjugate pair and
        integrated out, False when they are sampled with auxiliary components.

    **Example**

    .. code-block:: python

        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp.infer import NGGPMarginalGibbs
        >>> from numpyro_bnp.models import nggp_normal_mixture
        >>> x = random.normal(random.PRNGKey(0), (30, 2))
        >>> mcmc = MCMC(NGGPMarginalGibbs(nggp_normal_mixture), num_warmup=20, num_samples=50,
        ...             progress_bar=False)
        >>> mcmc.run(random.PRNGKey(1), x, num_obs=30, dim=2, mass=1.0, sigma=0.25,
        ...          sigma_o=1.0, max_clusters=16, extra_fields=("num_clusters",))
        >>> mcmc.get_samples()["z"].shape, mcmc.get_extra_fields()["num_clusters"].shape
        ((50, 30), (50,))
    """

    sample_field = "z"

    fixed_options = (
        "num_pairs",
        "pairs",
        "split_merge",
        "split_merge_scans",
        "on_saturation",
        "temperatures",
        "num_auxiliary",
    )

    def __init__(
        self,
        model,
        *,
        num_pairs=8,
        pairs=None,
        split_merge=None,
        split_merge_scans=0,
        on_saturation="warn",
        temperatures=None,
        num_auxiliary=3,
    ):
        self._model = model_function(model)
        self.on_saturation = on_saturation_option(on_saturation, _ENGINE)
        self.num_pairs = nonnegative_int(num_pairs, "num_pairs")
        if split_merge is not None:
            split_merge = nonnegative_int(split_merge, "split_merge")
        self.split_merge = split_merge
        self.num_auxiliary = nonnegative_int(num_auxiliary, "num_auxiliary")
        if self.num_auxiliary < 1:
            raise ValueError(f"num_auxiliary must be at least 1, got {num_auxiliary!r}")
        self.split_merge_scans = nonnegative_int(split_merge_scans, "split_merge_scans")
        if pairs is not None:
            arr = np.asarray(pairs)
            if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype.kind not in "iu":
                raise ValueError(f"pairs must be integer row indices of shape (P, 2), got {arr}")
            pairs = tuple(map(tuple, arr.tolist()))
        self.pairs = pairs
        self.temperatures = temperatures_option(temperatures)
        self.collapsed = None
        self.spec = None
        self._cfg = None
        self._betas = None
        self._batched = False

    @property
    def temperature_ladder(self):
        """The inverse temperatures ``(β_0 = 1, β_1, …)`` of the replicas (``None`` without
        tempering, or before :meth:`init` for an int ``temperatures``)."""
        if self._betas is not None:
            return self._betas
        return None if isinstance(self.temperatures, int) else self.temperatures

    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return ("z", "num_clusters", "log_joint", "saturated")

    # ------------------------------------------------------------------ reading the model
    def _read(self, model_args, model_kwargs):
        spec = read_mixture_model(
            self._model, model_args, model_kwargs, _ENGINE, hyper=True, conjugate=False
        )
        self._dtype = dtype = jnp.result_type(float)
        self.collapsed = spec.family is not None
        family = jax.tree.map(lambda a: jnp.asarray(a, dtype), spec.family)
        self.spec, self._family = spec, family
        split_merge = self.split_merge
        if split_merge is None:
            split_merge = 5 if self.collapsed else 0
        elif split_merge and not self.collapsed:
            raise ValueError(
                f"{_ENGINE}: merge–split moves (split_merge={split_merge}) need components "
                "conjugate to the likelihood; this model's are not (they are sampled with "
                "auxiliary components, num_auxiliary): build the kernel with split_merge=0"
            )
        self._gibbs = bool(spec.given)
        x = self._observed(model_args, model_kwargs)
        width = spec.dim if spec.obs_kind == "documents" else 0
        if x is not None and is_concrete(x):
            spec.check_observed(x, f"the data of the observed site {spec.obs_site!r}")
            if spec.obs_kind == "documents":
                width = max(int(np.max(np.sum(np.asarray(x) != 0, axis=-1))), 1)
        pairs = self.pairs
        if pairs is None:
            pairs = _default_pairs(spec.num_rows, self.num_pairs)
        if not all(0 <= i < spec.num_rows and 0 <= j < spec.num_rows for i, j in pairs):
            raise ValueError(f"pairs must index rows 0..{spec.num_rows - 1}, got {pairs}")
        self._cfg = _Config(
            num_rows=spec.num_rows,
            capacity=spec.max_clusters,
            pairs=tuple(pairs),
            partition_site=spec.partition_site,
            doc_width=width,
            hyper_sites=spec.hyper_sites,
            conjugate_mass=spec.conjugate_mass,
            split_merge=split_merge if spec.num_rows >= 2 else 0,
            split_merge_scans=self.split_merge_scans,
        )
        cells = spec.num_rows * spec.dim if x is not None else 1
        self._betas = temperature_ladder(self.temperatures, cells)

    def _numbers(self, model_args, model_kwargs):
        """``values -> MixtureNumbers``: the model read at the hyper-parameter sites' values
        (and, in a Gibbs composite, the other blocks' values in ``model_kwargs``)."""
        return functools.partial(
            self.spec.numbers, model_args=model_args, model_kwargs=model_kwargs
        )

    def _family_at(self, numbers, model_args, model_kwargs):
        """The family of the model as ``numbers`` reads it, in the kernel's dtype; for
        components that are not conjugate, the
        :class:`~numpyro_bnp.infer.mixtures.nggp_gibbs.auxiliary.Components` of the model at the
        run's arguments."""
        dtype = self._dtype
        if self.collapsed:
            return jax.tree.map(lambda a: jnp.asarray(a, dtype), numbers({}).family)
        spec = self.spec
        at = dict(model_args=model_args, model_kwargs=model_kwargs)
        supports = tuple(spec.component_supports[name] for name in spec.component_sites)
        return auxiliary.Components(
            dtype=dtype,
            sites=spec.component_sites,
            supports=supports,
            terms=functools.partial(spec.component_terms, **at),
            draw=functools.partial(spec.draw_components, **at),
            num_auxiliary=self.num_auxiliary,
        )

    def _steps(self):
        """``(init, step, refresh)`` of the sweep: collapsed, or with auxiliary components."""
        if self.collapsed:
            return _init_chain, _step, _refresh
        return auxiliary.init_chain, auxiliary.step, auxiliary.refresh

    def _observed(self, model_args, model_kwargs):
        """The observed value ``(N, D)`` as the model gives it (traceable), None without data."""
        spec, family = self.spec, self._family
        if family is None:
            stand_in = {name: spec.held[name] for name in spec.component_sites}
        else:
            stand_in = spec.component_values(family.mean(family.init_clusters(spec.max_clusters)))
        stand_in[spec.partition_site] = jnp.zeros(spec.num_rows, jnp.int32)
        model = handlers.substitute(self._model, data=stand_in)
        site = trace_model(model, model_args, model_kwargs, _ENGINE)[spec.obs_site]
        return site["value"] if site["is_observed"] else None

    def _rows(self, model_args, model_kwargs):
        """The rows the sweep reads: dense ``(N, D)``, documents as :class:`SparseCounts`."""
        x = self._observed(model_args, model_kwargs)
        if x is None:
            return None
        x = jnp.asarray(x, self._dtype)
        if self.spec.obs_kind != "documents":
            return x
        width = self._cfg.doc_width
        if is_concrete(x):
            _check_width(int(np.max(np.sum(np.asarray(x) != 0, axis=-1))), width)
        else:
            # counts that are a constant of the compiled program (numpyro's sample loop): the
            # barrier keeps XLA from constant-folding their sort, for seconds per compile
            x = lax.optimization_barrier(x)
            jax.debug.callback(_check_width, jnp.max(jnp.sum(x != 0, axis=-1)), width)
        return _documents(x, width)

    def _to_sites(self, labels, theta, hyper=None):
        """The model's site values: the labels, the components ``theta`` (a family draw) and
        the hyper-parameter sites' values ``hyper``."""
        return {
            self.spec.partition_site: labels,
            **self.spec.component_values(theta),
            **(hyper or {}),
        }

    # ------------------------------------------------------------------ numpyro protocol
    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """A chain (or a batch of chains) at its first state (class docstring)."""
        self._read(model_args, model_kwargs)
        cfg = self._cfg
        if self._betas is not None and self._gibbs:
            raise ValueError(
                f"{_ENGINE}(temperatures=...) does not run as a block of numpyro.infer.Gibbs "
                "(the hot replicas would follow the other blocks' values of the untempered "
                "one); build it with temperatures=None there"
            )
        self._batched = chains_batched(rng_key, _ENGINE)
        labels, hyper = self._init_values(init_params, len(rng_key) if self._batched else None)
        rows = self._rows(model_args, model_kwargs)
        numbers = self._numbers(model_args, model_kwargs)
        family = self._family_at(numbers, model_args, model_kwargs)
        init_chain = self._steps()[0]
        if self._betas is None:
            init = functools.partial(
                init_chain, family=family, cfg=cfg, to_sites=self._to_sites, numbers=numbers
            )
        else:  # tempered replicas (module nggp_gibbs.tempering)
            init = functools.partial(
                tempered_init_chain,
                family=family,
                cfg=cfg,
                to_sites=self._to_sites,
                numbers=numbers,
                betas=self._betas,
                init=init_chain,
            )
        axes = (0, None, None if labels is None else 0, 0)
        # one compiled program: run eagerly, the first state costs a compilation per operation
        state = jax.jit(over_chains(init, self._batched, axes))(rng_key, rows, labels, hyper)
        self._report_saturation(state)
        return state

    def _report_saturation(self, state):
        """Say on the host that a pass of some chain found every slot occupied (the sweeps
        counted with the first state's sequential pass)."""
        report_saturation(
            state.saturated,
            state.num_saturated,
            state.i + 1,
            on_saturation=self.on_saturation,
            engine=_ENGINE,
            capacity=f"the clusters plate ({self._cfg.capacity} slots, the model's max_clusters)",
            remedy="Rebuild the model with a larger max_clusters (the size of its clusters plate)",
        )

    def _init_values(self, init_params, num_chains):
        """``(labels or None, {hyper-parameter site: value})`` of ``init_params``, checked.

        As a block of ``numpyro.infer.Gibbs`` the labels handed in are the composite's prior
        draws: the chain starts from its sequential pass instead (class docstring)."""
        cfg, spec = self._cfg, self.spec
        if init_params is None or (self._gibbs and not init_params):
            return None, self._start(num_chains)
        site = cfg.partition_site
        known = {site, *cfg.hyper_sites, *spec.component_sites}
        if not isinstance(init_params, dict) or not (site in init_params or self._gibbs):
            raise ValueError(f"init_params must be a dict with the partition site {site!r}")
        unknown = sorted(set(init_params) - known)
        if unknown:
            raise ValueError(
                f"init_params has sites {unknown} that are not {_ENGINE}'s; it takes the "
                f"partition site {site!r} and the hyper-parameter sites {list(cfg.hyper_sites)}"
            )
        batch = () if num_chains is None else (num_chains,)
        hyper = self._start(num_chains)
        for name in cfg.hyper_sites:
            if name in init_params:
                value = np.asarray(init_params[name])
                if value.shape != batch or not np.all(np.isfinite(value)):
                    raise ValueError(
                        f"init_params[{name!r}] must be finite of shape {batch}, got {value!r}"
                    )
                hyper[name] = jnp.asarray(value, self._dtype)
        if self._gibbs or site not in init_params:
            return None, hyper
        labels = np.asarray(init_params[site])
        expected = (*batch, cfg.num_rows)
        if labels.shape != expected or labels.dtype.kind not in "iu":
            raise ValueError(
                f"init_params[{site!r}] must be integer labels of shape {expected}, got "
                f"{labels.dtype} {labels.shape}"
            )
        if labels.min() < 0 or labels.max() >= cfg.capacity:
            raise ValueError(
                f"init_params[{site!r}] must lie in [0, {cfg.capacity}) (the model's "
                f"clusters plate), got labels from {labels.min()} to {labels.max()}"
            )
        return jnp.asarray(labels, jnp.int32), hyper

    def _start(self, num_chains):
        """The hyper-parameter sites' first values: the reader's fixed points of their
        supports (a standard normal draw of NumPy's seed 0 on the unconstrained line), one
        per chain."""
        batch = () if num_chains is None else (num_chains,)
        dtype = self._dtype
        return {
            name: jnp.broadcast_to(jnp.asarray(self.spec.held[name], dtype), batch)
            for name in self._cfg.hyper_sites
        }

    def sample(self, state, model_args, model_kwargs):
        if self._cfg is None:
            raise RuntimeError(f"{_ENGINE}.init must run before sample")
        rows = self._rows(model_args, model_kwargs)
        numbers = self._numbers(model_args, model_kwargs)
        tempered = self._betas is not None
        _, one_step, _ = self._steps()
        step = functools.partial(
            tempered_step if tempered else one_step,
            rows=rows,
            family=self._family_at(numbers, model_args, model_kwargs),
            cfg=self._cfg,
            to_sites=self._to_sites,
            numbers=numbers,
            **({"betas": self._betas, "step": one_step} if tempered else {}),
        )
        state = over_chains(step, self._batched)(state)
        self._report_saturation(state)
        return state

    # ------------------------------------------------------------------ block of numpyro Gibbs
    def refresh(self, state, model_args, model_kwargs):
        """The other Gibbs blocks moved: ``log_likelihood`` and ``log_joint`` recomputed at the
        family and the NGGP of the model conditioned on their values (the sample is kept)."""
        if not self._gibbs:
            return state
        numbers = self._numbers(model_args, model_kwargs)
        rows = self._rows(model_args, model_kwargs)
        refresh = functools.partial(
            self._steps()[2],
            rows=rows,
            family=self._family_at(numbers, model_args, model_kwargs),
            cfg=self._cfg,
            numbers=numbers,
        )
        return over_chains(refresh, self._batched)(state)

    def wrap_model(self, wrapper):
        """A copy on ``wrapper(model)`` (``numpyro.infer.Gibbs`` conditions the model this way)."""
        kernel = copy.copy(self)
        kernel._model = wrapper(self._model)
        kernel.spec = kernel._cfg = None
        return kernel

    def get_constrain_fn(self, model_args, model_kwargs):
        """Identity: the sample field holds the model's (constrained) site values."""
        return identity

    def postprocess_fn(self, model_args, model_kwargs):
        """The sampled site values plus the model's deterministic sites at them."""
        return with_deterministic(self._model, model_args, model_kwargs, engine=_ENGINE)

    # ------------------------------------------------------------------ held-out rows
    def log_predictive(self, samples, new_rows, *model_args, **model_kwargs):
        r"""``(M,)`` Monte-Carlo estimate of the posterior predictive ``log p(x* | X)`` of each
        new row: the average over the draws of the partition of its exact predictive given the
        partition,

        .. math::
            p(x^* \mid z, X) = \sum_k (n_k - σ) \frac{V_{N+1,K}}{V_{N,K}}\, p(x^* \mid X_k)
            + \frac{V_{N+1,K+1}}{V_{N,K}}\, p(x^* \mid H_0)

        (the ratio of the EPPFs with and without the new row, Gibbs-type priors; the conjugate
        predictives of the family; the weights sum to one by ``V_{N,K} = (N - Kσ) V_{N+1,K} +
        V_{N+1,K+1}``).

        :param samples: the run's samples (``mcmc.get_samples()``), or the labels ``(S, N)``
            when the model has no other latent scalar sites. Every scalar site of the model in
            ``samples`` (hyper-parameters, or a noise scale sampled by another block of
            ``numpyro.infer.Gibbs``) sets its draw's NGGP and components' family.
        :param new_rows: held-out rows ``(M, D)`` (documents: word counts, dense or
            ``scipy.sparse``), checked as the model's observed site.
        :param model_args, model_kwargs: the model's arguments of the run (its training data).
        """
        site, scalars = samples, ()
        if isinstance(samples, dict):
            site, scalars = self._sample_sites(samples, model_args, model_kwargs)
            site = samples[site]
        labels = jnp.asarray(site, jnp.int32)
        labels = labels.reshape(-1, labels.shape[-1])
        given = {}
        for name in scalars:
            value = jnp.asarray(samples[name], jnp.result_type(float))
            if value.size != labels.shape[0]:
                raise ValueError(
                    f"samples[{name!r}] must hold one value per draw ({labels.shape[0]}), got "
                    f"shape {tuple(value.shape)}"
                )
            given[name] = value.reshape(-1)
        kernel = self
        if given:  # read the model conditioned on them, as a block of numpyro.infer.Gibbs
            kernel = self.wrap_model(conditioned)
            model_kwargs = {**model_kwargs, GIBBS_SITES_KWARG: {n: v[0] for n, v in given.items()}}
        kernel._read(model_args, model_kwargs)
        cfg, spec, dtype = kernel._cfg, kernel.spec, kernel._dtype
        if labels.shape[-1] != cfg.num_rows:
            raise ValueError(
                f"the labels in samples must have {cfg.num_rows} columns (the model's rows), "
                f"got shape {tuple(labels.shape)}"
            )
        if cfg.hyper_sites:
            raise ValueError(
                f"samples must be the run's samples with the hyper-parameter sites "
                f"{list(cfg.hyper_sites)} (mcmc.get_samples())"
            )
        rows = kernel._rows(model_args, model_kwargs)
        if rows is None:
            raise ValueError(f"{_ENGINE}.log_predictive needs the training data in the model")
        if spec.obs_kind == "documents":
            new = check_documents(new_rows, vocab=spec.dim, dtype=dtype, name="new_rows")
        else:
            new = streaming.check_batch(new_rows, dim=spec.dim, dtype=dtype, name="new_rows")
            spec.check_observed(new, "new_rows")

        def numbers(values):
            kwargs = {**model_kwargs, GIBBS_SITES_KWARG: values} if values else model_kwargs
            return spec.numbers({}, model_args, kwargs)

        new = jax.tree.map(jnp.asarray, new)
        if kernel.collapsed:
            draws_fn = functools.partial(
                _log_predictive_draws, dtype=dtype, cfg=cfg, numbers=numbers
            )
            scores = jax.jit(draws_fn)(labels, given, rows, new)
        else:
            theta = kernel._sample_components(samples, labels.shape[0])
            comp = kernel._family_at(numbers, model_args, model_kwargs)
            draws_fn = functools.partial(
                auxiliary.log_predictive_draws, comp=comp, cfg=cfg, numbers=numbers
            )
            scores = jax.jit(draws_fn)(labels, theta, given, new, key=random.PRNGKey(0))
        return np.asarray(logsumexp(scores, axis=0) - np.log(labels.shape[0]))

    def _sample_components(self, samples, num_draws):
        """``{component site: (S, K, ...)}`` of ``samples`` (components that are not conjugate
        are part of the chain: the predictive needs them)."""
        spec = self.spec
        missing = [
            n for n in spec.component_sites if not isinstance(samples, dict) or n not in samples
        ]
        if missing:
            raise ValueError(
                f"samples must be the run's samples with the component sites {missing} "
                "(mcmc.get_samples()): this model's components are not conjugate, so the "
                "predictive reads them"
            )
        theta = {}
        for name in spec.component_sites:
            value = jnp.asarray(samples[name], self._dtype)
            shape = np.shape(spec.held[name])
            if value.size != num_draws * int(np.prod(shape)):
                raise ValueError(
                    f"samples[{name!r}] must hold one value of shape {shape} per draw "
                    f"({num_draws}), got shape {tuple(value.shape)}"
                )
            theta[name] = value.reshape(num_draws, *shape)
        return theta

    def _sample_sites(self, samples, model_args, model_kwargs):
        """``(the NGGP site's name, the model's latent scalar sites in samples)``, from one
        trace at the first draw of ``samples``."""
        first = {n: jnp.asarray(v)[0] for n, v in samples.items()}
        model = handlers.substitute(self._model, data=first)
        partition, scalars = None, []
        for name, site in trace_model(model, model_args, model_kwargs, _ENGINE).items():
            if site["type"] != "sample" or site["is_observed"]:
                continue
            if isinstance(unwrap(site["fn"]), NGGP):
                partition = name
            elif name in samples and site["fn"].shape() == ():
                scalars.append(name)
        if partition is None:
            raise ValueError(f"{_ENGINE} needs a model with an NGGP partition site")
        return partition, tuple(scalars)

    def get_diagnostics_str(self, state):
        sat = ", SATURATED" if bool(np.any(state.saturated)) else ""
        return f"{int(state.num_clusters)} clusters, log U {float(state.log_u):.3g}{sat}"
