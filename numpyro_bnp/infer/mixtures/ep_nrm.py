r"""EP-NRM: expectation-propagation refinement of ADF-NRM for NGGP mixtures on data held in memory
(Tank, Foti & Fox 2015, Section 3.4; ``docs/nrm.md``). The state, the update and the read-outs
are :class:`~numpyro_bnp.infer.ADFNRM`'s; this module adds the cavity passes."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_bnp._checks import nonnegative_int, positive_float, prng_key, unit_interval
from numpyro_bnp.infer.core import streaming
from numpyro_bnp.infer.mixtures.adf_nrm import ADFNRM, NRMResult, NRMState

__all__ = ["EPNRM"]


class EPNRM(ADFNRM):
    """EP-NRM: expectation-propagation refinement of ADF-NRM on a data set held in memory.

    Tank, Foti & Fox 2015, Section 3.4 (Eqs. 24-26; ``docs/nrm.md``). One ADF pass (the data in
    their order) keeps each observation's responsibilities ``r_j``; each following pass visits
    the observations in a random order and, for each ``j``: removes ``r_j``'s contribution
    (the cavity: the conjugate parameters, soft counts and ``ℓ`` without ``x_j``, an exact
    subtraction), recomputes ``r_j`` against the cavity with the prior weights of Eq. 26
    (``max(E[n_k \\ j] - σ, 0)`` and ``a (Û_{\\j} + τ)^σ``, ``Û_{\\j}`` the mode for ``N - 1``
    observations in ``E[K_{\\j}]`` clusters), opens a new cluster when its responsibility exceeds
    ``ε`` (a birth), optionally damps ``r_j`` towards its old value, and adds it back. After each
    pass the clusters whose soft count fell below ``ε`` are removed (their responsibilities
    renormalised onto the others, whose parameters absorb the difference). The passes stop after
    ``num_passes`` or when no ``r_j`` moved by more than ``tol`` (L1).

    :param int num_passes: EP passes after the ADF pass (0: the ADF result).
    :param float tol: stop when ``max_j ||r_j^new - r_j^old||_1 < tol``.
    :param float damping: ``η`` in (0, 1]: ``r_j ← (1 - η) r_j^old + η r_j^new``; ``None``: 1.
    :param new_cluster_threshold: as for :class:`ADFNRM`.
    :param u_estimate: as for :class:`ADFNRM`.
    :param max_clusters: as for :class:`ADFNRM`.
    :param dtype: as for :class:`ADFNRM`.

    :meth:`run` returns an :class:`NRMResult` whose traces are per pass (``time`` 0 is the ADF
    pass): ``num_clusters``, ``num_instantiated``, ``log_predictive`` (the mean over the
    observations of ``log q_{\\j}(x_j)``, each against its cavity: a leave-one-out score of the
    training data) and ``max_change``.
    """

    fixed_options = (*ADFNRM.fixed_options, "num_passes", "tol", "damping")

    def __init__(
        self,
        model,
        *,
        num_passes,
        tol=1e-4,
        damping=None,
        new_cluster_threshold=None,
        u_estimate="log_mode",
        max_clusters=None,
        dtype=None,
    ):
        super().__init__(
            model,
            new_cluster_threshold=new_cluster_threshold,
            u_estimate=u_estimate,
            max_clusters=max_clusters,
            dtype=dtype,
        )
        self.num_passes = nonnegative_int(num_passes, "num_passes")
        self.tol = positive_float(tol, "tol")
        if damping is None or (type(damping) in (int, float) and damping == 1):
            damping = 1.0  # no damping
        else:
            damping = unit_interval(damping, "damping")
        self.damping = damping

    @property
    def options(self):
        """The engine's options as JSON-storable values (recorded in checkpoints)."""
        # merges are ADF's (always off here): EP removes the clusters whose soft count falls
        # below ε instead
        adf = {k: v for k, v in super().options.items() if not k.startswith("merge_")}
        return {
            **adf,
            "num_passes": self.num_passes,
            "tol": self.tol,
            "damping": self.damping,
        }

    def _read(self, model_args, model_kwargs):
        key = self._spec_key
        super()._read(model_args, model_kwargs)
        if self._spec_key != key or getattr(self, "_passes", None) is None:
            self._passes = (jax.jit(self._adf_pass), jax.jit(self._ep_pass), jax.jit(self._prune))

    # ------------------------------------------------------------------ the passes (jitted)
    def _adf_pass(self, state, rows):
        def step(state, obs):
            new, info, weights = self._absorb(state, obs)
            return new, (info, weights)

        state, (infos, weights) = jax.lax.scan(step, state, rows)
        return state, infos, weights

    def _ep_pass(self, state, resp, rows, order):
        def step(carry, j):
            state, resp = carry
            obs = jax.tree.map(lambda a: a[j], rows)
            old = resp[j]
            cavity = self._remove(state, obs, old)
            new, info, weights = self._absorb(cavity, obs, previous=old, damping=self.damping)
            change = jnp.sum(jnp.abs(weights - old))
            return (new, resp.at[j].set(weights)), (info.log_predictive, change)

        (state, resp), (log_pred, change) = jax.lax.scan(step, (state, resp), order)
        return state, resp, jnp.mean(log_pred), jnp.max(change)

    def _prune(self, state, resp, rows):
        """Remove the clusters whose soft count is below ``ε``: each row's responsibilities
        renormalised onto the kept clusters (whose parameters absorb the difference), the
        removed slots reset to the prior, the kept ones moved to the front in their order."""
        family = self._family
        keep = state.active & (state.counts >= self.threshold)
        kept = jnp.where(keep, resp, 0.0)
        total = kept.sum(1, keepdims=True)
        new_resp = jnp.where(total > 0, kept / jnp.maximum(total, 1e-30), resp)

        def step(params, inputs):
            obs, delta = inputs
            return family.update(params, family.stats(obs), jnp.where(keep, delta, 0.0)), None

        params = jax.lax.scan(step, state.params, (rows, new_resp - resp))[0]
        clip = self._one
        log_empty = jnp.sum(jnp.log1p(-jnp.minimum(new_resp, clip)), 0)
        prior = family.init_clusters(state.counts.shape[0])
        params = jax.tree.map(
            lambda p, q: jnp.where(keep.reshape((-1,) + (1,) * (p.ndim - 1)), p, q), params, prior
        )
        order = jnp.argsort(~keep, stable=True)
        log_empty = jnp.where(keep, log_empty, 0.0)[order]
        return (
            NRMState(
                params=jax.tree.map(lambda a: a[order], params),
                counts=jnp.where(keep, new_resp.sum(0), 0.0)[order],
                log_empty=log_empty,
                active=keep[order],
                num_clusters=jnp.sum(-jnp.expm1(log_empty)),
                num_seen=state.num_seen,
                overflow=state.overflow,
            ),
            jnp.where(keep, new_resp, 0.0)[:, order],
        )

    # ------------------------------------------------------------------ running
    def run(self, rng_key, data, *model_args, progress_bar=True, **model_kwargs):
        """ADF then EP passes over ``data`` (an array ``(n, D)``; documents: dense counts or a
        ``scipy.sparse`` matrix ``(n, V)``), held in memory.

        :param rng_key: a JAX PRNG key for the order of each EP pass.
        :param bool progress_bar: a tqdm bar over the passes (clusters and the largest change).
        :return: :class:`NRMResult` with per-pass traces (see the class docstring).
        """
        from tqdm.auto import tqdm

        prng_key(rng_key)
        state = self.init(rng_key, *model_args, **model_kwargs)
        rows = self.check_batch(data, name="data")
        num = streaming.num_rows(rows)
        adf_pass, ep_pass, prune = self._passes
        while True:  # the ADF pass, again with twice the slots if a new cluster found none
            new, infos, resp = adf_pass(state, rows)
            if not self._full(new, state):
                break
            state = self.empty(2 * self.capacity(state))
        state = new
        traces = {key: [] for key in ("num_clusters", "num_instantiated", "log_predictive")}
        traces["max_change"] = []

        def record(state, log_pred, change):
            traces["num_clusters"].append(float(state.num_clusters))
            traces["num_instantiated"].append(int(np.sum(state.active)))
            traces["log_predictive"].append(float(log_pred))
            traces["max_change"].append(float(change))

        record(state, np.mean(np.asarray(infos.log_predictive)), np.inf)
        keys = random.split(rng_key, max(self.num_passes, 1))
        with tqdm(total=self.num_passes, unit="pass", disable=not progress_bar) as bar:
            for p in range(self.num_passes):
                order = random.permutation(keys[p], num)
                while True:
                    out = ep_pass(state, resp, rows, order)
                    if not self._full(out[0], state):
                        break
                    state, resp = self._grow_with(state, resp)
                state, resp = prune(out[0], out[1], rows)
                record(state, out[2], out[3])
                bar.update(1)
                bar.set_postfix(
                    clusters=f"{float(state.num_clusters):.1f}", change=f"{float(out[3]):.2g}"
                )
                if float(out[3]) < self.tol:
                    break
        bad = [
            jax.tree_util.keystr(path)
            for path, leaf in jax.tree_util.tree_leaves_with_path(state)
            if not np.isfinite(np.asarray(leaf)).all()
        ]
        if bad:
            raise streaming.NonFiniteStateError(
                f"EPNRM: the state field(s) {bad} went NaN or infinite; rescale the data or "
                "run in float64 (jax.config.update('jax_enable_x64', True) and dtype=float64)"
            )
        traces = {key: np.asarray(value) for key, value in traces.items()}
        return NRMResult(self, state, traces, np.arange(len(traces["num_clusters"])))

    def _full(self, new, old):
        """Whether a pass needed a slot it did not have: warn if the capacity is fixed."""
        if not bool(new.overflow):
            return False
        if self.max_clusters is None:
            return True
        warnings.warn(
            f"EPNRM: the capacity {self.capacity(old)} (max_clusters) is full; new clusters "
            "were not opened. Leave max_clusters=None to let the capacity grow.",
            RuntimeWarning,
            stacklevel=3,
        )
        return False

    def _grow_with(self, state, resp):
        capacity = 2 * self.capacity(state)
        grown = self.grow(state, capacity)
        return grown, jnp.pad(resp, [(0, 0), (0, capacity - resp.shape[1])])
