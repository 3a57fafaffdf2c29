r"""ADF-NRM: one-pass streaming inference for mixtures under a normalized generalized gamma prior.

Tank, Foti & Fox, *Streaming variational inference for Bayesian nonparametric mixture models*,
AISTATS 2015, Section 3 (``docs/nrm.md``). The model is a mixture whose partition has an
:class:`~numpyro_bnp.distributions.NGGP` prior (mass ``a``, discount ``σ``, tilt ``τ``; the
Dirichlet process at σ = 0, the normalized inverse-Gaussian at σ = ½) and whose components are
conjugate to the likelihood (:mod:`numpyro_bnp.families`). Each observation ``x_n`` gets a
responsibility vector ``r_n`` over the ``K`` clusters instantiated so far and a new one, which
is then frozen (assumed density filtering):

.. math::
    r_{nk} \propto \max(E[n_k] - σ, 0)\, p(x_n \mid x_{<n}, k), \qquad
    r_{n,\mathrm{new}} \propto a (\hat U + τ)^σ\, p(x_n \mid H_0)

(the paper's Eq. 23 with the soft counts ``E[n_k] = Σ_{i<n} r_{ik}``; σ = 0 is Lin's (2013)
sequential variational DP algorithm, the paper's Eq. 19). ``Û`` is a mode of
``q(U) ∝ U^{m-1} (U+τ)^{σ E[K_m] - m} e^{-ψ(U)}`` after ``m = n - 1`` observations (Eq. 21;
:func:`numpyro_bnp._math.nggp_log_new_weight`), where the expected number of occupied clusters
``E[K_m] = Σ_k (1 - Π_{i≤m} (1 - r_{ik}))`` is kept by the recursion over
``ℓ_k = Σ_i log(1 - r_{ik})``. A new cluster is instantiated when ``r_{n,new}`` exceeds the
threshold ``ε ≥ σ`` (so that its soft count stays above σ); otherwise that mass is dropped and
``r_n`` renormalised over the existing clusters. Each cluster's conjugate posterior absorbs
``x_n`` with weight ``r_{nk}`` (``p(x | θ)^{r}``, the paper's mean-field update).

Reconstructions and choices (the paper's displayed equations and supplement are not available;
each one is checked numerically in the tests, see ``docs/nrm.md``): the soft-count form of
``q(U)`` (the reverse-KL optimum), the mode of ``log U`` by default (``u_estimate="log_mode"``;
with τ = 0 it gives ``a Û^σ = σ E[K]`` exactly, the Pitman–Yor(σ, 0) urn), the ``E[K]``
recursion, and the renormalisation of a dropped new-cluster mass.

Memory is O(K) cluster parameters; the work per observation is O(K) predictives (for documents
O(K · distinct words), never O(vocabulary)). The capacity (``max_clusters`` slots) doubles
outside ``jit`` when a new cluster finds no free slot (the chunk is re-run).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.special import gammaln, logsumexp

from numpyro_bnp._checks import (
    finite_float,
    finite_in_dtype,
    floating_dtype,
    model_function,
    positive_int,
    unit_interval,
)
from numpyro_bnp._math import nggp_log_new_weight
from numpyro_bnp.infer.core import streaming
from numpyro_bnp.infer.core.model_engine import ModelEngine
from numpyro_bnp.infer.mixtures.documents import check_documents
from numpyro_bnp.infer.mixtures.model import read_mixture_model

__all__ = ["ADFNRM", "NRMInfo", "NRMResult", "NRMState"]

_U_ESTIMATES = {"log_mode": "log", "mode": "linear"}
_MIN_CAPACITY = 16


class NRMState(NamedTuple):
    """ADF-NRM state after ``num_seen`` observations, for ``K`` cluster slots.

    :ivar params: the conjugate posterior parameters of every slot (the family's ``NamedTuple``,
        leading axis ``K``; free slots hold the prior).
    :ivar counts: ``(K,)`` soft counts ``E[n_k] = Σ_i r_ik``.
    :ivar log_empty: ``(K,)`` ``ℓ_k = Σ_i log(1 - r_ik)``, the log-probability that cluster ``k``
        is still unoccupied (0 for a free slot).
    :ivar active: ``(K,)`` bool, the instantiated clusters (the first ones, in creation order).
    :ivar num_clusters: ``()`` ``E[K_n] = Σ_k (1 - e^{ℓ_k})``.
    :ivar num_seen: ``()`` int32, observations absorbed.
    :ivar overflow: ``()`` bool, a new cluster found no free slot (the capacity is full).
    """

    params: NamedTuple
    counts: jnp.ndarray
    log_empty: jnp.ndarray
    active: jnp.ndarray
    num_clusters: jnp.ndarray
    num_seen: jnp.ndarray
    overflow: jnp.ndarray


class NRMInfo(NamedTuple):
    """Per-observation diagnostics.

    :ivar num_clusters: ``E[K_n]``, the expected number of occupied clusters.
    :ivar num_instantiated: clusters instantiated so far.
    :ivar log_predictive: ``log q(x_n | x_{<n})``, the one-step-ahead predictive of the
        observation before it was absorbed (the full mixture, new cluster included).
    :ivar new_cluster_prob: ``r_{n,new}`` before the threshold.
    :ivar log_u: ``log Û`` used for the observation (``nan`` for σ = 0, where none is needed).
    """

    num_clusters: jnp.ndarray
    num_instantiated: jnp.ndarray
    log_predictive: jnp.ndarray
    new_cluster_prob: jnp.ndarray
    log_u: jnp.ndarray


class ADFNRM(ModelEngine):
    """ADF-NRM streaming engine on a NumPyro NGGP mixture model (see the module docstring).

    :param model: a NumPyro mixture model with an :class:`~numpyro_bnp.distributions.NGGP`
        partition site, conjugate component sites in a plate over clusters and an observed site
        (the mixture-model contract, ``docs/model_contract.md``), e.g.
        :func:`numpyro_bnp.models.nggp_multinomial_mixture`.
    :param float new_cluster_threshold: ``ε``: a new cluster is instantiated when its
        responsibility exceeds ``ε``; ``ε ≥ σ`` is required (else the new cluster's prior
        weight ``E[n] - σ`` would be negative). ``None``: ``max(σ, 0.01)``.
    :param str u_estimate: ``"log_mode"`` (default) or ``"mode"``: the mode of ``q(log U)`` or of
        ``q(U)`` as the plug-in ``Û`` (see :func:`numpyro_bnp._math.nggp_log_new_weight`).
    :param int merge_every: every ``merge_every`` observations, merge pairs of clusters while a
        merge raises the collapsed objective by more than ``merge_threshold`` (see
        :meth:`merge_clusters`); ``None`` (default): no merges.
    :param float merge_threshold: the least gain, in nats, of a merge (default 0 with
        ``merge_every``); larger is more conservative.
    :param int max_clusters: fix the number of cluster slots (the run warns if a new cluster
        finds none free); ``None`` starts from 16 and doubles when needed.
    :param dtype: floating dtype of the state; default ``jnp.result_type(float)`` (float32
        unless x64 is on).

    **Example**

    .. code-block:: python

        >>> import numpy as np
        >>> from jax import random
        >>> from numpyro_bnp import models
        >>> from numpyro_bnp.infer import ADFNRM
        >>> rng = np.random.default_rng(0)
        >>> centres = np.array([[-4.0, 0.0], [4.0, 0.0], [0.0, 5.0]])
        >>> labels = rng.integers(3, size=600)
        >>> data = centres[labels] + 0.5 * rng.normal(size=(600, 2))
        >>> res = ADFNRM(models.nggp_normal_mixture).run(
        ...     random.PRNGKey(0), data, dim=2, mass=1.0, sigma=0.5, sigma_o=0.5,
        ...     sigma_mu=5.0, progress_bar=False)
        >>> np.sort(np.bincount(labels))[::-1], np.round(np.sort(res.cluster_sizes)[::-1][:3])
        (array([223, 189, 188]), array([222., 189., 186.], dtype=float32))

    The few points in the tails of the clusters make clusters of their own, of soft count one
    or two: the NGGP (σ = ½) expects many small clusters.
    """

    fixed_options = (
        "model",
        "new_cluster_threshold",
        "u_estimate",
        "merge_every",
        "merge_threshold",
        "max_clusters",
        "dtype",
    )
    # the streaming protocol (numpyro_bnp.infer.core.streaming.StreamingEngine)
    state_type = NRMState
    progress_key = "num_clusters"
    progress_label = "clusters"
    capacity_option = "max_clusters"

    def __init__(
        self,
        model,
        *,
        new_cluster_threshold=None,
        u_estimate="log_mode",
        merge_every=None,
        merge_threshold=None,
        max_clusters=None,
        dtype=None,
    ):
        model_function(model)
        if new_cluster_threshold is not None:
            new_cluster_threshold = unit_interval(new_cluster_threshold, "new_cluster_threshold")
        if u_estimate not in _U_ESTIMATES:
            raise ValueError(f"u_estimate must be 'log_mode' or 'mode', got {u_estimate!r}")
        if merge_every is not None:
            merge_every = positive_int(merge_every, "merge_every")
        if merge_threshold is not None:
            if merge_every is None:
                raise ValueError(
                    "merge_threshold is the least gain of a merge: it needs merge_every (how "
                    "often merges are tried)"
                )
            merge_threshold = finite_float(merge_threshold, "merge_threshold")
        elif merge_every is not None:
            merge_threshold = 0.0
        if max_clusters is not None:
            max_clusters = positive_int(max_clusters, "max_clusters")
        self.model = model
        self.merge_every = merge_every
        self.merge_threshold = merge_threshold
        self.new_cluster_threshold = new_cluster_threshold
        self.u_estimate = u_estimate
        self.max_clusters = max_clusters
        self.dtype = floating_dtype(dtype)

    @property
    def options(self):
        """The engine's options as JSON-storable values (recorded in checkpoints)."""
        return {
            "new_cluster_threshold": self.new_cluster_threshold,
            "u_estimate": self.u_estimate,
            "merge_every": self.merge_every,
            "merge_threshold": self.merge_threshold,
            "max_clusters": self.max_clusters,
            "dtype": np.dtype(self.dtype).name,
        }

    # ------------------------------------------------------------------ set-up
    def _read_model(self, model_args, model_kwargs):
        spec = read_mixture_model(self.model, model_args, model_kwargs, engine=type(self).__name__)
        eps = self.new_cluster_threshold
        if eps is None:
            eps = max(spec.sigma, 0.01)
        elif eps < spec.sigma:
            raise ValueError(
                f"new_cluster_threshold must be at least the model's sigma = {spec.sigma} "
                f"(a new cluster's prior weight E[n] - sigma must stay positive), got {eps}"
            )
        dt = self.dtype
        # constants fine in float64 can overflow or vanish in the working dtype
        site = repr(spec.partition_site)
        finite_in_dtype(spec.mass, f"mass of the NGGP site {site}", dtype=dt, positive=True)
        finite_in_dtype(spec.tau, f"tau of the NGGP site {site}", dtype=dt)
        for path, leaf in jax.tree_util.tree_leaves_with_path(spec.family.prior):
            name = f"the component prior's {jax.tree_util.keystr(path).lstrip('.')}"
            finite_in_dtype(leaf, name, dtype=dt, positive=bool(np.all(np.asarray(leaf) > 0)))
        self.spec = spec
        self.kind = f"nggp_{type(spec.family).__name__}"
        self.dim = spec.dim
        self.threshold = eps
        self._family = jax.tree.map(lambda a: jnp.asarray(a, dt), spec.family)
        self._mass, self._sigma, self._tau = (
            jnp.asarray(v, dt) for v in (spec.mass, spec.sigma, spec.tau)
        )
        self._one = jnp.asarray(1.0 - jnp.finfo(dt).eps, dt)  # r is clipped here inside log1p(-r)
        self.scan_chunk = streaming.chunk_scanner(self.update)
        self._score_fn = None

    def init(self, rng_key, *model_args, **model_kwargs):
        """Read the model (one trace) and return the empty state.

        :param rng_key: accepted for the engine protocol; ADF is deterministic.
        :param model_args, model_kwargs: arguments of the model (``num_obs`` only sizes the
            traced model, the stream is unbounded; see :func:`streaming.model_arguments`).
        """
        del rng_key
        self._read(model_args, model_kwargs)
        return self.empty(self.max_clusters or _MIN_CAPACITY)

    def empty(self, capacity):
        """The state of no observations with ``capacity`` free slots."""
        self._require_init()
        dt = self.dtype
        return NRMState(
            params=self._family.init_clusters(capacity),
            counts=jnp.zeros(capacity, dt),
            log_empty=jnp.zeros(capacity, dt),
            active=jnp.zeros(capacity, bool),
            num_clusters=jnp.zeros((), dt),
            num_seen=jnp.zeros((), jnp.int32),
            overflow=jnp.zeros((), bool),
        )

    # ------------------------------------------------------------------ streaming protocol
    def check_batch(self, batch, name="batch"):
        """Validate a batch on the host; return the rows the update reads.

        Documents (a multinomial likelihood): dense counts ``(n, V)``, one document ``(V,)`` or
        a ``scipy.sparse`` matrix ``(n, V)``, returned as
        :class:`~numpyro_bnp.families.SparseCounts` (never densified); other likelihoods: an
        array ``(n, D)`` (see :func:`streaming.check_batch`). The rows must lie in the support
        of the model's observed site (non-negative integer counts, 0/1 for Bernoulli data).
        """
        self._require_init()
        if self.spec.obs_kind == "documents":
            return check_documents(batch, vocab=self.dim, dtype=self.dtype, name=name)
        arr = streaming.check_batch(batch, dim=self.dim, dtype=self.dtype, name=name)
        self.spec.check_observed(arr, name)
        return arr

    def check_state(self, state, name="state"):
        """Check on the host that ``state`` can resume a stream here: an :class:`NRMState` with
        the structure, shapes and dtypes of this engine's states (``K`` slots), finite values,
        ``counts >= 0``, ``log_empty <= 0``, ``0 <= num_clusters <= num_seen``, the instantiated
        slots first, and ``K == max_clusters`` when the engine fixes it.

        :raises TypeError: when ``state`` is not an :class:`NRMState`.
        :raises ValueError: naming the first field that does not fit.
        """
        self._require_init()
        if not isinstance(state, NRMState):
            raise TypeError(f"{name} must be an NRMState, got {type(state).__name__}")
        counts = np.asarray(state.counts)
        if counts.ndim != 1 or counts.shape[0] < 1:
            raise ValueError(f"{name}.counts must have shape (K,), got {counts.shape}")
        template = self.empty(counts.shape[0])
        paths = jax.tree_util.tree_leaves_with_path(template)
        try:
            leaves = jax.tree.leaves(jax.tree.map(lambda _, v: v, template, state))
        except ValueError:
            raise ValueError(
                f"{name}.params must be the {type(template.params).__name__} of the model's "
                f"family, got {type(state.params).__name__}"
            ) from None
        for (path, want), value in zip(paths, leaves, strict=True):
            field = f"{name}{jax.tree_util.keystr(path)}"
            value = np.asarray(value)
            if value.shape != want.shape or value.dtype != want.dtype:
                raise ValueError(
                    f"{field} must have shape {want.shape} and dtype {want.dtype} (K = "
                    f"{counts.shape[0]} slots, from {name}.counts), got {value.shape} "
                    f"{value.dtype}"
                )
            if value.dtype != bool and not np.isfinite(value).all():
                raise ValueError(f"{field} holds NaN or infinite values")
        active = np.asarray(state.active)
        num_seen, num_clusters = int(state.num_seen), float(state.num_clusters)
        problems = [
            ((counts >= 0).all(), f"{name}.counts must be >= 0"),
            ((np.asarray(state.log_empty) <= 0).all(), f"{name}.log_empty must be <= 0"),
            (num_seen >= 0, f"{name}.num_seen must be >= 0, got {num_seen}"),
            (
                0 <= num_clusters <= num_seen + 1e-3 * (1 + num_seen),
                f"{name}.num_clusters must be in [0, num_seen], got {num_clusters}",
            ),
            (
                not (np.diff(active.astype(int)) > 0).any(),
                f"{name}.active must mark the first slots (clusters in creation order)",
            ),
        ]
        for ok, problem in problems:
            if not ok:
                raise ValueError(problem)
        if self.max_clusters is not None and counts.shape[0] != self.max_clusters:
            raise ValueError(
                f"{name} has {counts.shape[0]} slots but the engine fixes max_clusters="
                f"{self.max_clusters}; build it with max_clusters={counts.shape[0]}, or None "
                "to let the capacity grow"
            )

    @staticmethod
    def capacity(state):
        return state.counts.shape[0]

    @staticmethod
    def num_seen(state):
        return int(state.num_seen)

    @staticmethod
    def truncated(state):
        return bool(state.overflow)

    def grow(self, state, capacity):
        """Pad ``state`` with free slots up to ``capacity`` (outside ``jit``)."""
        fresh = self.empty(capacity - self.capacity(state))
        grown = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), state[:4], fresh[:4])
        return NRMState(*grown, state.num_clusters, state.num_seen, jnp.zeros((), bool))

    # ------------------------------------------------------------------ the update
    def _log_prior_weights(self, state):
        """``(K + 1,)`` log prior weights of the next observation (paper Eq. 23): ``log(E[n_k] -
        σ)`` for the instantiated clusters (``-inf`` for free slots), then the new cluster's
        ``log a (Û + τ)^σ``; and ``log Û``."""
        m = jnp.maximum(state.num_seen, 1).astype(self.dtype)
        log_new, log_u = nggp_log_new_weight(
            m,
            state.num_clusters,
            self._mass,
            self._sigma,
            self._tau,
            mode=_U_ESTIMATES[self.u_estimate],
        )
        excess = state.counts - self._sigma
        log_old = jnp.where(
            state.active & (excess > 0), jnp.log(jnp.maximum(excess, 1e-30)), -jnp.inf
        )
        return jnp.concatenate([log_old, log_new[None]]), log_u

    def _log_joint(self, state, obs):
        """``(K + 1,)`` log prior weight plus log predictive of ``obs`` per cluster and new."""
        family = self._family
        log_w, log_u = self._log_prior_weights(state)
        log_pred = jnp.concatenate(
            [
                family.log_predictive(state.params, obs),
                family.log_predictive(family.prior, obs)[None],
            ]
        )
        return log_w, jnp.where(jnp.isfinite(log_w), log_w + log_pred, -jnp.inf), log_u

    def update(self, state, obs):
        """Absorb one observation (a row of :meth:`check_batch`): pure and jittable.

        Returns ``(state, info)``; see the module docstring for the equations.
        """
        self._require_init()
        new, info, _ = self._absorb(state, obs)
        if self.merge_every is not None:
            due = new.num_seen % self.merge_every == 0
            new = jax.lax.cond(due, self.merge_clusters, lambda s: s, new)
            num_instantiated = jnp.sum(new.active).astype(jnp.int32)
            info = info._replace(num_clusters=new.num_clusters, num_instantiated=num_instantiated)
        return new, info

    def _merge_gains(self, state):
        """``(K,)`` the gain of merging each instantiated cluster with its candidate partner,
        and ``(K,)`` the partners (the cluster whose posterior mean is nearest): the family's
        :meth:`~numpyro_bnp.families.ConjugateFamily.log_merge_ratio` plus the change of the
        NGGP's log partition probability given ``Û`` (``-inf`` where there is no pair)."""
        family, sigma = self._family, self._sigma
        num = state.counts.shape[0]
        means = jax.tree.leaves(family.mean(state.params))
        flat = jnp.concatenate([m.reshape(num, -1) for m in means], axis=1)
        sq = jnp.sum(flat**2, axis=1)
        dist2 = sq[:, None] + sq[None, :] - 2 * flat @ flat.T
        pair = state.active[:, None] & state.active[None, :] & ~jnp.eye(num, dtype=bool)
        partner = jnp.argmin(jnp.where(pair, dist2, jnp.inf), axis=1)
        other = jax.tree.map(lambda a: a[partner], state.params)
        log_new = self._log_prior_weights(state)[0][-1]  # log a (Û + τ)^σ
        n_a, n_b = state.counts, state.counts[partner]
        tiny = jnp.finfo(self.dtype).tiny
        log_prior = (
            gammaln(n_a + n_b - sigma)
            - gammaln(jnp.maximum(n_a - sigma, tiny))
            - gammaln(jnp.maximum(n_b - sigma, tiny))
            + gammaln(1 - sigma)
            - log_new
        )
        gain = family.log_merge_ratio(state.params, other) + log_prior
        return jnp.where(pair.any(axis=1), gain, -jnp.inf), partner

    def merge_clusters(self, state):
        r"""Merge pairs of instantiated clusters while a merge gains more than
        ``merge_threshold`` (0 when the engine was built without one): pure and jittable;
        :meth:`update` calls it every ``merge_every`` observations.

        The candidate partner of each cluster is the one whose posterior mean is nearest; the
        gain of merging clusters ``a`` and ``b`` is the change of the collapsed log joint of the
        data they absorbed and of the partition, given the plug-in ``Û``:

        .. math::
            \log\frac{p(D_a \cup D_b)}{p(D_a)\,p(D_b)}
            + \log\frac{Γ(n_a + n_b - σ)\,Γ(1 - σ)}{Γ(n_a - σ)\,Γ(n_b - σ)}
            - \log a (\hat U + τ)^σ

        (the first term by the family's log-normaliser with the soft statistics; the second is
        the NGGP's exchangeable partition probability given ``U``, whose factor
        ``(U + τ)^{-n}`` does not change). The best pair is merged (``η_a + η_b - η_0``,
        ``E[n] = E[n_a] + E[n_b]``, ``ℓ = ℓ_a + ℓ_b`` and ``E[K]`` updated), the later slot freed
        and the clusters after it moved down one slot (creation order kept), and the gains are
        recomputed. The paper merges "as in Lin (2013)" with an unreported similarity
        (``docs/nrm.md``); this rule is Bayesian model comparison, as in memoized variational
        merge moves (Hughes & Sudderth 2013). Cost per round: ``O(K^2)`` distances of the means
        and ``O(K)`` family merges.
        """
        self._require_init()
        family = self._family
        threshold = 0.0 if self.merge_threshold is None else self.merge_threshold
        num = state.counts.shape[0]
        index = jnp.arange(num)
        fresh = self.empty(1)

        def merge_best(carry):
            state, _, rounds = carry
            gain, partner = self._merge_gains(state)
            best = jnp.argmax(gain)
            found = gain[best] > threshold
            keep, drop = jnp.minimum(best, partner[best]), jnp.maximum(best, partner[best])
            pick = lambda tree, k: jax.tree.map(lambda a: a[k], tree)  # noqa: E731
            merged = family.merge(pick(state.params, keep), pick(state.params, drop))
            log_empty = state.log_empty[keep] + state.log_empty[drop]
            occupied = lambda le: -jnp.expm1(le)  # noqa: E731
            num_clusters = (
                state.num_clusters
                - occupied(state.log_empty[keep])
                - occupied(state.log_empty[drop])
                + occupied(log_empty)
            )
            joined = NRMState(
                params=jax.tree.map(lambda a, v: a.at[keep].set(v), state.params, merged),
                counts=state.counts.at[keep].add(state.counts[drop]),
                log_empty=state.log_empty.at[keep].set(log_empty),
                active=state.active,
                num_clusters=num_clusters,
                num_seen=state.num_seen,
                overflow=state.overflow,
            )
            # free the slot ``drop``: the later clusters move down one, a fresh slot goes last
            source = jnp.minimum(jnp.where(index < drop, index, index + 1), num - 1)
            last = index == num - 1
            shifted = jax.tree.map(
                lambda a, f: jnp.where(last.reshape((num,) + (1,) * (a.ndim - 1)), f, a[source]),
                tuple(joined[:4]),
                tuple(fresh[:4]),
            )
            joined = joined._replace(**dict(zip(NRMState._fields[:4], shifted, strict=True)))
            state = jax.tree.map(lambda a, b: jnp.where(found, a, b), joined, state)
            return state, found, rounds + 1

        def again(carry):
            _, found, rounds = carry
            return found & (rounds < num)

        state, _, _ = jax.lax.while_loop(again, merge_best, (state, jnp.array(True), 0))
        return state

    def _absorb(self, state, obs, previous=None, damping=1.0):
        """``(state, info, weights)``: ``obs`` absorbed with its responsibilities ``weights``
        ``(K,)`` (the new cluster, if one was opened, in its slot). With ``previous`` (EP), the
        weights are damped towards it: ``(1 - damping) previous + damping r``."""
        dt = self.dtype
        family = self._family
        log_w, log_joint, log_u = self._log_joint(state, obs)
        resp = jax.nn.softmax(log_joint)
        resp_old, resp_new = resp[:-1], resp[-1]
        anything = state.active.any()
        resp_new = jnp.where(anything, resp_new, 1.0)  # the first observation opens a cluster
        free = ~state.active
        slot = jnp.argmax(free)  # the first free slot
        create = (resp_new > self.threshold) | ~anything
        opened = create & free.any()
        new_slot = (jnp.arange(state.counts.shape[0]) == slot) & opened
        # the old clusters' responsibilities given no new cluster, normalized in log space:
        # resp_old / (1 - resp_new) loses every digit when resp_new rounds to 1 (a full
        # capacity and an observation far from every cluster) and gave weights far above 1
        kept = jnp.where(anything, jax.nn.softmax(log_joint[:-1]), 0.0)
        weights = jnp.where(opened, jnp.where(anything, resp_old, 0.0) + resp_new * new_slot, kept)
        weights = jnp.where(state.active | new_slot, weights, 0.0).astype(dt)
        if previous is not None:
            weights = ((1 - damping) * previous + damping * weights).astype(dt)
        num_clusters = state.num_clusters + jnp.sum(weights * jnp.exp(state.log_empty))
        new = NRMState(
            params=family.update(state.params, family.stats(obs), weights),
            counts=state.counts + weights,
            log_empty=state.log_empty + jnp.log1p(-jnp.minimum(weights, self._one)),
            active=state.active | new_slot,
            num_clusters=num_clusters,
            num_seen=state.num_seen + 1,
            overflow=state.overflow | (create & ~free.any()),
        )
        log_predictive = jnp.where(
            anything, logsumexp(log_joint) - logsumexp(log_w), log_joint[-1] - log_w[-1]
        )
        info = NRMInfo(
            num_clusters=num_clusters,
            num_instantiated=jnp.sum(new.active).astype(jnp.int32),
            log_predictive=log_predictive.astype(dt),
            new_cluster_prob=resp_new.astype(dt),
            log_u=jnp.asarray(log_u, dt),
        )
        return new, info, weights

    def _remove(self, state, obs, weights):
        """The cavity (EP): ``state`` without ``obs``'s contribution ``weights`` ``(K,)``, the
        exact inverse of :meth:`_absorb`'s additions; ``E[K]`` recomputed from ``ℓ``."""
        family = self._family
        log_empty = state.log_empty - jnp.log1p(-jnp.minimum(weights, self._one))
        log_empty = jnp.minimum(log_empty, 0.0)
        return NRMState(
            params=family.remove(state.params, family.stats(obs), weights),
            counts=jnp.maximum(state.counts - weights, 0.0),
            log_empty=log_empty,
            active=state.active,
            num_clusters=jnp.sum(jnp.where(state.active, -jnp.expm1(log_empty), 0.0)),
            num_seen=state.num_seen - 1,
            overflow=state.overflow,
        )

    # ------------------------------------------------------------------ running a stream
    def run(
        self,
        rng_key,
        data,
        *model_args,
        chunk_size=256,
        progress_bar=True,
        init_state=None,
        trace_every=1,
        **model_kwargs,
    ):
        """Stream ``data`` through the engine: an array ``(n, D)`` (documents: dense counts or a
        ``scipy.sparse`` matrix ``(n, V)``) or an iterable of such batches.

        :param rng_key: a JAX PRNG key (ADF is deterministic; kept for the engine protocol).
        :param init_state: continue from this state (e.g. :meth:`load`); it is checked against
            the model (:meth:`check_state`).
        :param int chunk_size: observations per compiled ``lax.scan``.
        :param int trace_every: keep the traces of every ``trace_every``-th observation and of
            the last one (see :func:`streaming.run`).
        :return: :class:`NRMResult`.
        :raises NonFiniteStateError: when a chunk makes the state NaN or infinite.
        """
        final, traces, time = self._stream(
            rng_key,
            data,
            model_args,
            model_kwargs,
            init_state,
            chunk_size=chunk_size,
            progress_bar=progress_bar,
            trace_every=trace_every,
        )
        return NRMResult(self, final, traces, time)

    # ------------------------------------------------------------------ read-outs
    def _scores(self, state, rows, *, batch_size=256):
        """``(M, K + 1)`` log prior weight plus log predictive of each row (free slots ``-inf``)
        and ``(K + 1,)`` log prior weights, for the rows of :meth:`check_batch`."""
        if self._score_fn is None:
            self._score_fn = jax.jit(lambda s, x: jax.vmap(lambda o: self._log_joint(s, o)[1])(x))
        num = streaming.num_rows(rows)
        out = []
        for start in range(0, num, batch_size):
            block = streaming.take_rows(rows, start, start + batch_size)
            size = streaming.num_rows(block)
            pad = streaming.pad_rows(block, batch_size)
            out.append(np.asarray(self._score_fn(state, pad))[:size])
        return np.concatenate(out), np.asarray(self._log_prior_weights(state)[0])

    def predict_proba(self, state, obs, *, batch_size=256):
        """``(M, K + 1)``: for each row of ``obs``, the probability of each instantiated cluster
        (in creation order) and, last, of a new one, under the final state (no threshold)."""
        rows = self.check_batch(obs, name="obs")
        batch_size = positive_int(batch_size, "batch_size")
        scores, _ = self._scores(state, rows, batch_size=batch_size)
        keep = np.append(np.asarray(state.active), True)
        scores = scores[:, keep]
        return np.exp(scores - logsumexp(scores, axis=1, keepdims=True))

    def log_predictive(self, state, obs, *, batch_size=256):
        """``(M,)`` log of the full predictive mixture of each row of ``obs`` (the instantiated
        clusters and a new one, with the prior weights of paper Eq. 23 under the final state)."""
        rows = self.check_batch(obs, name="obs")
        batch_size = positive_int(batch_size, "batch_size")
        scores, log_w = self._scores(state, rows, batch_size=batch_size)
        return np.asarray(logsumexp(scores, axis=1) - logsumexp(log_w))

    def posterior_draws(self, rng_key, state, num_draws, obs=None):
        """``num_draws`` draws of the mixture weights and the component parameters of the
        instantiated clusters, for :meth:`NRMResult.to_arviz`.

        ``weights`` ``(S, K + 1)``: the normalised weights of the ``K`` instantiated clusters
        and, last, of the rest of the measure, from
        ``Dirichlet(E[n_1] - σ, ..., E[n_K] - σ, a (Û + τ)^σ)`` (the normalisation of
        ``q(π | Û)`` of the paper's Eq. 21: independent gammas with a common rate); the
        components from their conjugate posteriors, under the model's site names. ``obs``: the
        responsibilities ``(S, M, K + 1)`` are not random; they are left to
        :meth:`predict_proba`.
        """
        del obs
        active = np.asarray(state.active)
        num = int(active.sum())
        key_w, key_c = random.split(rng_key)
        log_w = self._log_prior_weights(state)[0]
        conc = jnp.exp(jnp.concatenate([log_w[:num], log_w[-1:]]))
        weights = random.dirichlet(key_w, conc, shape=(num_draws,), dtype=self.dtype)
        params = jax.tree.map(lambda a: a[:num], state.params)
        keys = random.split(key_c, num_draws)
        components = jax.vmap(lambda k: self._family.sample(k, params))(keys)
        draws = {"weights": weights, **self.spec.component_values(components)}
        dims = {"weights": ["cluster_or_rest"]}
        for site, value in draws.items():
            if site != "weights":
                dims[site] = ["cluster"] + [f"{site}_dim_{i}" for i in range(np.ndim(value) - 2)]
        coords = {"cluster": np.arange(num), "cluster_or_rest": np.arange(num + 1)}
        return draws, dims, coords


class NRMResult(streaming.StreamingResult):
    """The end of an ADF-NRM (or EP-NRM) run: the final ``state`` and the per-step ``traces``
    (:class:`NRMInfo` fields over ``time``)."""

    @property
    def active(self):
        """``(K,)`` bool mask of the instantiated clusters."""
        return np.asarray(self.state.active)

    @property
    def cluster_sizes(self):
        """``(K+,)`` soft counts ``E[n_k]`` of the instantiated clusters, in creation order."""
        return np.asarray(self.state.counts)[self.active]

    @property
    def num_clusters(self):
        """``E[K_n]`` after the last observation."""
        return float(self.state.num_clusters)

    @property
    def components(self):
        """The conjugate posterior parameters of the instantiated clusters (the family's
        ``NamedTuple``, leading axis ``K+``)."""
        return jax.tree.map(lambda a: np.asarray(a)[self.active], self.state.params)

    def predict_proba(self, obs, *, batch_size=256):
        """See :meth:`ADFNRM.predict_proba`."""
        return self.engine.predict_proba(self.state, obs, batch_size=batch_size)

    def log_predictive(self, obs, *, batch_size=256):
        """See :meth:`ADFNRM.log_predictive`."""
        return self.engine.log_predictive(self.state, obs, batch_size=batch_size)
