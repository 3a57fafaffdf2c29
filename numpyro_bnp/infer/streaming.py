"""The one streaming loop shared by every streaming engine.

An engine follows the BlackJAX shape: a state ``NamedTuple`` of arrays, ``init(rng_key, ...) ->
state`` and a pure, jittable ``update(state, obs) -> (state, info)`` for ONE observation, where
``info`` is a ``NamedTuple`` of scalars. This module does everything else, once for all engines:

* :func:`chunk_scanner` turns ``update`` into a jitted ``lax.scan`` over a fixed-size chunk of
  observations with a validity mask (the last, partial chunk is padded, so one compiled function
  serves the whole stream);
* :func:`run` feeds an array or any iterator of batches through it, with a tqdm progress bar
  (observations/s and the engine's number of features or clusters), host-side work once per chunk
  (never per observation), geometric capacity growth outside ``jit`` when the state fills up (the
  chunk is re-run from its start with the larger capacity) or a loud warning when the user fixed
  the capacity, and validation of each batch before it touches the state;
* :func:`save` / :func:`load` write and read a state as ``.npz`` (no pickle), so that a stream
  resumes bit-for-bit;
* :class:`StreamingResult` holds the final state and the per-step traces, and exports to ArviZ
  with a ``time`` dimension.

Besides ``update``, :func:`run` asks the engine for a small host-side protocol:
``check_batch(batch) -> ndarray (n, D)`` (raises on bad input), ``capacity(state) -> int``,
``grow(state, capacity) -> state``, ``truncated(state) -> bool`` and ``progress_key`` (the info
field shown in the progress bar). :meth:`StreamingResult.to_arviz` asks for
``posterior_draws(rng_key, state, num_draws) -> (draws, dims)``.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_bnp import arviz_compat
from numpyro_bnp._checks import observed_array

__all__ = ["StreamingResult", "check_batch", "chunk_scanner", "load", "run", "save"]


def check_batch(batch, *, dim, dtype, name="batch"):
    """Validate a batch of observations on the host; return it as ``(n, dim)`` of ``dtype``.

    A single observation of shape ``(dim,)`` is accepted as one row. The values are checked
    after the cast to ``dtype`` (see :func:`numpyro_bnp._checks.observed_array`).

    :raises TypeError: when the values are not real numbers (bool, integer or floating).
    :raises ValueError: on a wrong shape, an empty batch or a value not finite in ``dtype``.
    """
    return observed_array(batch, name, dtype=dtype, dim=dim, row=True)


def chunk_scanner(update):
    """Jit ``update`` into ``scan_chunk(state, chunk, valid) -> (state, infos)``.

    ``chunk`` is ``(C, ...)`` observations and ``valid`` a ``(C,)`` bool mask: steps whose row is
    not valid leave the state unchanged (their infos are discarded by :func:`run`). The compiled
    function is cached by shape, so a new capacity or chunk size compiles once.
    """

    def step(state, inputs):
        obs, ok = inputs
        new_state, info = update(state, obs)
        new_state = jax.tree.map(lambda new, old: jnp.where(ok, new, old), new_state, state)
        return new_state, info

    @jax.jit
    def scan_chunk(state, chunk, valid):
        return lax.scan(step, state, (chunk, valid))

    return scan_chunk


def _batches(data, check):
    """Yield validated ``(n, D)`` batches from an array or from an iterator of batches."""
    if hasattr(data, "shape") and hasattr(data, "dtype"):
        yield check(data, "data")
        return
    try:
        iterator = iter(data)
    except TypeError:
        raise TypeError(
            f"data must be an array (n, D) or an iterable of batches, got {type(data).__name__}"
        ) from None
    for i, batch in enumerate(iterator):
        yield check(batch, f"batch {i}")


def run(engine, state, data, *, chunk_size=256, progress_bar=True, growable=True):
    """Feed ``data`` through ``engine.update`` in jitted chunks of ``chunk_size`` observations.

    :param engine: a streaming engine (see the module docstring).
    :param state: the starting state (from ``engine.init`` or :func:`load`).
    :param data: an array ``(n, D)`` or an iterable of such batches (any sizes; they are
        re-chunked). Each batch is validated before any of its rows reaches the state.
    :param int chunk_size: observations per compiled ``lax.scan`` (host work between chunks).
    :param bool progress_bar: show a tqdm bar with observations/s and the number of features.
    :param bool growable: grow the capacity (x2, re-running the chunk) when the engine reports
        truncation; if False, warn that the run is truncated instead.
    :return: ``(state, traces)``, ``traces`` a dict of ``(T,)`` NumPy arrays, one per info field.
    :raises ValueError, TypeError: on a bad batch. All earlier rows have been processed; the
        exception carries ``partial_state`` and ``partial_traces`` (the stream up to the last
        good batch); the state passed in is never modified.
    """
    from tqdm.auto import tqdm

    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    total = data.shape[0] if hasattr(data, "shape") and len(data.shape) == 2 else None
    infos, warned = [], False
    pending = np.empty((0, engine.dim), engine.dtype)

    def process(state, rows):
        nonlocal warned
        chunk = np.zeros((chunk_size, engine.dim), engine.dtype)
        chunk[: len(rows)] = rows
        valid = np.arange(chunk_size) < len(rows)
        while True:
            new_state, info = engine.scan_chunk(state, chunk, valid)
            if not engine.truncated(new_state):
                break
            if not growable:
                if not warned:
                    warnings.warn(
                        f"{type(engine).__name__}: the feature capacity "
                        f"{engine.capacity(state)} is full; the run is truncated (features "
                        "beyond the capacity are dropped). Leave max_features=None to let the "
                        "capacity grow.",
                        RuntimeWarning,
                        stacklevel=4,
                    )
                    warned = True
                break
            state = engine.grow(state, 2 * engine.capacity(state))
        infos.append(jax.tree.map(lambda x: np.asarray(x)[: len(rows)], info._asdict()))
        return new_state

    with tqdm(total=total, unit="obs", disable=not progress_bar, dynamic_ncols=True) as bar:
        try:
            for batch in _batches(data, lambda b, name: engine.check_batch(b, name=name)):
                pending = np.concatenate([pending, batch])
                while len(pending) >= chunk_size:
                    state, pending = process(state, pending[:chunk_size]), pending[chunk_size:]
                    bar.update(chunk_size)
                    bar.set_postfix({"features": f"{infos[-1][engine.progress_key][-1]:.1f}"})
        except (TypeError, ValueError) as err:
            if len(pending):
                state = process(state, pending)
            err.partial_state, err.partial_traces = state, _stack(infos)
            raise
        if len(pending):
            state = process(state, pending)
            bar.update(len(pending))
    return state, _stack(infos)


def _stack(infos):
    if not infos:
        return {}
    return {key: np.concatenate([info[key] for info in infos]) for key in infos[0]}


def save(path, state):
    """Write a state ``NamedTuple`` to ``path`` (``.npz``, arrays only, no pickle)."""
    arrays = {name: np.asarray(value) for name, value in state._asdict().items()}
    np.savez(path, __state_type__=np.array(type(state).__name__), **arrays)


def load(path, state_type):
    """Read a state written by :func:`save`; ``state_type`` is the expected ``NamedTuple`` class.

    Arrays come back with their saved dtypes, so a resumed stream continues bit-for-bit.
    """
    with np.load(path, allow_pickle=False) as saved:
        found = str(saved["__state_type__"])
        if found != state_type.__name__:
            raise ValueError(f"{path} holds a {found}, expected a {state_type.__name__}")
        missing = [f for f in state_type._fields if f not in saved.files]
        if missing:
            raise ValueError(f"{path} lacks the state fields {missing}")
        return state_type(**{f: jnp.asarray(saved[f]) for f in state_type._fields})


class StreamingResult:
    """The end of a stream: the final ``state`` and per-step ``traces`` (dict of ``(T,)`` arrays).

    ``time`` runs over the observations of this run: ``time[t]`` is the number of observations
    absorbed after step ``t`` (it continues the count of a resumed state).
    """

    def __init__(self, engine, state, traces, time):
        self.engine, self.state, self.traces = engine, state, traces
        self.time = np.asarray(time)

    def save(self, path):
        """Save :attr:`state` (``.npz``); resume with ``engine.run(..., init_state=load(...))``."""
        save(path, self.state)

    def to_arviz(self, rng_key=None, num_draws=500):
        """ArviZ data: ``posterior`` draws from the variational posterior, ``sample_stats`` traces.

        ``posterior`` holds ``num_draws`` independent draws (``chain = 1``) of the engine's latent
        sites; ``sample_stats`` holds every trace with a ``time`` dimension (``chain = draw = 1``).
        Returns an ``InferenceData`` (ArviZ 0.23) or a ``DataTree`` (ArviZ 1.x).
        """
        if rng_key is None:
            rng_key = jax.random.PRNGKey(0)
        draws, dims = self.engine.posterior_draws(rng_key, self.state, num_draws)
        groups = {
            "posterior": {k: np.asarray(v)[None] for k, v in draws.items()},
            "sample_stats": {k: np.asarray(v)[None, None] for k, v in self.traces.items()},
        }
        dims = dict(dims)
        dims.update({k: ["time"] for k in self.traces})
        coords = {"time": self.time}
        return arviz_compat.from_dict(groups, dims=dims, coords=coords)
