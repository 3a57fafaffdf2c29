r"""The R-IBP streaming filter for latent feature models written in NumPyro.

Schaeffer, Du, Liu & Fiete, *Streaming Inference for Infinite Feature Models*, ICML 2022. One
pass over the stream; each observation ``o_n`` gets a mean-field posterior

.. math::
    q(z_n, A \mid o_{\le n}) = \prod_k \mathrm{Bern}(z_{nk}; b_{nk})\, N(A_k; μ_{nk}, Σ_{nk}),

fitted by a few coordinate-ascent steps against the R-IBP filtering prior
:math:`q(z_{nk} = 1 \mid o_{<n})` (paper Eq. 5, :meth:`RecursiveIBP.filtering_prior`), after which
``b_n`` is frozen into the running statistics ``S_k = Σ b_{n'k}`` and the existence
probabilities ``e_k``. New features are born from the prior's Poisson terms: a free slot's prior
probability becomes non-negligible when the expected number of features ``ρ`` approaches it, and
the likelihood then pulls its ``b`` up. Memory and time per observation are O(K D) for K slots.

**Existence probabilities** ``e_k`` (a correction to the paper's App. A, derived in
:mod:`numpyro_bnp.infer.features.ribp.update`): each observation adds to ``e_k`` the posterior
probability that it *created* feature ``k``, so that ``ρ = Σ_k e_k`` estimates the number of
features created so far and, with no data, the filter reproduces :meth:`RecursiveIBP.marginals`
to rounding.

**The update** (:mod:`numpyro_bnp.infer.features.ribp.update`, where the coordinate-ascent sweep,
the ``feature_update`` choices, the generic path's Newton safeguard and the retiring of holes are
documented): a few sweeps over the slots fit each feature and ``b_nk`` against the prior frozen
at the start of the observation, each feature's update ossified (paper App. B.2: averaged with
its old value, weights ``b_nk`` and ``S_{n-1,k}``). ``feature_update="paper"`` (default) is the
paper's Eqs. 10-11; ``"birth"`` (experimental, a change to the paper) scores the unborn slots
with the feature integrated out. After each observation the *holes* (slots
whose existence probability is below ``retire_threshold`` while a later slot's is above it) are
reset to the prior and moved behind the live slots.

**The memoized update** (``feature_update="memoized"``, Gaussian likelihoods and Bernoulli
pixels with logits ``Z @ A + b``, :mod:`numpyro_bnp.infer.features.ribp.memoized`): the same
filtering
prior and existence bookkeeping, but the features are the Gaussian posterior given accumulated
statistics (for the Bernoulli, of its Jaakkola–Jordan quadratic bound), a buffer of recent rows
is revisited every few rows, and features are born from the buffer's residuals and deleted when
unused; its held-out score keeps improving along the stream where the paper's update stops
(``docs/ribp.md``).

**Hyper-parameters** (memoized update only): a model may give the noise scale, the IBP's mass
and the Bernoulli logits' bias priors (latent sites,
:class:`~numpyro_bnp.infer.features.feature_model.HyperSites`); the filter learns their MAP along
the stream (:func:`~numpyro_bnp.infer.features.ribp.hyper.learn_hyper`).

**Refinement** (:meth:`RIBPFilter.refine`, linear-Gaussian only, a batch complement to the
one-pass update): mean-field coordinate ascent over a buffer of rows with every ``b_nk`` and
feature unfrozen, birth and death moves (:mod:`numpyro_bnp.infer.features.ribp.refine`). It brings
the count close to the truth where the one-pass filter stalls (``docs/ribp.md``).

**Read-outs** (:meth:`RIBPFilter.log_predictive`, :meth:`RIBPFilter.feature_use`, posterior
draws for ArviZ) are in :mod:`numpyro_bnp.infer.features.ribp.predictive`.

Variants, chosen from the model (:mod:`numpyro_bnp.infer.features.feature_model`):

* **linear-Gaussian** (``o_n ~ N(z_n A, diag σ²)``): closed-form updates (paper App. B.2, Eqs.
  10-11 and the Bernoulli logits); diagonal feature covariances (an isotropic prior stays
  isotropic), O(D) per slot;
* **factor analysis** (``o_n ~ N((z_n ⊙ w_n) A, diag σ²)``): adds the Gaussian weight update
  (paper App. B.3, Eq. 12, a K x K Cholesky solve per step);
* **generic**: any likelihood that is differentiable in the features and factorises over the D
  output dimensions given ``z`` and ``A`` (Poisson counts, Bernoulli pixels, ...; the model reader
  rejects one that does not, such as a ``MultivariateNormal`` over D, and each batch is checked
  against the likelihood's support). The same
  variational family; each slot's Gaussian gets Newton steps on the per-observation objective with
  the gradient and diagonal Hessian of the model's own log-likelihood (through handlers, other
  indicators plugged in at their means ``b``), and its logit gets the likelihood difference between
  ``z_l = 1`` and ``z_l = 0`` with a second-order correction for the feature's variance. On a
  linear-Gaussian model one Newton step is exact and the path equals the closed form. Each
  Newton step is safeguarded against overshooting (:mod:`numpyro_bnp.infer.features.ribp.update`).

**Capacity.** The state has a fixed number of slots ``K``. After each observation the filter
records the prior mass of features beyond the capacity, ``P(Pois(ρ_{n-1} + αβ/(β+n-1)) > K)``;
when it exceeds ``truncation_tol`` the streaming loop doubles ``K`` and re-runs the chunk, or, if
the user fixed ``max_features``, warns that the run is truncated.
"""

import jax.numpy as jnp
import numpy as np

from numpyro_bnp._checks import (
    floating_dtype,
    model_function,
    positive_int,
    prng_key,
    unit_interval,
)
from numpyro_bnp.distributions.ibp import RecursiveIBP, ibp_capacity
from numpyro_bnp.infer.core import streaming
from numpyro_bnp.infer.core.model_engine import ModelEngine
from numpyro_bnp.infer.features.feature_model import read_feature_model
from numpyro_bnp.infer.features.ribp import checks, memoized, predictive
from numpyro_bnp.infer.features.ribp import update as updates
from numpyro_bnp.infer.features.ribp.memoized import MemoOptions, RIBPMemoState
from numpyro_bnp.infer.features.ribp.refine import refine_state
from numpyro_bnp.infer.features.ribp.update import RIBPConstants, RIBPInfo, RIBPState

__all__ = ["RIBPFilter", "RIBPInfo", "RIBPMemoState", "RIBPResult", "RIBPState"]


class RIBPFilter(ModelEngine):
    """R-IBP streaming filter on a NumPyro latent feature model (see the module docstring).

    :param model: a NumPyro model with a :class:`~numpyro_bnp.distributions.RecursiveIBP` site,
        a Normal feature site, optionally a Normal weight site, and an observed site (see
        :mod:`numpyro_bnp.infer.features.feature_model`), e.g.
        :func:`numpyro_bnp.models.linear_gaussian`.
    :param int num_steps: coordinate-ascent steps per observation (default 3; 5 for factor analysis,
        as in the paper's code).
    :param int max_features: fix the number of slots (the run warns if it is truncated); ``None``
        starts from a capacity for one row (at least 16) and doubles it when needed.
    :param str likelihood: ``"auto"`` (closed form when the model allows, else generic) or
        ``"generic"`` to force the Newton path.
    :param str feature_update: ``"paper"`` (default), ``"birth"`` (see
        :mod:`numpyro_bnp.infer.features.ribp.update`), or ``"memoized"`` (Gaussian likelihoods and
        ``Bernoulli(logits=Z @ A + b)``: features from accumulated statistics, a revisited
        buffer of recent rows, births and deletes; see
        :mod:`numpyro_bnp.infer.features.ribp.memoized`).
        Only ``"memoized"`` takes a model whose noise scale, IBP mass or logits' bias is a
        latent site with a prior (e.g. ``sigma_o ~ HalfNormal``): it learns them
        (:attr:`RIBPResult.hyper_parameters`).
    :param int buffer_size: ``"memoized"``: recent rows kept and revisited.
    :param int refresh_every: ``"memoized"``: rows between refreshes (revisit, births, deletes).
    :param int max_births: ``"memoized"``: birth moves tried per refresh.
    :param int num_seeds: ``"memoized"``: buffer rows a birth candidate is grown from.
    :param float min_use: ``"memoized"``: a born feature whose expected number of rows using it
        falls below this is deleted.
    :param bool ossify: apply the ossification average (paper App. B.2); on by default.
    :param int newton_steps: Newton steps per slot and sweep in the generic path (each one
        safeguarded, see :mod:`numpyro_bnp.infer.features.ribp.update`).
    :param float retire_threshold: existence probability below which a hole is retired.
    :param float truncation_tol: prior mass beyond the capacity that triggers growth or a warning.
    :param dtype: floating dtype of the state; default ``jnp.result_type(float)`` (float32
        unless x64 is on).

    **Example**

    .. code-block:: python

        >>> import numpy as np
        >>> from jax import random
        >>> from numpyro_bnp.infer import RIBPFilter
        >>> from numpyro_bnp.models import linear_gaussian
        >>> rng = np.random.default_rng(0)
        >>> feats = rng.normal(size=(3, 6))
        >>> data = (rng.random((500, 3)) < 0.5) @ feats + 0.1 * rng.normal(size=(500, 6))
        >>> res = RIBPFilter(linear_gaussian).run(
        ...     random.PRNGKey(0), data, dim=6, mass=1.0, sigma_o=0.1,
        ...     progress_bar=False)
        >>> int(res.state.num_seen), res.features["mean"].shape[1]  # active features: (K+, 6)
        (500, 6)
    """

    fixed_options = (
        "model",
        "num_steps",
        "max_features",
        "likelihood",
        "feature_update",
        "buffer_size",
        "refresh_every",
        "max_births",
        "num_seeds",
        "min_use",
        "ossify",
        "newton_steps",
        "retire_threshold",
        "truncation_tol",
        "dtype",
    )
    # the streaming protocol (numpyro_bnp.infer.core.streaming.StreamingEngine); state_type is a
    # property (RIBPMemoState for feature_update="memoized")
    progress_key = "num_features"
    progress_label = "features"
    capacity_option = "max_features"

    def __init__(
        self,
        model,
        *,
        num_steps=None,
        max_features=None,
        likelihood="auto",
        feature_update="paper",
        buffer_size=256,
        refresh_every=32,
        max_births=4,
        num_seeds=8,
        min_use=1.0,
        ossify=True,
        newton_steps=1,
        retire_threshold=1e-3,
        truncation_tol=1e-3,
        dtype=None,
    ):
        model_function(model)
        if num_steps is not None:
            num_steps = positive_int(num_steps, "num_steps")
        if max_features is not None:
            max_features = positive_int(max_features, "max_features")
        if feature_update not in ("birth", "memoized", "paper"):
            raise ValueError(
                f"feature_update must be 'birth', 'memoized' or 'paper', got {feature_update!r}"
            )
        if not (isinstance(min_use, int | float) and np.isfinite(min_use) and min_use > 0):
            raise ValueError(f"min_use must be a positive number, got {min_use!r}")
        buffer_size = positive_int(buffer_size, "buffer_size")
        num_seeds = positive_int(num_seeds, "num_seeds")
        if num_seeds > buffer_size:
            raise ValueError(f"num_seeds ({num_seeds}) must not exceed buffer_size ({buffer_size})")
        if likelihood not in ("auto", "generic"):
            raise ValueError(f"likelihood must be 'auto' or 'generic', got {likelihood!r}")
        newton_steps = positive_int(newton_steps, "newton_steps")
        retire_threshold = unit_interval(retire_threshold, "retire_threshold")
        truncation_tol = unit_interval(truncation_tol, "truncation_tol")
        self.model = model
        self.num_steps = num_steps
        self.max_features = max_features
        self.likelihood = likelihood
        self.feature_update = feature_update
        self.buffer_size = buffer_size
        self.refresh_every = positive_int(refresh_every, "refresh_every")
        self.max_births = positive_int(max_births, "max_births")
        self.num_seeds, self.min_use = num_seeds, float(min_use)
        self.ossify = bool(ossify)
        self.newton_steps = newton_steps
        self.retire_threshold = retire_threshold
        self.truncation_tol = truncation_tol
        self.dtype = floating_dtype(dtype)

    @property
    def state_type(self):
        """The state's class: :class:`RIBPMemoState` for ``feature_update="memoized"``, else
        :class:`RIBPState`."""
        return RIBPMemoState if self.feature_update == "memoized" else RIBPState

    @property
    def memo_options(self):
        """The memoized update's options as a :class:`MemoOptions`."""
        return MemoOptions(
            self.buffer_size, self.refresh_every, self.max_births, self.num_seeds, self.min_use
        )

    # ------------------------------------------------------------------ record and pickling
    @property
    def options(self):
        """The filter's options as JSON-storable values (recorded in checkpoints)."""
        return {
            "num_steps": self.num_steps,
            "max_features": self.max_features,
            "likelihood": self.likelihood,
            "feature_update": self.feature_update,
            "buffer_size": self.buffer_size,
            "refresh_every": self.refresh_every,
            "max_births": self.max_births,
            "num_seeds": self.num_seeds,
            "min_use": self.min_use,
            "ossify": self.ossify,
            "newton_steps": self.newton_steps,
            "retire_threshold": float(self.retire_threshold),
            "truncation_tol": float(self.truncation_tol),
            "dtype": np.dtype(self.dtype).name,
        }

    # ------------------------------------------------------------------ set-up
    def _read_model(self, model_args, model_kwargs):
        spec = read_feature_model(
            self.model,
            model_args,
            model_kwargs,
            engine="RIBPFilter",
            hyper=self.feature_update == "memoized",
        )
        kind = spec.likelihood if self.likelihood == "auto" else "generic"
        if kind == "generic" and spec.weight_site is not None:
            raise ValueError(
                "RIBPFilter's generic path expected a model without a per-row weight site; found "
                f"{spec.weight_site!r} with a non-Gaussian or non-linear likelihood "
                f"(sites: {'; '.join(spec.site_summary)})"
            )
        checks.check_constants(spec, self.dtype)
        if self.feature_update == "memoized" and kind == "generic":
            if spec.logit_offset is None:
                raise ValueError(
                    "RIBPFilter(feature_update='memoized') expected a Gaussian likelihood "
                    "(obs ~ Normal(Z @ A, σ) or Normal((Z * W) @ A, σ)) or a Bernoulli with "
                    "logits Z @ A + b (b the same for every row); the model's observed site "
                    f"{spec.obs_site!r} is neither: use feature_update='paper' "
                    f"(sites: {'; '.join(spec.site_summary)})"
                )
            kind = "bernoulli"
        dt = self.dtype
        self.spec, self.kind = spec, kind
        self.dim = spec.dim
        self.constants = RIBPConstants(
            kind=kind,
            dtype=dt,
            ibp=RecursiveIBP(
                jnp.asarray(spec.alpha, dt), jnp.asarray(spec.beta, dt), num_rows=1, max_features=1
            ),
            feature_loc=jnp.asarray(spec.feature_loc, dt),
            feature_var=jnp.asarray(spec.feature_var, dt),
            noise_prec=None if spec.noise_var is None else jnp.asarray(1.0 / spec.noise_var, dt),
            weight_loc=spec.weight_loc,
            weight_var=spec.weight_var,
            row_log_likelihood=(
                spec.row_log_likelihood if kind in ("generic", "bernoulli") else None
            ),
            num_steps=self.num_steps or (5 if kind == "factor_analysis" else 3),
            newton_steps=self.newton_steps,
            feature_update=self.feature_update,
            ossify=self.ossify,
            retire_threshold=self.retire_threshold,
            hyper=spec.hyper,
            logit_offset=None if kind != "bernoulli" else jnp.asarray(spec.logit_offset, dt),
        )
        if self.feature_update == "memoized":
            self.scan_chunk = memoized.chunk_scanner(self.constants, self.memo_options)
        else:
            self.scan_chunk = streaming.chunk_scanner(self.update)
        self._log_predictive_fns = {}
        self._feature_use_fn = None

    def init(self, rng_key, *model_args, **model_kwargs):
        """Read the model (one trace) and return the empty state.

        :param rng_key: accepted for the engine protocol; the filter is deterministic.
        :param model_args, model_kwargs: arguments of the model (``num_obs`` only sets the
            model's own capacity, the stream is unbounded; when the model has a ``num_obs``
            parameter without a default and it is not given, the model is traced with
            ``num_obs=1``, see :func:`streaming.model_arguments`).
        """
        del rng_key
        self._read(model_args, model_kwargs)
        if self.max_features is not None:
            capacity = self.max_features
        else:
            # enough for the first row; the stream grows it (x2) as features accumulate
            alpha = self.spec.alpha  # the traced value, or the learned mass's start
            if self.spec.hyper is not None:
                alpha = float(self.spec.hyper.terms(self.spec.hyper.init)[1])
            capacity = max(16, ibp_capacity(alpha, self.spec.beta, num_rows=1))
        return self.empty(capacity)

    def empty(self, capacity):
        """The state of no observations with ``capacity`` slots (every feature at its prior)."""
        self._require_init()
        if self.feature_update == "memoized":
            return memoized.empty(self.constants, self.memo_options, capacity)
        return updates.empty(self.constants, capacity)

    # ------------------------------------------------------------------ streaming protocol
    def check_batch(self, batch, name="batch"):
        """Validate a batch ``(n, D)`` on the host (see :func:`streaming.check_batch`).

        The rows must also lie in the support of the model's observed site (e.g. non-negative
        integers for a Poisson likelihood, 0/1 for a Bernoulli one): values the likelihood
        cannot hold would give ``-inf`` or silently wrong log-densities.
        """
        self._require_init()
        arr = streaming.check_batch(batch, dim=self.dim, dtype=self.dtype, name=name)
        self.spec.check_observed(arr, name)
        return arr

    def check_state(self, state, name="state"):
        """Check on the host that ``state`` can resume a stream in this filter.

        ``state`` must be an :class:`RIBPState` whose fields have the shapes ``(K, D)`` (mean,
        var), ``(K,)`` (running_sum, existence) and ``()`` (num_seen, truncation) for the
        model's ``D``, the filter's dtype (num_seen: int32), finite values in range (var > 0,
        running_sum >= 0, existence and truncation in [0, 1], num_seen >= 0), and ``K`` equal
        to ``max_features`` when the filter fixes it. With ``feature_update="memoized"`` it is
        an :class:`~numpyro_bnp.infer.features.ribp.memoized.RIBPMemoState` whose statistics have
        the shapes ``(K, K)``, ``(K, D)``, ``(K,)`` (bool) and whose buffer has ``buffer_size``
        rows.

        :raises TypeError: when ``state`` is not an :class:`RIBPState`.
        :raises ValueError: naming the first field that does not fit.
        """
        self._require_init()
        checks.check_state(self, state, name)

    @staticmethod
    def capacity(state):
        return state.mean.shape[0]

    @staticmethod
    def num_seen(state):
        return int(state.num_seen)

    def truncated(self, state):
        return bool(state.truncation > self.truncation_tol)

    def grow(self, state, capacity):
        """Pad ``state`` with fresh slots up to ``capacity`` (outside ``jit``)."""
        extra = capacity - self.capacity(state)
        fresh = self.empty(extra)
        grown = state._replace(
            **{
                f: jnp.concatenate([getattr(state, f), getattr(fresh, f)])
                for f in ("mean", "var", "running_sum", "existence")
            },
            truncation=jnp.zeros_like(state.truncation),
        )
        if self.feature_update != "memoized":
            return grown
        return memoized.grow(self.constants, state, grown, extra)

    # ------------------------------------------------------------------ the update
    def prior(self, state):
        """``(K,)`` filtering prior ``q(z_{n+1,k} = 1 | o_{<=n})`` of the next row (Eq. 5)."""
        self._require_init()
        return updates.prior(updates.at_state(self.constants, state), state)

    def update(self, state, obs):
        """Absorb one observation ``obs`` ``(D,)``: pure and jittable. Returns ``(state, info)``.

        See :func:`numpyro_bnp.infer.features.ribp.update.update`.
        """
        self._require_init()
        if self.feature_update == "memoized":
            return memoized.update(self.constants, self.memo_options, state, obs)
        return updates.update(self.constants, state, obs)

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
        """Stream ``data`` (an array ``(n, D)`` or an iterable of batches) through the filter.

        :param rng_key: a JAX PRNG key (the filter is deterministic; kept for the engine protocol).
        :param init_state: continue from this state (e.g. :meth:`load`) instead of :meth:`init`;
            the model is still read from ``model_args``/``model_kwargs`` and the state is
            checked against it (:meth:`check_state`). With no model arguments, a filter that
            has read its model (:meth:`from_checkpoint`, :meth:`init`) keeps it.
        :param int chunk_size: observations per compiled ``lax.scan``.
        :param int trace_every: keep the traces of every ``trace_every``-th observation (counted
            by ``num_seen``) and of the last one; ``result.time`` holds their observation
            counts. The default 1 keeps every step (about 28 bytes per observation).
        :return: :class:`RIBPResult`.
        :raises NonFiniteStateError: when a chunk makes the state NaN or infinite (see
            :func:`streaming.run`; the error carries the last good state).
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
        return RIBPResult(self, final, traces, time)

    def refine(self, state, data, *, num_passes=100, start="empty", min_use=1.5, num_candidates=16):
        """Refinement passes over a buffer of rows, everything unfrozen (linear-Gaussian model).

        Batch mean-field coordinate ascent over ``data`` with birth (at most one per pass) and
        death moves; see :mod:`numpyro_bnp.infer.features.ribp.refine`. The returned state describes
        ``data`` alone (``S_k = Σ_n b_nk``, ``num_seen = N``): pass the rows the filter has
        absorbed, or the recent ones, and continue the stream from it. With
        ``max_features=None`` the capacity first grows to hold ``num_passes`` more features.

        :param state: an :class:`RIBPState`, e.g. ``result.state`` after :meth:`run`.
        :param data: ``(N, D)`` rows.
        :param int num_passes: passes over ``data``, each O(N K D).
        :param str start: ``"empty"`` (default): the passes build the features by births alone;
            ``"filter"``: they start from the state's features. The filter's early features are
            sums of true ones, a local optimum the passes do not leave (``docs/ribp.md``
            measures both).
        :param float min_use: features used by fewer rows than this (in expectation) are removed.
        :param int num_candidates: rows and principal directions of the residual tried as new
            features in each pass.
        :return: ``(state, traces)``; ``traces`` holds ``num_features`` and ``fit`` (expected
            log-likelihood plus entropy per row, up to constants), one value per pass.
        """
        self._require_init()
        if self.feature_update == "memoized":
            raise ValueError(
                "RIBPFilter.refine refines the paper's update (feature_update='paper'); the "
                "memoized update revisits its buffer of recent rows itself"
            )
        if self.kind != "linear_gaussian":
            raise ValueError(
                "RIBPFilter.refine expected a linear-Gaussian model (obs ~ Normal(Z @ A, σ)); "
                f"found the {self.kind!r} likelihood"
            )
        for name, value in (("num_passes", num_passes), ("num_candidates", num_candidates)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (np.isfinite(min_use) and min_use > 0):
            raise ValueError(f"min_use must be a positive number, got {min_use!r}")
        if start not in ("empty", "filter"):
            raise ValueError(f"start must be 'empty' or 'filter', got {start!r}")
        if not isinstance(state, RIBPState) or state.mean.shape[1:] != (self.dim,):
            raise ValueError(f"state must be an RIBPState with D={self.dim}")
        obs = jnp.asarray(self.check_batch(data, name="data"))
        if self.max_features is None:  # room for one birth per pass
            kept = int(np.sum(np.asarray(state.existence) > 0.5)) if start == "filter" else 0
            capacity = self.capacity(state)
            while capacity < kept + num_passes:
                capacity *= 2
            state = self.grow(state, capacity) if capacity > self.capacity(state) else state
        use = self.feature_use(state, obs) if start == "filter" else None
        fields, traces = refine_state(
            self.constants, state, obs, use, num_passes, min_use, min(num_candidates, len(obs))
        )
        refined = RIBPState(
            *fields,
            num_seen=jnp.asarray(obs.shape[0], jnp.int32),
            truncation=jnp.zeros_like(state.truncation),
        )
        return refined, traces

    # ------------------------------------------------------------------ read-outs
    def posterior_draws(self, rng_key, state, num_draws, obs=None):
        """Draws for ArviZ (:meth:`RIBPResult.to_arviz`): ``(draws, dims, coords)``.

        ``draws`` holds, with ``num_draws`` independent draws on the leading axis: the active
        features (existence above 1/2) under the feature site's name (e.g. ``A``, ``(S, K+,
        D)``, dims ``feature``, ``dim``) from ``q(A)``; ``num_features`` ``(S,)``, the number
        of features created, ``Σ_k Bernoulli(e_k)`` over all slots (mean ``ρ``); and, for given
        rows ``obs`` ``(M, D)``, the IBP site (e.g. ``Z``, ``(S, M, K+)``, dims ``row``,
        ``feature``) drawn as ``Bernoulli(b)`` with ``b`` the rows' :meth:`feature_use` on
        the active features. The coordinate ``feature`` holds the active slots' indices.
        """
        self._require_init()
        prng_key(rng_key)
        num_draws = positive_int(num_draws, "num_draws")
        use = None if obs is None else self.feature_use(state, obs)
        return predictive.posterior_draws(self.spec, rng_key, state, num_draws, use)

    def posterior_samples(self, rng_key, state, num_samples, num_obs=None, obs=None):
        """Samples of the model's latent sites for :class:`numpyro.infer.Predictive`.

        Keyed by the model's site names, ``num_samples`` on the leading axis, over the active
        features ``K+``: the feature site ``(S, K+, D)`` from ``q(A)``; the IBP site
        ``(S, N, K+)``, each row drawn from the filtering prior of the next observation
        (:meth:`prior`, rows independent given the stream), or, for given rows ``obs``,
        ``Bernoulli(b)`` with ``b`` their :meth:`feature_use`; for factor analysis the weight
        site ``(S, N, K+)`` from its prior. The prior's mass on features not yet created
        (about ``αβ/(β+n)`` per row after ``n`` observations) is left out.
        """
        self._require_init()
        prng_key(rng_key)
        num_samples = positive_int(num_samples, "num_samples")
        use = None
        if obs is not None:
            use = self.feature_use(state, obs)
            num_obs = use.shape[0]
        num_obs = positive_int(num_obs, "num_obs")
        return predictive.posterior_samples(
            self.spec, self.constants, rng_key, state, num_samples, num_obs, use
        )

    def log_predictive(self, state, test_obs, *, rng_key, num_samples=1000, batch_size=256):
        """Log posterior predictive of each test row, importance-sampled over ``z``.

        Each row is treated as observation ``n + 1``: ``z`` has the filtering prior ``π`` and the
        features their filtered posterior ``q(A)``. Given ``z`` the features are integrated out in
        closed form (linear-Gaussian: ``N(o; z μ, diag(σ² + z Σ))``; factor analysis: the Gaussian
        with the weights integrated out and the features' variance moment-matched); the generic
        path draws ``A ~ q(A)`` with each ``z``. ``z`` is drawn from a mean-field proposal fitted
        to the row (the filter's own coordinate ascent with the features held fixed; for the
        Gaussian kinds its rounding is then improved by greedy single and pair flips, see
        :func:`~numpyro_bnp.infer.features.ribp.predictive.proposal_mode`, and the proposal is half
        the
        refit from there and half that mode; mass on unborn slots is shared out over all of them,
        see :func:`~numpyro_bnp.infer.features.ribp.predictive.spread_over_unborn`), mixed 9:1 with
        the prior, which keeps every ``z`` possible and the weights bounded; the estimate is the
        log-mean-exp of the ``num_samples`` importance weights ``π(z) p(o | z) / proposal(z)`` —
        consistent as ``num_samples`` grows, unlike the paper's average log-likelihood (a Jensen
        lower bound).

        :param test_obs: ``(M, D)``.
        :param rng_key: a JAX PRNG key (required: the estimate is random), split over the rows.
        :param int num_samples: importance samples per row.
        :param int batch_size: rows per compiled call.
        :return: ``(M,)`` estimates of ``log p(o | data)``.
        """
        self._require_init()
        prng_key(rng_key)
        num_samples = positive_int(num_samples, "num_samples")
        batch_size = positive_int(batch_size, "batch_size")
        obs = jnp.asarray(self.check_batch(test_obs, name="test_obs"))
        if num_samples not in self._log_predictive_fns:
            fn = predictive.log_predictive_fn(self.constants, num_samples)
            self._log_predictive_fns[num_samples] = fn
        fn = self._log_predictive_fns[num_samples]
        return predictive.log_predictive(fn, state, obs, rng_key, batch_size)

    def feature_use(self, state, obs, *, batch_size=1024):
        """``(M, K)`` probabilities ``b`` that each row of ``obs`` uses each slot.

        Each row is treated as the next observation (filtering prior ``π``) and fitted by the
        filter's coordinate ascent with the features held fixed; the state is not changed.

        :param int batch_size: rows per compiled call.
        """
        self._require_init()
        batch_size = positive_int(batch_size, "batch_size")
        obs = jnp.asarray(self.check_batch(obs, name="obs"))
        if self._feature_use_fn is None:
            self._feature_use_fn = predictive.feature_use_fn(self.constants)
        return predictive.feature_use(self._feature_use_fn, state, obs, batch_size)


class RIBPResult(streaming.StreamingResult):
    """Result of :meth:`RIBPFilter.run`: the final state, traces, and posterior read-outs."""

    @property
    def existence_probs(self):
        """``(K,)`` probability that each slot's feature has been created."""
        return self.state.existence

    @property
    def active(self):
        """``(K,)`` bool: slots whose feature exists with probability above 1/2."""
        return self.existence_probs > 0.5

    @property
    def features(self):
        """Means ``(K+, D)`` and diagonal covariances ``(K+, D)`` of the active features."""
        active = np.asarray(self.active)
        return {
            "mean": np.asarray(self.state.mean)[active],
            "var": np.asarray(self.state.var)[active],
        }

    @property
    def feature_probs(self):
        """``(K+,)`` probability that the next observation uses each active feature (Eq. 5)."""
        return np.asarray(self.engine.prior(self.state))[np.asarray(self.active)]

    def feature_use(self, obs, *, batch_size=1024):
        """See :meth:`RIBPFilter.feature_use`."""
        return self.engine.feature_use(self.state, obs, batch_size=batch_size)

    @property
    def num_active(self):
        """Number of active features ``K+`` (existence above 1/2)."""
        return int(np.sum(np.asarray(self.active)))

    @property
    def hyper_parameters(self):
        """``{site: value}``: the learned values (MAP) of the model's hyper-parameter sites
        (the noise scale, the IBP's mass; ``feature_update="memoized"``); empty without them."""
        hyper = self.engine.spec.hyper
        if hyper is None:
            return {}
        return {k: np.asarray(v) for k, v in hyper.unflatten(np.asarray(self.state.hyper)).items()}

    def refine(self, data, **options):
        """:meth:`RIBPFilter.refine` on this result's state; a new result with the same traces.

        The passes' own traces are in the new result's ``refine_traces``.
        """
        state, traces = self.engine.refine(self.state, data, **options)
        result = RIBPResult(self.engine, state, self.traces, self.time)
        result.refine_traces = traces
        return result

    def log_predictive(self, test_obs, *, rng_key, num_samples=1000, batch_size=256):
        """See :meth:`RIBPFilter.log_predictive`."""
        return self.engine.log_predictive(
            self.state, test_obs, rng_key=rng_key, num_samples=num_samples, batch_size=batch_size
        )
