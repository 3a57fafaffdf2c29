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
  engine that wrote it, so that a stream resumes bit-for-bit, and only in an engine it fits;
* :class:`StreamingResult` holds the final state and the per-step traces; it exports to ArviZ
  (posterior draws as ``(chain, draw, ...)``, the traces in a ``stream`` group over ``time``),
  draws model-shaped samples for :class:`numpyro.infer.Predictive`, and pickles;
* :func:`model_arguments` fills in a model's ``num_obs`` (the stream is unbounded, the model is
  traced for one row) and :func:`read_checkpoint` reads a checkpoint's record (the engine's
  options and the model arguments) without an engine, so that an engine can be rebuilt from it.

What the loop needs from an engine besides ``update`` is the :class:`StreamingEngine` protocol.
"""

import inspect
import json
import os
import warnings
import zipfile
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_bnp import arviz_compat
from numpyro_bnp._checks import observed_array, positive_int, prng_key

__all__ = [
    "BadBatchError",
    "NonFiniteStateError",
    "NotStorable",
    "StreamingEngine",
    "StreamingResult",
    "check_batch",
    "check_model_summary",
    "chunk_scanner",
    "load",
    "model_arguments",
    "read_checkpoint",
    "resume_arguments",
    "run",
    "save",
]

CHECKPOINT_FORMAT = "numpyro_bnp streaming checkpoint 1"


class StreamingEngine(Protocol):
    """What :func:`run`, :func:`save`, :func:`load` and :class:`StreamingResult` ask of an engine.

    The attributes are read after the engine has been set up (``init``):

    :ivar int dim: size ``D`` of one observation.
    :ivar dtype: floating dtype of the state and of the observations.
    :ivar str kind: the model variant a state belongs to (recorded in checkpoints; a state of one
        kind does not resume in an engine of another).
    :ivar state_type: the state's ``NamedTuple`` class.
    :ivar str progress_key: the info field shown in the progress bar ...
    :ivar str progress_label: ... under this label (e.g. ``"features"``, ``"clusters"``).
    :ivar str capacity_option: the engine's option that fixes the capacity (named in the
        truncation warning), e.g. ``"max_features"``.

    Optional, for checkpoints that rebuild the engine (:func:`save`, :func:`read_checkpoint`):

    :ivar dict options: the engine's options (JSON-storable values).
    :ivar tuple model_args: positional model arguments the engine was set up with.
    :ivar dict model_kwargs: keyword model arguments the engine was set up with.
    :ivar tuple model_summary: strings that describe the traced model (one per site).
    """

    dim: int
    dtype: Any
    kind: str
    state_type: type
    progress_key: str
    progress_label: str
    capacity_option: str

    def check_batch(self, batch, name: str = "batch") -> np.ndarray:
        """Validate a batch on the host; return it as ``(n, dim)`` of ``dtype`` (or raise)."""

    def check_state(self, state, name: str = "state") -> None:
        """Raise ``TypeError``/``ValueError`` naming the field when ``state`` cannot resume here."""

    def scan_chunk(self, state, chunk, valid):
        """``(state, infos)`` after the valid rows of ``chunk`` (see :func:`chunk_scanner`)."""

    def capacity(self, state) -> int:
        """The state's capacity (slots, clusters)."""

    def grow(self, state, capacity: int):
        """``state`` with its capacity raised to ``capacity`` (outside ``jit``)."""

    def truncated(self, state) -> bool:
        """Whether the state's capacity is too small (the chunk is re-run after :meth:`grow`)."""

    def num_seen(self, state) -> int:
        """Observations absorbed by ``state``."""

    def posterior_draws(self, rng_key, state, num_draws: int, obs=None):
        """``(draws, dims, coords)`` for :meth:`StreamingResult.to_arviz`: ``num_draws``
        independent draws of each latent site (leading axis), with rows-dependent sites (e.g.
        the IBP matrix) for the rows ``obs`` when given."""

    def posterior_samples(self, rng_key, state, num_samples: int, num_obs=None, obs=None):
        """Samples keyed by the model's site names for :class:`numpyro.infer.Predictive`."""


_ENGINE_MEMBERS = (
    "dim",
    "dtype",
    "kind",
    "state_type",
    "progress_key",
    "progress_label",
    "capacity_option",
    "check_batch",
    "check_state",
    "scan_chunk",
    "capacity",
    "grow",
    "truncated",
    "num_seen",
)


def _check_engine(engine):
    missing = [m for m in _ENGINE_MEMBERS if not hasattr(engine, m)]
    if missing:
        raise TypeError(
            f"engine must follow the StreamingEngine protocol (set up by its init); "
            f"{type(engine).__name__} lacks {missing}"
        )


class BadBatchError(ValueError):
    """A batch failed validation (raised by :func:`check_batch` on a wrong shape or value)."""


class NonFiniteStateError(FloatingPointError):
    """The state went non-finite (NaN or infinite) while absorbing a chunk of observations.

    :ivar partial_state: the last good state, before the failing chunk.
    :ivar partial_traces: the traces up to that state.
    :ivar partial_time: the observation counts of ``partial_traces``.
    :ivar list fields: the names of the fields that went non-finite.
    :ivar tuple rows: ``(first, last)``, 0-based, of this run's rows in the failing chunk.
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


@jax.jit
def _finite_leaves(state):
    return jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(state)])


def _nonfinite_fields(state):
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

    _check_engine(engine)
    chunk_size = positive_int(chunk_size, "chunk_size")
    trace_every = positive_int(trace_every, "trace_every")
    total = data.shape[0] if hasattr(data, "shape") and len(data.shape) == 2 else None
    traces = _Traces(trace_every)
    warned = False
    absorbed = 0  # rows of this run's data absorbed so far
    seen = engine.num_seen(state)  # observations absorbed by the state passed in
    pending = np.empty((0, engine.dim), engine.dtype)

    def process(state, rows):
        nonlocal warned, absorbed
        chunk = np.zeros((chunk_size, engine.dim), engine.dtype)
        chunk[: len(rows)] = rows
        valid = np.arange(chunk_size) < len(rows)
        start, before = seen + absorbed, state
        while True:
            new_state, info = engine.scan_chunk(state, chunk, valid)
            bad = _nonfinite_fields(new_state)
            if bad:
                traces_so_far, time_so_far = traces.stack()
                err = NonFiniteStateError(
                    f"{type(engine).__name__}: the state field(s) {bad} went NaN or infinite "
                    f"while absorbing observations {start + 1}-{start + len(rows)} of the "
                    f"stream (rows {absorbed}-{absorbed + len(rows) - 1} of this run's data). "
                    "The stream was stopped; err.partial_state holds the state before those "
                    "observations. Rescale the data (or the model's constants), run in "
                    "float64 (jax.config.update('jax_enable_x64', True) and dtype=float64), "
                    "or report the problem with the offending rows if they are reasonable."
                )
                err.partial_state, err.partial_traces = before, traces_so_far
                err.partial_time, err.fields = time_so_far, bad
                err.rows = (absorbed, absorbed + len(rows) - 1)
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
        traces.add(info, start + 1 + np.arange(len(rows)))
        absorbed += len(rows)
        return new_state

    def stop(err, state, pending):
        """Absorb the pending rows, attach the stream so far to ``err``."""
        if len(pending):
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
            pending = np.concatenate([pending, batch])
            while len(pending) >= chunk_size:
                state, pending = process(state, pending[:chunk_size]), pending[chunk_size:]
                bar.update(chunk_size)
                shown = traces.last[0][engine.progress_key][-1]
                bar.set_postfix({engine.progress_label: f"{shown:.1f}"})
        if len(pending):
            state = process(state, pending)
            bar.update(len(pending))
    return (state, *traces.stack())


def _library_version():
    from numpyro_bnp import __version__

    return __version__


class NotStorable:
    """Stands, in a record read by :func:`read_checkpoint`, for a model argument that
    :func:`save` could not store (a function, a distribution, ...): pass it again."""

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return f"NotStorable({self.what!r})"


def _encode(value, arrays, where):
    """``value`` as JSON-ready data; arrays go to ``arrays`` (npz) under a reference."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float) and not isinstance(value, np.generic):
        return value
    if isinstance(value, np.ndarray | np.generic | jax.Array):
        arr = np.asarray(value)
        if arr.dtype.kind in "biufc":
            name = f"__arg{len(arrays)}__"
            arrays[name] = arr
            return {"__array__": name}
    elif isinstance(value, list | tuple):
        items = [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v, arrays, f"{where}[{k!r}]") for k, v in value.items()}}
    return {"__not_storable__": f"{where}: {type(value).__name__}"}


def _decode(data, arrays):
    if isinstance(data, list):
        return [_decode(v, arrays) for v in data]
    if isinstance(data, dict):
        if "__array__" in data:
            return arrays[data["__array__"]]
        if "__tuple__" in data:
            return tuple(_decode(v, arrays) for v in data["__tuple__"])
        if "__dict__" in data:
            return {k: _decode(v, arrays) for k, v in data["__dict__"].items()}
        if "__not_storable__" in data:
            return NotStorable(data["__not_storable__"])
    return data


def save(path, state, engine):
    """Write ``state`` to exactly ``path`` as ``.npz`` (arrays and strings only, no pickle).

    Besides the state's fields the file records the format, the state's type, the engine's class
    name, its ``kind``, the state's capacity, the engine's dtype and the library version, which
    :func:`load` checks against the engine that resumes the stream; and, when the engine has them
    (see :class:`StreamingEngine`), its ``options``, the ``model_args`` / ``model_kwargs`` it
    was set up with and its ``model_summary``, from which :func:`read_checkpoint` lets the
    engine be rebuilt. Model arguments are stored as JSON (``None``, booleans, numbers,
    strings, lists, tuples, dicts with string keys) and numeric arrays as ``.npz`` entries; any
    other value (a function, a distribution, ...) is recorded as :class:`NotStorable` under its
    name and type, and must be passed again when the engine is rebuilt. The file is written
    under a temporary name and then renamed, so an interrupted save never leaves a truncated
    checkpoint.

    :raises TypeError, ValueError: when ``state`` fails ``engine.check_state``, or when the
        engine's options are not JSON-storable.
    """
    _check_engine(engine)
    engine.check_state(state, name="state")
    path = os.fspath(path)
    arrays = {name: np.asarray(value) for name, value in state._asdict().items()}
    meta = {
        "__format__": CHECKPOINT_FORMAT,
        "__state_type__": type(state).__name__,
        "__engine__": type(engine).__name__,
        "__kind__": str(engine.kind),
        "__capacity__": int(engine.capacity(state)),
        "__dtype__": np.dtype(engine.dtype).name,
        "__version__": _library_version(),
    }
    if getattr(engine, "options", None) is not None:
        try:
            meta["__options__"] = json.dumps(engine.options, sort_keys=True)
        except TypeError as err:
            raise TypeError(
                f"{type(engine).__name__}.options must be JSON-storable: {err}"
            ) from None
    if getattr(engine, "model_kwargs", None) is not None:
        args_arrays = {}
        model = {
            "args": _encode(tuple(engine.model_args), args_arrays, "model_args"),
            "kwargs": {
                k: _encode(v, args_arrays, f"model_kwargs[{k!r}]")
                for k, v in dict(engine.model_kwargs).items()
            },
        }
        meta["__model__"] = json.dumps(model)
        meta["__model_summary__"] = json.dumps(list(getattr(engine, "model_summary", ())))
        arrays.update(args_arrays)
    tmp = path + ".tmp"
    with open(tmp, "wb") as file:
        np.savez(file, **{k: np.asarray(v) for k, v in meta.items()}, **arrays)
    os.replace(tmp, path)


def _not_a_checkpoint(path, why):
    return ValueError(f"{path} is not a numpyro_bnp checkpoint ({why})")


def _read(path):
    """The contents of a checkpoint file as a dict of arrays, its format checked."""
    path = os.fspath(path)
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise _not_a_checkpoint(path, "the file is empty")
    try:
        saved = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        raise _not_a_checkpoint(path, f"unreadable: {err}") from None
    if not isinstance(saved, np.lib.npyio.NpzFile):
        raise _not_a_checkpoint(path, "a single array, not an .npz archive")
    try:
        with saved:
            contents = {name: saved[name] for name in saved.files}
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, ValueError) as err:
        raise _not_a_checkpoint(path, f"unreadable: {err}") from None
    keys = ("format", "state_type", "engine", "kind", "capacity", "dtype", "version")
    if any(f"__{key}__" not in contents for key in keys):
        raise _not_a_checkpoint(path, "no checkpoint record")
    if str(contents["__format__"]) != CHECKPOINT_FORMAT:
        raise _not_a_checkpoint(path, f"unknown format {str(contents['__format__'])!r}")
    return contents


def read_checkpoint(path):
    """The record of a checkpoint written by :func:`save`, without an engine.

    :return: a dict with ``engine``, ``kind``, ``state_type``, ``dtype``, ``capacity`` and
        ``version`` (strings and an int), and, where the engine recorded them, ``options``
        (a dict), ``model_args`` (a tuple), ``model_kwargs`` (a dict; a value that could not be
        stored is :class:`NotStorable`) and ``model_summary`` (a tuple of strings); ``None``
        for those an engine did not record.
    :raises ValueError: when ``path`` is not a numpyro_bnp checkpoint.
    """
    contents = _read(path)
    record = {key: str(contents[f"__{key}__"]) for key in ("engine", "kind", "state_type")}
    record.update(
        dtype=str(contents["__dtype__"]),
        capacity=int(contents["__capacity__"]),
        version=str(contents["__version__"]),
        options=None,
        model_args=None,
        model_kwargs=None,
        model_summary=None,
    )
    if "__options__" in contents:
        record["options"] = json.loads(str(contents["__options__"]))
    if "__model__" in contents:
        model = json.loads(str(contents["__model__"]))
        record["model_args"] = _decode(model["args"], contents)
        record["model_kwargs"] = {k: _decode(v, contents) for k, v in model["kwargs"].items()}
        record["model_summary"] = tuple(json.loads(str(contents["__model_summary__"])))
    return record


def load(path, engine):
    """Read a state written by :func:`save`, for ``engine`` to resume the stream.

    ``engine`` must be set up for the model of the stream (e.g. by its ``init``). The file's
    record must match it (engine class, model kind, dtype), and the state must pass
    ``engine.check_state`` (field types, shapes, dtypes, finiteness, ranges, capacity). Arrays
    come back with their saved dtypes, so a resumed stream continues bit-for-bit.

    :raises ValueError: when ``path`` is not a numpyro_bnp checkpoint (empty, truncated, not an
        ``.npz``) or does not fit ``engine`` (the message names the field).
    """
    if isinstance(engine, type):
        raise TypeError(
            "engine must be the engine that resumes the stream (set up for its model), "
            f"got the class {engine.__name__}"
        )
    _check_engine(engine)
    path = os.fspath(path)
    contents = _read(path)
    record = {key: str(contents[f"__{key}__"]) for key in ("state_type", "engine", "kind")}
    state_type = engine.state_type
    expected = {
        "state_type": state_type.__name__,
        "engine": type(engine).__name__,
        "kind": str(engine.kind),
    }
    for key, want in expected.items():
        if record[key] != want:
            raise ValueError(f"{path} holds a {key} {record[key]!r}, expected {want!r}")
    dtype = str(contents["__dtype__"])
    if dtype != np.dtype(engine.dtype).name:
        raise ValueError(
            f"{path} holds a {dtype} state, expected {np.dtype(engine.dtype).name} (set the "
            "engine's dtype to the checkpoint's)"
        )
    missing = [f for f in state_type._fields if f not in contents]
    if missing:
        raise ValueError(f"{path} lacks the state fields {missing}")
    state = state_type(**{f: jnp.asarray(contents[f]) for f in state_type._fields})
    engine.check_state(state, name=f"{path}: state")
    capacity = int(contents["__capacity__"])
    if capacity != engine.capacity(state):
        raise ValueError(
            f"{path} records a capacity of {capacity} but holds {engine.capacity(state)} slots"
        )
    return state


def _same(a, b):
    """Whether two model arguments are the same value (numbers compared by value and shape)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    try:
        x, y = np.asarray(a), np.asarray(b)
    except Exception:
        return False
    if x.dtype.kind not in "biufc" or y.dtype.kind not in "biufc":
        return False
    return x.shape == y.shape and bool(np.array_equal(x, y))


def resume_arguments(record, model_args=(), model_kwargs=None, *, path="the checkpoint"):
    """The model arguments to rebuild an engine from a checkpoint's ``record``.

    The stored arguments are used; arguments passed here must equal them (an argument passed
    with another value raises, it is never silently preferred), except those recorded as
    :class:`NotStorable`, which must be passed here. A keyword the checkpoint's model was not
    given is refused too (it could change the model).

    :param record: from :func:`read_checkpoint`.
    :return: ``(model_args, model_kwargs)``.
    :raises ValueError: on a mismatch, a missing argument, or a checkpoint without a record of
        its model arguments.
    """
    model_kwargs = dict(model_kwargs or {})
    if record["model_kwargs"] is None:
        raise ValueError(
            f"{path} does not record the model arguments (written by an older version); build "
            "the engine with its options and read the state with its load method"
        )
    stored_args, stored_kwargs = tuple(record["model_args"]), dict(record["model_kwargs"])
    if model_args:
        if len(model_args) != len(stored_args):
            raise ValueError(
                f"{len(model_args)} positional model arguments passed, {path} records "
                f"{len(stored_args)}"
            )
        for i, (given, stored) in enumerate(zip(model_args, stored_args, strict=True)):
            if not isinstance(stored, NotStorable) and not _same(given, stored):
                raise ValueError(
                    f"model argument {i} = {given!r} differs from the one recorded in {path} "
                    f"({stored!r}); the state was computed for the recorded model"
                )
        args = tuple(model_args)
    else:
        args = stored_args
    for key, given in model_kwargs.items():
        if key not in stored_kwargs:
            raise ValueError(
                f"model argument {key}={given!r} was not given to the model of {path} (it "
                f"recorded {sorted(stored_kwargs)}); the state was computed for that model"
            )
        stored = stored_kwargs[key]
        if not isinstance(stored, NotStorable) and not _same(given, stored):
            raise ValueError(
                f"model argument {key}={given!r} differs from the one recorded in {path} "
                f"({key}={stored!r}); the state was computed for the recorded model"
            )
    kwargs = {**stored_kwargs, **model_kwargs}
    missing = [v.what for v in args if isinstance(v, NotStorable)] + [
        v.what for v in kwargs.values() if isinstance(v, NotStorable)
    ]
    if missing:
        raise ValueError(
            f"the model arguments {missing} could not be stored in {path} (only numbers, "
            "strings, None, numeric arrays and lists, tuples and dicts of them are); pass them "
            "again"
        )
    return args, kwargs


def check_model_summary(record, engine, *, path="the checkpoint"):
    """Raise ``ValueError`` when the model ``engine`` traced is not the checkpoint's.

    Compares ``engine.model_summary`` (one line per site: name, distribution, shape) with the
    one recorded by :func:`save`.
    """
    recorded = record["model_summary"]
    if recorded is None:
        return
    traced = tuple(engine.model_summary)
    if traced != tuple(recorded):
        raise ValueError(
            f"the model does not match the one {path} was written for: its sites are "
            f"{'; '.join(traced)}, the checkpoint recorded {'; '.join(recorded)}"
        )


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
        stream = {k: (["time"], np.asarray(v)) for k, v in self.traces.items()}
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
