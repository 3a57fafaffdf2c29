"""Checkpoints of a streaming engine's state: ``.npz`` files (no pickle) with a record.

:func:`save` writes a state with a record of the engine that wrote it (format, engine class,
model kind, capacity, dtype, library version, and where the engine has them its options, model
arguments and traced sites); :func:`load` reads it back for an engine it fits, so that a stream
resumes bit-for-bit. :func:`read_checkpoint` reads the record without an engine, and
:func:`resume_arguments` and :func:`check_model_summary` check the model arguments and the traced
model of an engine rebuilt from it (e.g. :meth:`RIBPFilter.from_checkpoint`). The public names
are re-exported by :mod:`numpyro_bnp.infer.core.streaming`, where users find them.
"""

import json
import os
import zipfile

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_bnp.infer.core.protocol import CHECKPOINT_MEMBERS, check_engine

__all__ = [
    "NotStorable",
    "check_model_summary",
    "load",
    "read_checkpoint",
    "resume_arguments",
    "save",
]

CHECKPOINT_FORMAT = "numpyro_bnp streaming checkpoint 1"


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


def _leaf_names(state):
    """The names under which a state's leaves are stored: their paths, e.g. ``"mean"`` or
    ``"params.loc"`` for a field of a nested ``NamedTuple``."""
    paths = jax.tree_util.tree_leaves_with_path(state)
    return [jax.tree_util.keystr(path).lstrip(".") for path, _ in paths]


def save(path, state, engine):
    """Write ``state`` to exactly ``path`` as ``.npz`` (arrays and strings only, no pickle).

    Besides the state's fields the file records the format, the state's type, the engine's class
    name, its ``kind``, the state's capacity, the engine's dtype and the library version, which
    :func:`load` checks against the engine that resumes the stream; and, when the engine has them
    (see :class:`~numpyro_bnp.infer.StreamingEngine`), its ``options``, the ``model_args`` /
    ``model_kwargs`` it was set up with and its ``model_summary``, from which
    :func:`read_checkpoint` lets the engine be rebuilt. Model arguments are stored as JSON
    (``None``, booleans, numbers, strings, lists, tuples, dicts with string keys) and numeric
    arrays as ``.npz`` entries; any other value (a function, a distribution, ...) is recorded as
    :class:`NotStorable` under its name and type, and must be passed again when the engine is
    rebuilt. The file is written under a temporary name and then renamed, so an interrupted save
    never leaves a truncated checkpoint.

    :raises ValueError: when ``state`` fails ``engine.check_state``.
    :raises TypeError: when ``state`` fails ``engine.check_state``, or when the engine's options
        are not JSON-storable.
    """
    check_engine(engine, CHECKPOINT_MEMBERS)
    engine.check_state(state, name="state")
    path = os.fspath(path)
    arrays = dict(zip(_leaf_names(state), map(np.asarray, jax.tree.leaves(state)), strict=True))
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
    check_engine(engine, CHECKPOINT_MEMBERS)
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
    capacity = int(contents["__capacity__"])
    template = engine.empty(capacity)  # the state's structure (nested NamedTuples)
    names = _leaf_names(template)
    missing = [f for f in names if f not in contents]
    if missing:
        raise ValueError(f"{path} lacks the state fields {missing}")
    treedef = jax.tree.structure(template)
    state = jax.tree.unflatten(treedef, [jnp.asarray(contents[f]) for f in names])
    engine.check_state(state, name=f"{path}: state")
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
