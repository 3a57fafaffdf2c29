"""The one streaming loop shared by every streaming engine.

An engine follows the BlackJAX shape: a state ``NamedTuple`` of arrays, ``init(rng_key, ...) ->
state`` and a pure, jittable ``update(state, obs) -> (state, info)`` for ONE observation, where
``info`` is a ``NamedTuple`` of scalars. This module does everything else, once for all engines:

* :func:`chunk_scanner` turns ``update`` into a jitted ``lax.scan`` over a fixed-size chunk of
  observations with a validity mask (the last, partial chunk is padded, so one compiled function
  serves the whole stream);
* :func:`run` feeds an array or any iterator of batches through it, with a tqdm progress bar
  (observations/s and the engine's progress figure), host-side work once per chunk (never per
  observation): validation of each batch before it touches the state, a check that the new
  state is finite, optional thinning of the traces, and geometric capacity growth outside
  ``jit`` when the state fills up (the chunk is re-run from its start with the larger capacity)
  or a loud warning when the user fixed the capacity;
* :func:`save` / :func:`load` write and read a state as ``.npz`` (no pickle) with a record of the
  engine that wrote it, so that a stream resumes bit-for-bit, and only in an engine it fits
  (defined, with :func:`read_checkpoint`, :func:`resume_arguments`, :func:`check_model_summary`
  and :class:`NotStorable`, in :mod:`numpyro_bnp.infer.core.checkpoint` and re-exported here);
* :class:`StreamingResult` holds the final state and the per-step traces; it exports to ArviZ
  (posterior draws as ``(chain, draw, ...)``, the traces in a ``stream`` group over ``time``),
  draws model-shaped samples for :class:`numpyro.infer.Predictive`, and pickles;
* :func:`learning_curve` streams data in segments and scores held-out rows after each, so a
  user sees whether more data helps;
* :func:`model_arguments` fills in a model's ``num_obs`` (the stream is unbounded, the model is
  traced for one row) and :func:`read_checkpoint` reads a checkpoint's record (the engine's
  options and the model arguments) without an engine, so that an engine can be rebuilt from it.

What the loop needs from an engine besides ``update`` is the :class:`StreamingEngine` protocol
(defined in :mod:`numpyro_bnp.infer.core.protocol`, re-exported here).
"""

import inspect
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_bnp import arviz_compat
from numpyro_bnp._checks import observed_array, positive_int, prng_key
from numpyro_bnp.infer.core.checkpoint import (
    NotStorable,
    check_model_summary,
    load,
    read_checkpoint,
    resume_arguments,
    save,
)
from numpyro_bnp.infer.core.protocol import StreamingEngine, check_engine

__all__ = [
    "BadBatchError",
    "LearningCurve",
    "NonFiniteStateError",
    "NotStorable",
    "StreamingEngine",
    "StreamingResult",
    "check_batch",
    "check_model_summary",
    "chunk_scanner",
    "learning_curve",
    "load",
    "model_arguments",
    "num_rows",
    "pad_rows",
    "read_checkpoint",
    "resume_arguments",
    "run",
    "save",
    "take_rows",
]


class BadBatchError(ValueError):
    """A batch failed validation (raised by :func:`check_batch` on a wrong shape or value)."""


class NonFiniteStateError(FloatingPointError):
    """The state went non-finite (NaN or infinite) while absorbing a chunk of observations.

    :ivar partial_state: the last good state, before the failing chunk.
    :ivar partial_traces: the traces up to that state.
    :ivar partial_time: the observation counts of ``partial_traces``.
    :ivar fields: the names of the fields that went non-finite.
    :vartype fields: list
    :ivar rows: ``(first, last)``, 0-based, of this run's rows in the failing chunk.
    :vartype rows: tuple
    """


def check_batch(batch, *, dim, dtype, name="batch"):
    """Validate a batch of observations on the host; return it as ``(n, dim)`` of ``dtype``.

    A single observation of shape ``(dim,)`` is accepted as one row. The values are checked
    after the cast to ``dtype`` (see :func:`numpyro_bnp._checks.observed_array`).

    :raises TypeError: when the values are not real numbers (bool, integer or floating).
    :raises BadBatchError: (a ``ValueError``) on a wrong shape, an empty batch or a value not
        finite in ``dtype``.
    """
    try:
        return observed_array(batch, name, dtype=dtype, dim=dim, row=True)
    except ValueError as err:
        raise BadBatchError(str(err)) from None


def chunk_scanner(update):
    """Jit ``update`` into ``scan_chunk(state, chunk, valid) -> (state, infos)``.

    ``chunk`` is ``(C, ...)`` observations and ``valid`` a ``(C,)`` bool mask: steps whose row is
    not valid leave the state unchanged (their infos, zeros, are discarded by :func:`run`); they
    skip the update (``lax.cond``), so padding costs nothing even when the state is large (e.g.
    the word counts of every cluster). The compiled function is cached by shape, so a new
    capacity or chunk size compiles once.
    """

    def skip(state, obs):
        shapes = jax.eval_shape(update, state, obs)[1]
        return state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step(state, inputs):
        obs, ok = inputs
        return lax.cond(ok, update, skip, state, obs)

    @jax.jit
    def scan_chunk(state, chunk, valid):
        return lax.scan(step, state, (chunk, valid))

    return scan_chunk


@jax.jit
def _finite_leaves(state):
    return jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(state)])


def nonfinite_fields(state):
    """Names of the fields of ``state`` that hold a NaN or an infinity (one host transfer)."""
    flags = np.asarray(_finite_leaves(state))
    names = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(state)]
    names = [name.lstrip(".") for name in names]
    return [name for name, ok in zip(names, flags, strict=True) if not ok]


def _batches(data):
    """Yield ``(name, batch)``: the array itself, or each batch of an iterator, unvalidated."""
    if hasattr(data, "shape") and hasattr(data, "dtype"):
        yield "data", data
        return
    try:
        iterator = iter(data)
    except TypeError:
        raise TypeError(
            f"data must be an array (n, D) or an iterable of batches, got {type(data).__name__}"
        ) from None
    for i, batch in enumerate(iterator):
        yield f"batch {i}", batch


def num_rows(rows):
    """Rows in a batch (an array or a ``NamedTuple`` of arrays with a common leading axis)."""
    return 0 if rows is None else len(jax.tree.leaves(rows)[0])


def take_rows(rows, start, stop):
    """Rows ``start:stop`` of a batch."""
    return jax.tree.map(lambda a: a[start:stop], rows)


def pad_rows(rows, size):
    """A batch padded with zero rows to ``size`` rows."""
    return jax.tree.map(lambda a: np.pad(a, [(0, size - len(a))] + [(0, 0)] * (a.ndim - 1)), rows)


def _concat_rows(first, second):
    """Rows of ``first`` then ``second``, each leaf padded with zeros along its trailing axes to
    the larger of the two (e.g. documents with more distinct words in a later batch)."""
    if not num_rows(first):
        return second

    def concat(a, b):
        width = np.maximum(a.shape[1:], b.shape[1:])
        a, b = (
            np.pad(v, [(0, 0)] + [(0, w - n) for w, n in zip(width, v.shape[1:], strict=True)])
            for v in (a, b)
        )
        return np.concatenate([a, b])

    return jax.tree.map(concat, first, second)


class _Traces:
    """Host-side traces of a stream, thinned to every ``every``-th observation count and the last.

    A step is kept when the number of observations absorbed after it is a multiple of
    ``every``; the last step seen is held aside and appended by :meth:`stack` if it was not kept.
    The kept rows of each chunk are merged into one block every ``merge`` chunks, so memory is
    O(T / every + chunk size) with a small constant (no Python objects per chunk).
    """

    merge = 64

    def __init__(self, every):
        self.every, self.blocks, self.recent, self.last = every, [], [], None

    def add(self, info, time):
        info = {key: np.asarray(value)[: len(time)] for key, value in info._asdict().items()}
        keep = time % self.every == 0
        self.last = ({key: value[-1:] for key, value in info.items()}, time[-1:], bool(keep[-1]))
        if keep.any():
            self.recent.append(({key: value[keep] for key, value in info.items()}, time[keep]))
        if len(self.recent) >= self.merge:
            self.blocks.append(self._concat(self.recent))
            self.recent = []

    @staticmethod
    def _concat(pieces):
        keys = pieces[0][0]
        traces = {key: np.concatenate([info[key] for info, _ in pieces]) for key in keys}
        return traces, np.concatenate([time for _, time in pieces])

    def stack(self):
        """``(traces, time)`` of the kept steps and the last one (empty before any step)."""
        if self.last is None:
            return {}, np.zeros(0, np.int64)
        pieces = self.blocks + self.recent
        last, last_time, was_kept = self.last
        if not was_kept:
            pieces = [*pieces, (last, last_time)]
        return self._concat(pieces)


def run(engine, state, data, *, chunk_size=256, progress_bar=True, growable=True, trace_every=1):
    """Feed ``data`` through ``engine.update`` in jitted chunks of ``chunk_size`` observations.

    :param engine: a streaming engine (:class:`StreamingEngine`).
    :param state: the starting state (from ``engine.init`` or :func:`load`); never modified.
    :param data: an array ``(n, D)`` or an iterable of such batches (any sizes; they are
        re-chunked). Each batch is validated before any of its rows reaches the state.
    :param int chunk_size: observations per compiled ``lax.scan`` (host work between chunks).
    :param bool progress_bar: show a tqdm bar with observations/s and the engine's
        ``progress_label``.
    :param bool growable: grow the capacity (x2, re-running the chunk) when the engine reports
        truncation; if False, warn that the run is truncated instead.
    :param int trace_every: keep the infos of the steps after which the number of observations
        absorbed (``engine.num_seen``) is a multiple of ``trace_every``, and of the last step;
        the default 1 keeps every step. The thinning is done on the host chunk by chunk, so the
        traces take O(T / trace_every) memory for T observations.
    :return: ``(state, traces, time)``: ``traces`` a dict of ``(T',)`` NumPy arrays, one per
        info field, and ``time`` the ``(T',)`` observation counts after the kept steps.
    :raises BadBatchError, TypeError: (``BadBatchError`` is a ``ValueError``) when a batch fails
        the engine's ``check_batch``. The rows before that batch have all been absorbed: the
        exception carries ``partial_state``, ``partial_traces`` and ``partial_time``.
    :raises NonFiniteStateError: when a chunk leaves a field of the state NaN or infinite;
        ``partial_state`` is the state before that chunk.
    :raises Exception: an error of the data source (the iterator raising) propagates as itself
        once the rows it yielded before have been absorbed; it carries ``partial_state``,
        ``partial_traces`` and ``partial_time`` too. An error inside the engine's update
        propagates as itself.
    """
    from tqdm.auto import tqdm

    check_engine(engine)
    chunk_size = positive_int(chunk_size, "chunk_size")
    trace_every = positive_int(trace_every, "trace_every")
    total = data.shape[0] if hasattr(data, "shape") and len(data.shape) == 2 else None
    traces = _Traces(trace_every)
    warned = False
    absorbed = 0  # rows of this run's data absorbed so far
    seen = engine.num_seen(state)  # observations absorbed by the state passed in
    pending = None  # rows validated but not yet absorbed (fewer than chunk_size)

    def process(state, rows):
        nonlocal warned, absorbed
        num = num_rows(rows)
        chunk = pad_rows(rows, chunk_size)
        valid = np.arange(chunk_size) < num
        start, before = seen + absorbed, state
        while True:
            new_state, info = engine.scan_chunk(state, chunk, valid)
            bad = nonfinite_fields(new_state)
            if bad:
                traces_so_far, time_so_far = traces.stack()
                err = NonFiniteStateError(
                    f"{type(engine).__name__}: the state field(s) {bad} went NaN or infinite "
                    f"while absorbing observations {start + 1}-{start + num} of the "
                    f"stream (rows {absorbed}-{absorbed + num - 1} of this run's data). "
                    "The stream was stopped; err.partial_state holds the state before those "
                    "observations. Rescale the data (or the model's constants), run in "
                    "float64 (jax.config.update('jax_enable_x64', True) and dtype=float64), "
                    "or report the problem with the offending rows if they are reasonable."
                )
                err.partial_state, err.partial_traces = before, traces_so_far
                err.partial_time, err.fields = time_so_far, bad
                err.rows = (absorbed, absorbed + num - 1)
                raise err
            if not engine.truncated(new_state):
                break
            if not growable:
                if not warned:
                    option = engine.capacity_option
                    warnings.warn(
                        f"{type(engine).__name__}: the capacity {engine.capacity(state)} "
                        f"({option}) is full; the run is truncated (what lies beyond the "
                        f"capacity is dropped). Leave {option}=None to let the capacity grow.",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                    warned = True
                break
            state = engine.grow(state, 2 * engine.capacity(state))
        traces.add(info, start + 1 + np.arange(num))
        absorbed += num
        return new_state

    def stop(err, state, pending):
        """Absorb the pending rows, attach the stream so far to ``err``."""
        if num_rows(pending):
            state = process(state, pending)
        err.partial_state = state
        err.partial_traces, err.partial_time = traces.stack()

    with tqdm(total=total, unit="obs", disable=not progress_bar, dynamic_ncols=True) as bar:
        source = _batches(data)
        while True:
            try:
                name, raw = next(source)
            except StopIteration:
                break
            except Exception as err:  # the data source failed: keep what it gave before
                stop(err, state, pending)
                raise
            try:
                batch = engine.check_batch(raw, name=name)
            except (TypeError, ValueError) as err:  # a bad batch: none of its rows is absorbed
                stop(err, state, pending)
                raise
            pending = _concat_rows(pending, batch)
            while num_rows(pending) >= chunk_size:
                state = process(state, take_rows(pending, 0, chunk_size))
                pending = take_rows(pending, chunk_size, None)
                bar.update(chunk_size)
                shown = traces.last[0][engine.progress_key][-1]
                bar.set_postfix({engine.progress_label: f"{shown:.1f}"})
        if num_rows(pending):
            bar.update(num_rows(pending))
            state = process(state, pending)
    return (state, *traces.stack())


def model_arguments(model, model_args, model_kwargs, *, num_obs=1):
    """``model_kwargs`` with ``num_obs`` filled in when ``model`` needs it and it is not given.

    A streaming engine traces the model for one row (the stream itself is unbounded), so a
    model parameter named ``num_obs`` without a default that the caller passed neither by
    keyword nor by position is set to ``num_obs`` (1). An explicit value is kept.
    """
    model_kwargs = dict(model_kwargs)
    try:
        params = inspect.signature(model).parameters
    except (TypeError, ValueError):  # a builtin or C callable: nothing to inspect
        return model_kwargs
    param = params.get("num_obs")
    if param is None or param.default is not inspect.Parameter.empty or "num_obs" in model_kwargs:
        return model_kwargs
    if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
        if list(params).index("num_obs") < len(model_args):
            return model_kwargs
    elif param.kind is not param.KEYWORD_ONLY:
        return model_kwargs
    model_kwargs["num_obs"] = num_obs
    return model_kwargs


class LearningCurve(NamedTuple):
    """A held-out score over a stream (:func:`learning_curve`).

    :ivar time: ``(T,)`` observations absorbed at each evaluation.
    :ivar mean: ``(T,)`` mean score per held-out row.
    :ivar se: ``(T,)`` its standard error over the rows (``std / sqrt(M)``).
    :ivar result: the engine's result at the end of the stream, with the traces of the whole
        stream.
    """

    time: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    result: object


def learning_curve(engine, rng_key, data, score, *model_args, eval_at, **options):
    """Stream ``data`` through ``engine`` and score held-out rows after each of ``eval_at`` rows.

    The stream is run in segments that end at ``eval_at`` (each continues the previous state
    with ``init_state``, so the final state equals one run over ``data``), and ``score(result)``
    is called after each; it returns the per-row score of the user's held-out rows, e.g.
    ``lambda r: r.log_predictive(test, rng_key=key)``. A curve that does not rise with the
    number of observations means the engine stopped learning.

    :param engine: a streaming engine of this library (``RIBPFilter``, ``ADFNRM``, ...).
    :param data: ``(n, D)`` rows.
    :param score: ``result -> (M,)`` scores.
    :param eval_at: increasing observation counts in ``1..n``.
    :param options: the engine's ``run`` options (``chunk_size``, ``progress_bar``, ...) and
        model keyword arguments.
    :return: :class:`LearningCurve`.
    """
    num = data.shape[0] if hasattr(data, "shape") and len(data.shape) == 2 else None
    if num is None:
        raise TypeError("data must be an array (n, D) for a learning curve")
    ends = np.asarray(eval_at)
    if (
        ends.ndim != 1
        or ends.size == 0
        or ends.dtype.kind not in "iu"
        or np.any(np.diff(ends) <= 0)
        or ends[0] < 1
        or ends[-1] > num
    ):
        raise ValueError(
            f"eval_at must be increasing integers in 1..{num} (the rows of data), got {eval_at!r}"
        )
    result, means, ses, parts = None, [], [], []
    for start, stop in zip(np.concatenate([[0], ends[:-1]]), ends, strict=True):
        state = None if result is None else result.state
        result = engine.run(rng_key, data[start:stop], *model_args, init_state=state, **options)
        parts.append(result)
        values = np.asarray(score(result), np.float64)
        means.append(values.mean())
        ses.append(values.std(ddof=1) / np.sqrt(values.size) if values.size > 1 else np.nan)
    traces = {k: np.concatenate([p.traces[k] for p in parts]) for k in result.traces}
    whole = type(result)(engine, result.state, traces, np.concatenate([p.time for p in parts]))
    return LearningCurve(ends, np.array(means), np.array(ses), whole)


class StreamingResult:
    """The end of a stream: the final ``state`` and the ``traces`` (dict of ``(T,)`` arrays).

    ``time[t]`` is the number of observations absorbed after the step of ``traces[...][t]`` (it
    continues the count of a resumed state); with ``trace_every=k`` the steps are those at a
    multiple of ``k`` and the last one.

    A result pickles when its engine does (the engines of this library drop their compiled
    functions and re-read the model when unpickled; the model function must then be importable
    by name, as for any pickled function).
    """

    def __init__(self, engine, state, traces, time):
        self.engine, self.state, self.traces = engine, state, traces
        self.time = np.asarray(time)

    def save(self, path):
        """Save :attr:`state` to ``path`` (see :func:`save`); resume with :func:`load`."""
        save(path, self.state, self.engine)

    def to_arviz(self, rng_key, num_draws=500, *, num_chains=4, obs=None):
        """ArviZ data: ``posterior`` draws of the variational posterior, ``stream`` traces.

        :param rng_key: a JAX PRNG key for the posterior draws (required: the draws are random).
        :param int num_draws: independent draws per chain of the engine's latent sites.
        :param int num_chains: the independent draws are laid out as ``(chain, draw)`` with this
            many chains (ArviZ's convergence diagnostics need at least 2; for independent draws
            ``r_hat`` is then about 1 and ``ess`` about ``num_chains * num_draws``).
        :param obs: optional rows ``(M, D)``; the posterior then also holds the engine's
            rows-dependent sites for them (e.g. the IBP matrix ``Z`` of those rows) and
            ``observed_data`` holds ``obs``. The engine keeps no per-row latent values of the
            stream (its memory is bounded), so these are drawn for the rows passed here.

        ``posterior`` holds ``(chain, draw, ...)`` arrays (what ``az.summary`` and
        ``az.plot_trace`` read); ``stream`` holds the per-step traces over the coordinate
        ``time`` (the observation counts of :attr:`time`, thinned by the run's ``trace_every``),
        with no ``chain`` or ``draw`` dimension. Returns an ``InferenceData`` (ArviZ 0.23) or a
        ``DataTree`` (ArviZ 1.x).
        """
        prng_key(rng_key)
        num_draws = positive_int(num_draws, "num_draws")
        num_chains = positive_int(num_chains, "num_chains")
        if obs is not None:
            obs = self.engine.check_batch(obs, name="obs")
        draws, dims, coords = self.engine.posterior_draws(
            rng_key, self.state, num_chains * num_draws, obs=obs
        )
        groups = {
            "posterior": {
                k: np.asarray(v).reshape(num_chains, num_draws, *np.shape(v)[1:])
                for k, v in draws.items()
            }
        }
        dims = dict(dims)
        if obs is not None:
            groups["observed_data"] = {"obs": np.asarray(obs)}
            dims["obs"] = ["row", "dim"]
        data = arviz_compat.from_dict(groups, dims=dims, coords=dict(coords))
        stream = {
            k: (["time", *(f"{k}_dim_{i}" for i in range(np.ndim(v) - 1))], np.asarray(v))
            for k, v in self.traces.items()
        }
        return arviz_compat.add_group(data, "stream", stream, coords={"time": self.time})

    def posterior_samples(self, rng_key, num_samples, *, num_obs=None, obs=None):
        """Samples of the model's latent sites for :class:`numpyro.infer.Predictive`.

        ``Predictive(model, posterior_samples=result.posterior_samples(key, S, num_obs=N))``
        then draws the model's observed site for ``N`` new rows from the engine's variational
        posterior. The keys are the model's own site names; what is drawn, and how rows are
        treated, is the engine's (e.g. :meth:`RIBPFilter.posterior_samples`).

        :param rng_key: a JAX PRNG key.
        :param int num_samples: number of samples ``S`` (the leading axis of every array).
        :param int num_obs: number of rows ``N`` to draw rows-dependent sites for, ...
        :param obs: ... or rows ``(N, D)`` to draw them given (then ``num_obs`` is ``len(obs)``).
        """
        prng_key(rng_key)
        num_samples = positive_int(num_samples, "num_samples")
        if obs is not None:
            obs = self.engine.check_batch(obs, name="obs")
            if num_obs is not None and num_obs != len(obs):
                raise ValueError(f"num_obs={num_obs!r} but obs has {len(obs)} rows")
            num_obs = len(obs)
        elif num_obs is None:
            raise TypeError("posterior_samples needs num_obs (rows to draw) or obs (given rows)")
        num_obs = positive_int(num_obs, "num_obs")
        return self.engine.posterior_samples(
            rng_key, self.state, num_samples, num_obs=num_obs, obs=obs
        )
