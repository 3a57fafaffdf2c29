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

**Existence probabilities (a correction to the paper).** Eq. 5 needs the number of features
created so far, ``Λ_{n-1} ≈ Poisson(ρ_{n-1})`` with ``ρ = Σ_k e_k``. The paper (App. A) takes
``e_k = 1 - Π_{n'} (1 - b_{n'k})``, as if the ``z_{n'k}`` were independent; they are not (a dish is
taken again only once it exists), and with no data this ``ρ_n`` differs from ``E[Λ_n] = α H^β_n``,
so the filter's prior drifts from the exact IBP marginals (by 0.22 at α = 10.78, β = 5.6, n = 5).
The prior ``q_{nk} = S_{n-1,k}/(β+n-1) + c_{nk}`` is a sum of two exclusive events, taking an
existing dish or creating dish ``k`` now (``c_{nk}``, the Poisson-CDF term), so the filter adds to
``e_k`` the posterior probability that observation ``n`` *created* dish ``k``,
``b_{nk} c_{nk} / q_{nk}`` (capped at 1). With no data this is exact: ``e_k = P(Λ_n >= k)``,
``ρ_n = E[Λ_n]`` and the filter reproduces :meth:`RecursiveIBP.marginals` to rounding.

**Feature update.** ``feature_update="paper"`` (default) is the paper's Eqs. 10-11: each
feature moves by ``b`` times its data term and ``b`` is scored against that feature. For an unborn
slot that feature is the prior ``N(μ⁰, Σ⁰)``, whose expected log-likelihood carries the penalty
``tr(ΛΣ⁰)/2`` (100 nats at D = 50, σ_A = 1, σ_o = 0.5), so births need a large prior ``b`` and
stop once the creation mass ``αβ/(β+n-1)`` falls below about 0.1-0.3: the count stalls after a
few dozen observations whatever the data say. ``"birth"`` (experimental, a change to the paper)
scores the unborn slots (existence below ``retire_threshold``) with their feature *given*
``z_l = 1`` minus its KL from the prior — for a Gaussian likelihood the exact log Bayes factor of
a new feature with the feature integrated out — and commits the moments of
``b N(μ¹, Σ¹) + (1 - b) N(μ⁰, Σ⁰)``; born features follow the paper's update. It keeps the count
growing and improves the held-out predictive, but over-counts when rows hold many features (the
greedy features are blends that rarely recur, see ``docs/ribp.md``). ``"collapsed"``
(experimental) does the same for every slot, existing features included and not ossified; it
under-counts even more.

**Refinement** (:meth:`RIBPFilter.refine`, linear-Gaussian only, a batch complement to the
one-pass update): mean-field coordinate ascent over a buffer of rows with every ``b_nk`` and
feature unfrozen, birth and death moves (:mod:`numpyro_bnp.infer._ribp_refine`). It brings the
count close to the truth where the one-pass filter stalls (``docs/ribp.md``).

**Read-outs** (:meth:`RIBPFilter.log_predictive`, :meth:`RIBPFilter.feature_use`, posterior
draws for ArviZ) are in :mod:`numpyro_bnp.infer._ribp_predictive`.

Variants, chosen from the model (:mod:`numpyro_bnp.infer._model`):

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
  linear-Gaussian model one Newton step is exact and the path equals the closed form.

  **Newton safeguard.** A full Newton step can overshoot far when the likelihood's curvature
  grows along the step: for counts ``~ Poisson(200)`` under a log link (``D = 5``, ``α = 3``,
  ``σ_A = 1``) the first step from the prior (rate ``e⁰ = 1``, gradient ``≈ 199`` per entry)
  lands near a log-rate of 97, ``e^97`` is infinite in float32, and the unguarded filter's whole
  state was NaN from the first row on, without a warning. So each step is safeguarded: a
  gradient or curvature entry that is not finite counts as zero, the curvature is floored at 0
  (the step's variance never exceeds the prior's), and the step is halved, at most
  ``MAX_HALVINGS`` times and else dropped, until the slot's objective (its weighted
  log-likelihood plus the log prior of its feature) does not decrease, up to rounding. On those
  counts the filter then fits (the plug-in rate is within 1 % of the data mean); on a
  linear-Gaussian model the full step lands on the maximum, is always taken, and the path still
  equals the closed form.

Each coordinate-ascent step is one sweep over the slots (forward on even steps, backward on odd
steps, as in the authors' code) that updates feature ``l`` — Eqs. 10-11 against the prior frozen at
the start of the observation, then the *ossification* average with weights ``b_nl`` (new) and
``S_{n-1,l}`` (old) — and then ``b_nl``, carrying only the D-vector residual
``o_n - Σ_{k≠l} b_k E[w_k] μ_k`` from slot to slot. Factor analysis then updates the weights.
Everything that does not depend on the residual (the feature's mean is affine in it,
``μ_l = a_l + g_l ⊙ r_l``) is computed for all slots before the sequential loop, which emits one
array per slot, ``(b_l, [ϕ_l, Φ_l,] μ_l)``: with XLA on CPU a scalar and a vector output would
copy the whole ``(K, D)`` output buffer at every slot.

**Retiring features.** A slot whose existence probability is below
``retire_threshold`` while a later slot's is above it is a *hole*: the prior indexes features by
creation order, so a hole would keep absorbing creation mass meant for the next new feature and
waste capacity. After each observation holes are reset to the prior and moved behind the live
slots (the live slots keep their order). Slots beyond the frontier stay in reserve for new
features.

**Capacity.** The state has a fixed number of slots ``K``. After each observation the filter
records the prior mass of features beyond the capacity, ``P(Pois(ρ_{n-1} + αβ/(β+n-1)) > K)``;
when it exceeds ``truncation_tol`` the streaming loop doubles ``K`` and re-runs the chunk, or, if
the user fixed ``max_features``, warns that the run is truncated.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_bnp._checks import (
    FixedOptions,
    finite_in_dtype,
    floating_dtype,
    model_function,
    positive_int,
    prng_key,
    unit_interval,
)
from numpyro_bnp._math import bernoulli_kl, logit, normal_kl, poisson_interval_probs
from numpyro_bnp.distributions.ibp import RecursiveIBP, ibp_capacity
from numpyro_bnp.infer import _ribp_predictive, streaming
from numpyro_bnp.infer._model import model_cache_key, read_feature_model
from numpyro_bnp.infer._ribp_refine import refine_state

__all__ = ["RIBPFilter", "RIBPInfo", "RIBPResult", "RIBPState"]

MAX_HALVINGS = 30  # step halvings of a generic-path Newton step before it is dropped


def _ossify(b, running_sum, new, old, keep=True):
    """The ossification average (paper App. B.2): ``(b new + S old) / (b + S)``.

    ``b`` is the observation's probability of using the slot, ``S`` the slot's running sum
    ``Σ_{n'} b_{n'}``, ``new`` the slot's update from this observation and ``old`` its value
    before; where ``b + S = 0`` or ``keep`` is False, ``new`` is returned. Broadcasts.
    """
    total = b + running_sum
    keep = keep & (total > 0)
    share = jnp.where(keep, b / jnp.where(keep, total, 1.0), 1.0)
    return old + share * (new - old)


class RIBPState(NamedTuple):
    """Filter state after ``num_seen`` observations, for ``K`` slots and dimension ``D``.

    :ivar mean: ``(K, D)`` feature means ``μ_k``.
    :ivar var: ``(K, D)`` diagonal feature covariances ``Σ_k``.
    :ivar running_sum: ``(K,)`` ``S_k = Σ_{n'} b_{n'k}``.
    :ivar existence: ``(K,)`` probability that feature ``k`` has been created (see the module
        docstring).
    :ivar num_seen: ``()`` int32, observations absorbed.
    :ivar truncation: ``()`` the largest prior mass beyond the capacity seen so far.
    """

    mean: jnp.ndarray
    var: jnp.ndarray
    running_sum: jnp.ndarray
    existence: jnp.ndarray
    num_seen: jnp.ndarray
    truncation: jnp.ndarray


class RIBPInfo(NamedTuple):
    """Per-observation diagnostics.

    :ivar num_features: ``ρ_n = Σ_k e_k``, the expected number of features created so far.
    :ivar num_active: number of slots with existence probability above 1/2.
    :ivar num_used: ``Σ_k b_nk``, the expected number of features in this observation.
    :ivar elbo: evidence lower bound on the log predictive ``log q(o_n | o_<n)`` of the new
        observation before it was absorbed (for the generic path, its plug-in approximation).
    :ivar truncation: prior mass of features beyond the capacity at this step.
    """

    num_features: jnp.ndarray
    num_active: jnp.ndarray
    num_used: jnp.ndarray
    elbo: jnp.ndarray
    truncation: jnp.ndarray


class RIBPFilter(FixedOptions):
    """R-IBP streaming filter on a NumPyro latent feature model (see the module docstring).

    :param model: a NumPyro model with a :class:`~numpyro_bnp.distributions.RecursiveIBP` site,
        a Normal feature site, optionally a Normal weight site, and an observed site (see
        :mod:`numpyro_bnp.infer._model`), e.g. :func:`numpyro_bnp.models.linear_gaussian`.
    :param int num_steps: coordinate-ascent steps per observation (default 3; 5 for factor analysis,
        as in the paper's code).
    :param int max_features: fix the number of slots (the run warns if it is truncated); ``None``
        starts from a capacity for one row (at least 16) and doubles it when needed.
    :param str likelihood: ``"auto"`` (closed form when the model allows, else generic) or
        ``"generic"`` to force the Newton path.
    :param str feature_update: ``"paper"`` (default), ``"birth"`` or ``"collapsed"``; see the
        module docstring.
    :param bool ossify: apply the ossification average (paper App. B.2); on by default.
    :param int newton_steps: Newton steps per slot and sweep in the generic path (each one
        safeguarded, see the module docstring).
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
        ...     random.PRNGKey(0), data, dim=6, alpha=1.0, sigma_o=0.1,
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
        "ossify",
        "newton_steps",
        "retire_threshold",
        "truncation_tol",
        "dtype",
    )
    # the streaming protocol (numpyro_bnp.infer.streaming.StreamingEngine)
    state_type = RIBPState
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
        if feature_update not in ("birth", "collapsed", "paper"):
            raise ValueError(
                f"feature_update must be 'birth', 'collapsed' or 'paper', got {feature_update!r}"
            )
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
        self.ossify = bool(ossify)
        self.newton_steps = newton_steps
        self.retire_threshold = retire_threshold
        self.truncation_tol = truncation_tol
        self.dtype = floating_dtype(dtype)
        self.spec = None
        self._spec_key = None

    # ------------------------------------------------------------------ record and pickling
    @property
    def options(self):
        """The filter's options as JSON-storable values (recorded in checkpoints)."""
        return {
            "num_steps": self.num_steps,
            "max_features": self.max_features,
            "likelihood": self.likelihood,
            "feature_update": self.feature_update,
            "ossify": self.ossify,
            "newton_steps": self.newton_steps,
            "retire_threshold": float(self.retire_threshold),
            "truncation_tol": float(self.truncation_tol),
            "dtype": np.dtype(self.dtype).name,
        }

    @property
    def model_args(self):
        """Positional model arguments the filter read the model with (``None`` before)."""
        return None if self.spec is None else self.spec.model_args

    @property
    def model_kwargs(self):
        """Keyword model arguments the filter read the model with (``None`` before)."""
        return None if self.spec is None else dict(self.spec.model_kwargs)

    @property
    def model_summary(self):
        """One line per site of the traced model (name, distribution, shape)."""
        self._require_init()
        return tuple(self.spec.site_summary)

    def __getstate__(self):
        # the compiled functions and the read model are not pickled (closures); the model
        # function is pickled by reference and read again, with the same arguments, on load
        state = {name: self.__dict__[name] for name in self.fixed_options}
        state["model_read"] = None if self.spec is None else (self.model_args, self.model_kwargs)
        return state

    def __setstate__(self, state):
        state = dict(state)
        read = state.pop("model_read")
        self.__dict__.update(state, spec=None, _spec_key=None)
        if read is not None:
            self._read(*read)

    @classmethod
    def from_checkpoint(cls, model, path, *model_args, **model_kwargs):
        """Rebuild the filter recorded in a checkpoint and read its state: ``(filter, state)``.

        The filter gets the options recorded by :meth:`RIBPResult.save` (``num_steps``,
        ``max_features``, ``feature_update``, ..., ``dtype``) and reads ``model`` with the
        recorded model arguments; resume with ``filt.run(key, data, init_state=state)``
        (which may leave out the model arguments: the filter keeps the ones it read).
        Arguments passed here must equal the recorded ones (see
        :func:`streaming.resume_arguments`); those recorded as not storable must be passed.

        :raises ValueError: when the checkpoint is not an :class:`RIBPFilter`'s, an argument
            passed differs from the recorded one, or the traced model's sites (names,
            distributions, shapes), kind or dimension differ from the recorded model's.
        """
        record = streaming.read_checkpoint(path)
        if record["engine"] != cls.__name__:
            raise ValueError(f"{path} holds a state of {record['engine']}, not of {cls.__name__}")
        if record["options"] is None:
            raise ValueError(
                f"{path} does not record the filter's options (written by an older version); "
                "build the filter and read the state with its load method"
            )
        args, kwargs = streaming.resume_arguments(record, model_args, model_kwargs, path=path)
        options = dict(record["options"])
        options["dtype"] = np.dtype(options["dtype"])
        filt = cls(model, **options)
        filt.init(None, *args, **kwargs)
        streaming.check_model_summary(record, filt, path=path)
        return filt, streaming.load(path, filt)

    # ------------------------------------------------------------------ set-up
    def _read(self, model_args, model_kwargs):
        # the compiled functions bake in the model's constants: reuse them (and skip the trace)
        # only for the same model arguments, compared by value (see model_cache_key)
        model_kwargs = streaming.model_arguments(self.model, model_args, model_kwargs)
        key = model_cache_key(self.model, model_args, model_kwargs)
        if key is not None and key == self._spec_key:
            return
        spec = read_feature_model(self.model, model_args, model_kwargs, engine="RIBPFilter")
        kind = spec.likelihood if self.likelihood == "auto" else "generic"
        if kind == "generic" and spec.weight_site is not None:
            raise ValueError(
                "RIBPFilter's generic path expected a model without a per-row weight site; found "
                f"{spec.weight_site!r} with a non-Gaussian or non-linear likelihood "
                f"(sites: {'; '.join(spec.site_summary)})"
            )
        # constants finite in float64 can overflow or vanish in the working dtype (σ = 1e20
        # squared, 1/σ² for σ = 1e-30 in float32) and would turn the whole state into NaN
        dt = self.dtype
        obs, feat = repr(spec.obs_site), repr(spec.feature_site)
        constants = [
            (spec.alpha, f"alpha of the RecursiveIBP site {spec.ibp_site!r}", True),
            (spec.beta, f"beta of the RecursiveIBP site {spec.ibp_site!r}", True),
            (spec.feature_loc, f"the prior mean of the feature site {feat}", False),
            (spec.feature_var, f"the prior variance of the feature site {feat}", True),
        ]
        if spec.noise_var is not None:
            with np.errstate(divide="ignore"):
                noise_prec = 1.0 / spec.noise_var
            constants += [
                (
                    noise_prec,
                    f"the noise precision 1/σ² of the observed site {obs}",
                    True,
                ),
                (spec.noise_var, f"the noise variance σ² of the observed site {obs}", True),
            ]
        if spec.weight_site is not None:
            weight = repr(spec.weight_site)
            constants += [
                (spec.weight_loc, f"the prior mean of the weight site {weight}", False),
                (spec.weight_var, f"the prior variance of the weight site {weight}", True),
            ]
        for value, name, positive in constants:
            finite_in_dtype(value, name, dtype=dt, positive=positive)
        self.spec, self.kind = spec, kind
        self.dim = spec.dim
        self._ibp = RecursiveIBP(
            jnp.asarray(spec.alpha, dt), jnp.asarray(spec.beta, dt), num_rows=1, max_features=1
        )
        self._loc = jnp.asarray(spec.feature_loc, dt)
        self._var = jnp.asarray(spec.feature_var, dt)
        if spec.noise_var is not None:
            self._noise_prec = jnp.asarray(1.0 / spec.noise_var, dt)
        self.num_steps_ = self.num_steps or (5 if kind == "factor_analysis" else 3)
        self._spec_key = key
        self.scan_chunk = streaming.chunk_scanner(self.update)
        self._log_predictive_fns = {}
        self._feature_use_fn = None

    def _require_init(self):
        if self.spec is None:
            raise RuntimeError("call RIBPFilter.init(rng_key, *model_args, **model_kwargs) first")

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
            capacity = max(16, ibp_capacity(self.spec.alpha, self.spec.beta, num_rows=1))
        return self._empty(capacity)

    def _empty(self, capacity):
        dt = self.dtype
        return RIBPState(
            mean=jnp.broadcast_to(self._loc, (capacity, self.dim)),
            var=jnp.broadcast_to(self._var, (capacity, self.dim)),
            running_sum=jnp.zeros(capacity, dt),
            existence=jnp.zeros(capacity, dt),
            num_seen=jnp.zeros((), jnp.int32),
            truncation=jnp.zeros((), dt),
        )

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
        to ``max_features`` when the filter fixes it.

        :raises TypeError: when ``state`` is not an :class:`RIBPState`.
        :raises ValueError: naming the first field that does not fit.
        """
        self._require_init()
        if not isinstance(state, RIBPState):
            raise TypeError(f"{name} must be an RIBPState, got {type(state).__name__}")
        fields = {field: np.asarray(value) for field, value in state._asdict().items()}
        mean = fields["mean"]
        if mean.ndim != 2 or mean.shape[0] < 1 or mean.shape[1] != self.dim:
            raise ValueError(
                f"{name}.mean must have shape (K, {self.dim}) for the model's D = {self.dim}, "
                f"got {mean.shape}"
            )
        capacity, dim = mean.shape
        shapes = {
            "mean": (capacity, dim),
            "var": (capacity, dim),
            "running_sum": (capacity,),
            "existence": (capacity,),
            "num_seen": (),
            "truncation": (),
        }
        for field, shape in shapes.items():
            value = fields[field]
            if value.shape != shape:
                raise ValueError(
                    f"{name}.{field} must have shape {shape} (K = {capacity} slots, from "
                    f"{name}.mean), got {value.shape}"
                )
            want = np.dtype(np.int32) if field == "num_seen" else np.dtype(self.dtype)
            if value.dtype != want:
                raise ValueError(
                    f"{name}.{field} must have dtype {want} (the filter's dtype), got {value.dtype}"
                )
            if not np.isfinite(value).all():
                raise ValueError(f"{name}.{field} holds NaN or infinite values")
        ranges = {
            "var": (fields["var"] > 0, "> 0"),
            "running_sum": (fields["running_sum"] >= 0, ">= 0"),
            "existence": ((fields["existence"] >= 0) & (fields["existence"] <= 1), "in [0, 1]"),
            "num_seen": (fields["num_seen"] >= 0, ">= 0"),
            "truncation": ((fields["truncation"] >= 0) & (fields["truncation"] <= 1), "in [0, 1]"),
        }
        for field, (ok, what) in ranges.items():
            if not np.all(ok):
                bad = fields[field].reshape(-1)[np.argmin(np.reshape(ok, -1))].item()
                raise ValueError(f"{name}.{field} must be {what}, got {bad!r}")
        if self.max_features is not None and capacity != self.max_features:
            raise ValueError(
                f"{name} has {capacity} slots but the filter fixes max_features="
                f"{self.max_features}; build the filter with max_features={capacity}, or None "
                "to let the capacity grow"
            )

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
        fresh = self._empty(capacity - self.capacity(state))
        return RIBPState(
            *(jnp.concatenate([a, b]) for a, b in zip(state[:4], fresh[:4], strict=True)),
            num_seen=state.num_seen,
            truncation=jnp.zeros_like(state.truncation),
        )

    # ------------------------------------------------------------------ the update
    def prior(self, state):
        """``(K,)`` filtering prior ``q(z_{n+1,k} = 1 | o_{<=n})`` of the next row (Eq. 5)."""
        log_absent = jnp.log1p(-state.existence)
        return self._ibp.filtering_prior(state.running_sum, log_absent, state.num_seen)

    def update(self, state, obs):
        """Absorb one observation ``obs`` ``(D,)``: pure and jittable. Returns ``(state, info)``."""
        self._require_init()
        dt = self.dtype
        obs = jnp.asarray(obs, dt)
        eps = jnp.finfo(dt).eps
        q = jnp.clip(self.prior(state), eps, 1.0 - eps)
        prior_logit = logit(q)
        fit = self._fit_generic if self.kind == "generic" else self._fit_closed_form
        b, mean, var, local = fit(state, obs, q, prior_logit, update_features=True)
        elbo = self._elbo(state, obs, q, b, local)

        # existence: add the posterior probability that THIS observation created feature k, b
        # times the creation share of its prior, q = S/(β+n-1) [take] + P(created now) [create]
        denom = self._ibp.beta + state.num_seen.astype(dt)
        created_share = jnp.clip(1.0 - state.running_sum / denom / q, 0.0, 1.0)
        existence = jnp.minimum(state.existence + b * created_share, 1.0 - eps)
        running_sum = state.running_sum + b
        num_seen = state.num_seen + 1
        rate = jnp.sum(state.existence)
        new_rate = self._ibp.alpha * self._ibp.beta / denom
        capacity = mean.shape[0]
        # P(Pois(ρ_{n-1} + αβ/(β+n-1)) > K): prior mass of features the slots cannot hold
        beyond = poisson_interval_probs(jnp.zeros_like(rate), rate + new_rate, capacity + 1)[-1]
        new = RIBPState(
            mean,
            var,
            running_sum,
            existence,
            num_seen,
            jnp.maximum(state.truncation, beyond).astype(dt),
        )
        new = self._retire_holes(new)
        exists = new.existence
        info = RIBPInfo(
            num_features=jnp.sum(exists),
            num_active=jnp.sum(exists > 0.5).astype(jnp.int32),
            num_used=jnp.sum(b),
            elbo=elbo,
            truncation=beyond.astype(dt),
        )
        return new, info

    def _retire_holes(self, state):
        exists = state.existence
        later = lax.cummax(exists[::-1])[::-1]
        later = jnp.concatenate([later[1:], jnp.zeros_like(later[:1])])
        hole = (exists < self.retire_threshold) & (later >= self.retire_threshold)

        def compact(state):
            # the stable partition live-then-holes, without a sort: a sort keeps XLA from compiling
            # the whole chunk loop into one CPU kernel (see numpyro_bnp.xla_cpu)
            live = ~hole
            slot = jnp.arange(hole.shape[0])
            target = jnp.where(live, jnp.cumsum(live), jnp.sum(live) + jnp.cumsum(hole)) - 1
            order = jnp.sum(jnp.where(target == slot[:, None], slot, 0), axis=1)
            moved = hole[order][:, None]
            fresh = self._empty(self.capacity(state))
            fields = [
                jnp.where(moved if f.ndim == 2 else moved[:, 0], z, f[order])
                for f, z in zip(state[:4], fresh[:4], strict=True)
            ]
            return RIBPState(*fields, state.num_seen, state.truncation)

        return lax.cond(jnp.any(hole), compact, lambda s: s, state)

    def _fit_closed_form(self, state, obs, q, prior_logit, *, update_features):
        """Coordinate ascent for the Gaussian likelihoods (paper App. B.2-B.3).

        Returns ``b``, the features' means and variances, and for factor analysis the weights'
        means ``ϕ`` and variances ``Φ`` given ``z = 1`` (``None`` otherwise).
        """
        mu0, var0 = state.mean, state.var
        capacity = mu0.shape[0]
        if self.kind == "factor_analysis":
            # weights start one prior standard deviation above their mean: this breaks the sign
            # symmetry between w and A for a new feature (the authors' code draws them at random)
            w_var = jnp.full(capacity, self.spec.weight_var, self.dtype)
            phi = self.spec.weight_loc + jnp.sqrt(w_var)
        else:
            w_var, phi = jnp.zeros(capacity, self.dtype), jnp.ones(capacity, self.dtype)
        carry = (q, mu0, var0, phi, w_var)
        for step in range(self.num_steps_):
            carry = self._sweep(state, obs, prior_logit, carry, step % 2 == 1, update_features)
        b, mean, var, phi, w_var = carry
        born = self._born(state)
        if update_features and born is not None:
            mean1, var1 = self._commit(state, b, mean, var)
            mean, var = jnp.where(born, mean1, mean), jnp.where(born, var1, var)
        local = (phi, w_var) if self.kind == "factor_analysis" else None
        return b, mean, var, local

    def _born(self, state):
        """``(K, 1)`` mask of the slots scored with the feature integrated out, or ``None``.

        ``"collapsed"``: every slot. ``"birth"``: the unborn slots, whose existence probability
        is below ``retire_threshold`` (see the module docstring). ``"paper"``: none.
        """
        if self.feature_update == "paper":
            return None
        if self.feature_update == "collapsed":
            return jnp.ones_like(state.existence, bool)[:, None]
        return (state.existence < self.retire_threshold)[:, None]

    def _commit(self, state, b, mean1, var1):
        """Collapsed mode: moments of ``b N(μ¹, Σ¹) + (1 - b) N(μ⁰, Σ⁰)``, then ossified."""
        mu0, var0, S = state.mean, state.var, state.running_sum
        bc = b[:, None]
        step = mean1 - mu0
        mean = mu0 + bc * step
        var = bc * var1 + (1.0 - bc) * var0 + bc * (1.0 - bc) * step * step
        if self.ossify:
            Sc = S[:, None]
            mean, var = _ossify(bc, Sc, mean, mu0), _ossify(bc, Sc, var, var0)
        return mean, var

    def _sweep(self, state, obs, prior_logit, carry, reverse, update):
        """One sweep over the slots, carrying only the D-vector residual; O(K D).

        For slot ``l``: feature, then (factor analysis) its weight given ``z_l = 1``, then
        ``b_l``. Everything that does not depend on the residual is computed for all slots at once
        before the sequential scan: the feature's mean is affine in the residual ``r_l``,
        ``μ_l = a_l + g_l ⊙ r_l``, with the weights ``b_l, ϕ_l`` of the previous sweep.

        * ``paper``: Eqs. 10-11 (weighted by ``b_l``) against the frozen prior, then ossified;
          the logit uses that feature.
        * ``collapsed`` (every slot) and ``birth`` (the unborn slots, :meth:`_born`): the
          feature's posterior *given* ``z_l = 1`` (weight 1, not ossified); the logit gets its KL
          from the frozen prior, so for a Gaussian likelihood it is the exact log Bayes factor of
          ``z_l = 1`` with the feature integrated out.
        """
        lam = self._noise_prec
        fa = self.kind == "factor_analysis"
        born = self._born(state)
        b, mean, _, phi, w_var = carry
        mu0, var0, S = state.mean, state.var, state.running_sum
        if update or born is not None:
            weight = b[:, None] if born is None else jnp.where(born, 1.0, b[:, None])
            phic = phi[:, None]
            var_s = 1.0 / (1.0 / var0 + weight * (phic * phic + w_var[:, None]) * lam)  # Eq. 10
            a, g = var_s * mu0 / var0, var_s * (weight * phic) * lam  # Eq. 11: μ* = a + g ⊙ r
            if self.ossify:  # the average of affine maps r -> a + g r is affine (born: _commit)
                bc, Sc, keep = b[:, None], S[:, None], True if born is None else ~born
                a, g = _ossify(bc, Sc, a, mu0, keep), _ossify(bc, Sc, g, 0.0, keep)
                var_s = _ossify(bc, Sc, var_s, var0, keep)
        else:
            a, g, var_s = mu0, jnp.zeros_like(mu0), var0
        trace_var = var_s @ lam  # tr(Λ Σ_l)
        if born is not None:  # the parts of KL(N(μ¹, Σ¹) || N(μ⁰, Σ⁰)) that do not depend on r
            kl_const = jnp.sum(normal_kl(mu0, var_s, mu0, var0), axis=-1)
            born_f = born[:, 0].astype(kl_const.dtype)
        else:
            kl_const = born_f = jnp.zeros_like(trace_var)
        coef = b * phi  # E[z_k w_k] of the previous sweep
        old = coef[:, None] * mean
        # the carry is the residual r_l = o - Σ_{k≠l} b_k E[w_k] μ_k seen by the current slot; it
        # leaves the slot with the next slot's old contribution added back (`old_next`), so the
        # loop never materialises r and μ as separate kernels
        first = -1 if reverse else 0
        resid = obs - coef @ mean + old[first]
        zero = jnp.zeros_like(old[:1])
        old_next = jnp.concatenate([zero, old[:-1]] if reverse else [old[1:], zero])

        emit = update or born is not None  # the features change: the loop emits them

        def slot(r, x):
            next_l, a_l, g_l, tv_l, logit = x[:5]
            mu = a_l + g_l * r
            if born is not None:
                kl_l, born_l, mu0_l, var0_l = x[5:]
                shift = mu - mu0_l
                logit = logit - born_l * (kl_l + 0.5 * jnp.sum(shift * shift / var0_l))
            if fa:
                lam_mu = lam * mu
                data = jnp.sum(lam_mu * r)
                second = jnp.sum(lam_mu * mu) + tv_l  # E[A_l Λ A_lᵀ]
                # q(w_l | z_l = 1) = N(ϕ_l, Φ_l): Eq. 12 restricted to slot l, given z_l = 1
                m0, v0 = self.spec.weight_loc, self.spec.weight_var
                w_var_l = 1.0 / (1.0 / v0 + second)
                phi_l = w_var_l * (m0 / v0 + data)
                kl_w = normal_kl(phi_l, w_var_l, m0, v0)
                logit = logit - kl_w + phi_l * data - 0.5 * (phi_l * phi_l + w_var_l) * second
                b_new = jax.nn.sigmoid(logit)
                scalars = [b_new, phi_l, w_var_l]
                coef_l = b_new * phi_l
            else:  # ϕ = 1, Φ = 0: one reduction, μᵀΛr - (μᵀΛμ + tr ΛΣ) / 2
                logit = logit + jnp.sum(lam * mu * (r - 0.5 * mu)) - 0.5 * tv_l
                b_new = jax.nn.sigmoid(logit)
                scalars = [b_new]
                coef_l = b_new
            # one output array per slot: with several, XLA on CPU copies the (K, D) one per slot
            out = jnp.stack(scalars) if not emit else jnp.concatenate([jnp.stack(scalars), mu])
            return r - coef_l * mu + next_l, out

        xs = (old_next, a, g, trace_var, prior_logit)
        if born is not None:
            xs += (kl_const, born_f, mu0, var0)
        out = lax.scan(slot, resid, xs, reverse=reverse)[1]
        b = out[:, 0]
        if fa:
            phi, w_var = out[:, 1], out[:, 2]
        if not emit:
            return b, mu0, var_s, phi, w_var
        return b, out[:, 3 if fa else 1 :], var_s, phi, w_var

    def _fit_generic(self, state, obs, q, prior_logit, *, update_features):
        """Newton / delta-method coordinate ascent on the model's own log-likelihood.

        Each Newton step is safeguarded (see the module docstring): a gradient or curvature that
        is not finite counts as zero, and the step is halved until the slot's objective
        (weighted log-likelihood plus log prior) does not decrease, or dropped.
        """
        mu0, var0, S = state.mean, state.var, state.running_sum
        capacity = mu0.shape[0]

        def loglik(z, a, o):  # in the working dtype (a model's constants may promote it)
            return self.spec.row_log_likelihood(z, a, o).astype(self.dtype)

        born = self._born(state)  # slots scored with the feature integrated out (or None)
        # rounding allowance of the "does not decrease" test: an exact Newton step (Gaussian
        # likelihood) lands on the maximum, where the objective agrees to a few ulps
        slack = 16 * jnp.finfo(self.dtype).eps

        def slot(i, carry, reverse):
            b, mean, var = carry
            l = capacity - 1 - i if reverse else i
            z1 = b.at[l].set(1.0)

            def f(a_l):
                return loglik(z1, mean.at[l].set(a_l), obs)

            def grad_and_curv(a_l):
                g, hv = jax.jvp(jax.grad(f), (a_l,), (jnp.ones_like(a_l),))
                ok = jnp.isfinite(g) & jnp.isfinite(hv)
                # diagonal curvature (factorised likelihood), floored at 0: the step's variance
                # stays below the prior's; a non-finite entry contributes nothing
                return jnp.where(ok, g, 0.0), jnp.where(ok, jnp.maximum(-hv, 0.0), 0.0)

            mu_l, mu0_l, var0_l = mean[l], mu0[l], var0[l]
            born_l = jnp.zeros((), bool) if born is None else born[l, 0]
            weight = jnp.where(born_l, 1.0, b[l])

            def objective(a_l):  # the slot's share of the per-observation objective
                fit = jnp.where(weight > 0, weight * f(a_l), 0.0)
                return fit - 0.5 * jnp.sum((a_l - mu0_l) ** 2 / var0_l)

            def newton(mu_l):
                g, h = grad_and_curv(mu_l)
                var_l = 1.0 / (1.0 / var0_l + weight * h)
                step = var_l * (weight * g - (mu_l - mu0_l) / var0_l)
                start = objective(mu_l)
                floor = start - slack * (1.0 + jnp.abs(start))

                def worse(c):  # NaN and -inf are worse than anything
                    return ~(c[2] >= floor) & (c[0] < MAX_HALVINGS)

                def halve(c):
                    t = 0.5 * c[1]
                    return c[0] + 1, t, objective(mu_l + t * step)

                one = jnp.ones((), step.dtype)
                _, t, value = lax.while_loop(worse, halve, (0, one, objective(mu_l + step)))
                return mu_l + jnp.where(value >= floor, t, 0.0) * step, var_l

            if update_features or born is not None:
                for _ in range(self.newton_steps):
                    mu_l, var_l = newton(mu_l)
                if self.ossify:  # born: see _commit
                    mu_l = _ossify(b[l], S[l], mu_l, mu0_l, ~born_l)
                    var_l = _ossify(b[l], S[l], var_l, var0_l, ~born_l)
                _, h = grad_and_curv(mu_l)
            else:
                var_l = var0_l
                _, h = grad_and_curv(mu_l)
            mean = mean.at[l].set(mu_l)
            f1 = f(mu_l) - 0.5 * jnp.sum(h * var_l)  # E_q(A_l) log p(o | z_l = 1) to 2nd order
            f0 = loglik(b.at[l].set(0.0), mean, obs)
            logit = prior_logit[l] + f1 - f0
            if born is not None:  # KL(N(μ¹, Σ¹) || N(μ⁰, Σ⁰))
                kl = jnp.sum(normal_kl(mu_l, var_l, mu0_l, var0_l))
                logit = logit - jnp.where(born_l, kl, 0.0)
            # both indicator values impossible (-inf - -inf): no evidence, keep the prior's
            logit = jnp.where(jnp.isnan(logit), prior_logit[l], logit)
            b = b.at[l].set(jax.nn.sigmoid(logit))
            return b, mean, var.at[l].set(var_l)

        carry = (q, mu0, var0)
        for step in range(self.num_steps_):
            body = functools.partial(slot, reverse=step % 2 == 1)
            carry = lax.fori_loop(0, capacity, body, carry)
        b, mean, var = carry
        if update_features and born is not None:
            mean1, var1 = self._commit(state, b, mean, var)
            mean, var = jnp.where(born, mean1, mean), jnp.where(born, var1, var)
        return b, mean, var, None

    def _elbo(self, state, obs, q, b, local):
        """ELBO of ``o_n`` under the prior features ``q(A | o_<n)`` and the fitted ``b`` (, w)."""
        mu0, var0 = state.mean, state.var
        kl = jnp.sum(bernoulli_kl(b, q))
        if self.kind == "generic":
            return self.spec.row_log_likelihood(b, mu0, obs) - kl
        lam = self._noise_prec
        if local is None:
            phi, ew2 = jnp.ones_like(b), jnp.ones_like(b)
        else:
            phi, w_var = local
            ew2 = phi**2 + w_var
            m0, v0 = self.spec.weight_loc, self.spec.weight_var
            kl_w = normal_kl(phi, w_var, m0, v0)
            kl = kl + jnp.sum(b * kl_w)  # q(w_k | z_k = 0) is the prior
        mean = (b * phi) @ mu0
        spread = (b * ew2) @ (mu0**2 + var0) - (b * phi) ** 2 @ mu0**2
        quad = jnp.sum(lam * ((obs - mean) ** 2 + spread))
        ll = -0.5 * quad + 0.5 * jnp.sum(jnp.log(lam / (2 * jnp.pi)))
        return ll - kl

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
        if init_state is not None and self.spec is not None and not (model_args or model_kwargs):
            state = None  # resuming in a filter that has read its model (e.g. from_checkpoint)
        else:
            state = self.init(rng_key, *model_args, **model_kwargs)
        if init_state is not None:
            self.check_state(init_state, "init_state")
            state = init_state
        final, traces, time = streaming.run(
            self,
            state,
            data,
            chunk_size=chunk_size,
            progress_bar=progress_bar,
            growable=self.max_features is None,
            trace_every=trace_every,
        )
        return RIBPResult(self, final, traces, time)

    def load(self, path, *model_args, **model_kwargs):
        """Read a state saved by :meth:`RIBPResult.save` to resume the stream in this filter.

        The model is read from ``model_args``/``model_kwargs`` when given (else the filter must
        have read it, by :meth:`init` or :meth:`run`); the checkpoint must come from an
        :class:`RIBPFilter` with the same model kind and dtype, and its state must pass
        :meth:`check_state` (see :func:`streaming.load`).
        """
        if model_args or model_kwargs:
            self.init(None, *model_args, **model_kwargs)
        self._require_init()
        return streaming.load(path, self)

    def refine(self, state, data, *, num_passes=100, start="empty", min_use=1.5, num_candidates=16):
        """Refinement passes over a buffer of rows, everything unfrozen (linear-Gaussian model).

        Batch mean-field coordinate ascent over ``data`` with birth (at most one per pass) and
        death moves; see :mod:`numpyro_bnp.infer._ribp_refine`. The returned state describes
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
        fields, traces = refine_state(
            self, state, obs, num_passes, start, min_use, min(num_candidates, obs.shape[0])
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
        if obs is not None:
            obs = jnp.asarray(self.check_batch(obs, name="obs"))
        return _ribp_predictive.posterior_draws(self, rng_key, state, num_draws, obs)

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
        if obs is not None:
            obs = jnp.asarray(self.check_batch(obs, name="obs"))
            num_obs = obs.shape[0]
        num_obs = positive_int(num_obs, "num_obs")
        return _ribp_predictive.posterior_samples(self, rng_key, state, num_samples, num_obs, obs)

    def log_predictive(self, state, test_obs, *, rng_key, num_samples=1000, batch_size=256):
        """Log posterior predictive of each test row, importance-sampled over ``z``.

        Each row is treated as observation ``n + 1``: ``z`` has the filtering prior ``π`` and the
        features their filtered posterior ``q(A)``. Given ``z`` the features are integrated out in
        closed form (linear-Gaussian: ``N(o; z μ, diag(σ² + z Σ))``; factor analysis: the Gaussian
        with the weights integrated out and the features' variance moment-matched); the generic
        path draws ``A ~ q(A)`` with each ``z``. ``z`` is drawn from a mean-field proposal fitted
        to the row (the filter's own coordinate ascent with the features held fixed; for the
        Gaussian kinds its rounding is then improved by greedy single and pair flips, see
        :func:`~numpyro_bnp.infer._ribp_predictive.proposal_mode`, and the proposal is half the
        refit from there and half that mode; mass on unborn slots is shared out over all of them,
        see :func:`~numpyro_bnp.infer._ribp_predictive.spread_over_unborn`), mixed 9:1 with the
        prior, which keeps every ``z`` possible and the weights bounded; the estimate is the
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
        return _ribp_predictive.log_predictive(self, state, obs, rng_key, num_samples, batch_size)

    def feature_use(self, state, obs, *, batch_size=1024):
        """``(M, K)`` probabilities ``b`` that each row of ``obs`` uses each slot.

        Each row is treated as the next observation (filtering prior ``π``) and fitted by the
        filter's coordinate ascent with the features held fixed; the state is not changed.

        :param int batch_size: rows per compiled call.
        """
        self._require_init()
        batch_size = positive_int(batch_size, "batch_size")
        obs = jnp.asarray(self.check_batch(obs, name="obs"))
        return _ribp_predictive.feature_use(self, state, obs, batch_size)


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
