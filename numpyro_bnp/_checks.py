"""Argument checks shared by every layer (distributions, models, engines).

One helper for each kind of argument, so that every public entry point accepts and rejects the
same things with the same words:

* :func:`positive_int`, :func:`nonnegative_int` — a static size or count (Python or NumPy
  integer, not ``bool``);
* :func:`positive_float`, :func:`unit_interval` — scalar options of engines;
* :func:`floating_dtype` — the working dtype of an engine's state;
* :func:`model_function` — a NumPyro model function;
* :func:`prng_key` — one JAX PRNG key (never a silent default);
* :func:`observed_array` — a user's observed data: real numbers (never complex), the expected
  shape, and finite *after* the cast to the working dtype (1e300 is finite in float64, not in
  float32);
* :func:`finite_in_dtype` — a model constant (a variance, a scale) that must be finite and,
  optionally, positive in the working dtype;
* :func:`event_shaped` — a value handed to a distribution's ``log_prob``: its trailing axes
  must be the distribution's event shape (the leading ones broadcast against the batch shape);
* :func:`is_concrete` — whether values can be checked on the host (no JAX tracer among them);
* :class:`FixedOptions` — engine options that cannot change after construction;
* :func:`renamed_arguments` — the old keyword names of renamed arguments, accepted for now with
  a ``FutureWarning`` (the names of every model and engine: ``docs/vocabulary.md``).

Every check raises ``TypeError`` (wrong kind of value) or ``ValueError`` (wrong shape or range)
whose message starts with the argument's name.
"""

import functools
import numbers
import operator
import warnings

import jax
import numpy as np

__all__ = [
    "FixedOptions",
    "event_shaped",
    "finite_in_dtype",
    "floating_dtype",
    "is_concrete",
    "model_function",
    "nonnegative_int",
    "observed_array",
    "positive_float",
    "positive_int",
    "prng_key",
    "renamed_arguments",
    "unit_interval",
]

#: the release that drops the old names accepted by :func:`renamed_arguments`
RENAMED_REMOVAL = "0.2"


def _integer(value, name, minimum, expected):
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be {expected}, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {expected}, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be {expected}, got {value}")
    return value


def positive_int(value, name):
    """``value`` as a Python int ``>= 1``; else ``TypeError``/``ValueError`` naming ``name``.

    Python and NumPy integers (and 0-d integer arrays) are accepted; ``bool`` and floats are not.
    """
    return _integer(value, name, 1, "a positive integer")


def nonnegative_int(value, name):
    """``value`` as a Python int ``>= 0`` (a number of moves, 0: none); else an error naming it.

    Accepts and rejects the same kinds of values as :func:`positive_int`.
    """
    return _integer(value, name, 0, "a non-negative integer")


def true_or_false(value, name):
    """``value`` as a Python bool; a Python or NumPy bool only, else ``ValueError`` naming ``name``
    (``1`` and ``"yes"`` are refused)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _real_scalar(value, name, expected):
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        if not (isinstance(value, np.ndarray | jax.Array) and np.ndim(value) == 0):
            raise TypeError(f"{name} must be {expected}, got {value!r}")
        if np.asarray(value).dtype.kind not in "iuf":
            raise TypeError(f"{name} must be {expected}, got {value!r}")
    return float(value)


def finite_float(value, name):
    """``value`` as a finite Python float; else ``TypeError``/``ValueError``."""
    result = _real_scalar(value, name, "a finite number")
    if not np.isfinite(result):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return result


def positive_float(value, name):
    """``value`` as a finite Python float ``> 0``; else ``TypeError``/``ValueError``."""
    result = _real_scalar(value, name, "a positive number")
    if not (np.isfinite(result) and result > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return result


def unit_interval(value, name):
    """``value`` as a Python float in the open interval ``(0, 1)``; else an error naming it."""
    result = _real_scalar(value, name, "a number in (0, 1)")
    if not 0.0 < result < 1.0:
        raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
    return result


def floating_dtype(dtype, name="dtype"):
    """``dtype`` as a NumPy floating dtype (``None``: JAX's default float, float32 without x64)."""
    if dtype is None:
        return np.dtype(jax.numpy.result_type(float))
    try:
        result = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a floating dtype such as float32, got {dtype!r}") from None
    if result.kind != "f":
        raise TypeError(f"{name} must be a floating dtype such as float32, got {result}")
    return result


def model_function(model, name="model"):
    """``model`` if it is a callable NumPyro model function; else ``TypeError``."""
    if not callable(model) or isinstance(model, type):
        raise TypeError(f"{name} must be a NumPyro model function, got {type(model).__name__}")
    return model


def prng_key(value, name="rng_key"):
    """``value`` if it is one JAX PRNG key (``PRNGKey(seed)`` or a typed key), else a TypeError."""
    from numpyro.util import is_prng_key

    if value is None or not is_prng_key(value):
        raise TypeError(
            f"{name} must be a JAX PRNG key such as jax.random.PRNGKey(0), got {value!r}"
        )
    return value


def observed_array(data, name, *, dtype, dim=None, ndim=2, row=False):
    """A user's observed data as a NumPy array of ``dtype``, checked after the cast.

    :param data: array-like of real numbers (bool, integer or floating; complex is refused, it
        would lose its imaginary part).
    :param str name: the argument's name, used in every message.
    :param dtype: the working dtype the engine computes in.
    :param int dim: when given, the size of the last axis.
    :param int ndim: the expected number of axes (2: rows of observations).
    :param bool row: accept one observation of shape ``(dim,)`` as one row (streaming batches).
    :raises TypeError: when the values are not real numbers.
    :raises ValueError: on a wrong shape, an empty array, or a value that is not finite in
        ``dtype`` (the first bad row is named).
    """
    try:
        arr = np.asarray(data)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of real numbers: {err}") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must hold real numbers (integer or floating), got dtype {arr.dtype}"
        )
    if row and dim is not None and arr.ndim == 1 and arr.shape[0] == dim:
        arr = arr[None]
    want = f"(n, {dim})" if dim is not None and ndim == 2 else f"{ndim} axes"
    if arr.ndim != ndim or (dim is not None and arr.shape[-1] != dim) or arr.size == 0:
        raise ValueError(f"{name} must have shape {want} and not be empty, got {arr.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = arr.astype(dtype, copy=False)
    finite = np.isfinite(cast).reshape(cast.shape[0], -1).all(axis=1)
    if not finite.all():
        overflow = np.isfinite(arr).all() if arr.dtype.kind == "f" else True
        why = f"values too large for {np.dtype(dtype)}" if overflow else "NaN or infinite values"
        raise ValueError(f"{name} contains {why} (first bad row: {int(np.argmin(finite))})")
    return cast


def finite_in_dtype(value, name, *, dtype, positive=False):
    """Check a model constant on the host: finite (and ``> 0`` if ``positive``) in ``dtype``.

    Catches constants that are fine in float64 but overflow or underflow the working dtype
    (``σ = 1e20`` squared, ``1 / σ² `` for ``σ = 1e-30`` in float32). Returns ``value`` cast to
    ``dtype``; tracers are returned unchecked.
    """
    if not is_concrete(value):
        return value
    arr = np.asarray(value)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        cast = arr.astype(dtype)
    ok = np.isfinite(cast) & (cast > 0 if positive else True)
    if not ok.all():
        what = "positive and finite" if positive else "finite"
        bad = arr.reshape(-1)[np.argmin(ok.reshape(-1))]
        raise ValueError(
            f"{name} must be {what} in {np.dtype(dtype)}, got {bad!r} (rescale the data or the "
            "model's constants, or enable float64)"
        )
    return cast


def event_shaped(value, event_shape, name="value"):
    """``value`` as an array whose trailing axes are ``event_shape``; else ``ValueError``.

    A density evaluated at a value of another event shape is meaningless (a matrix with more rows
    than the distribution has, a vector of the wrong length) and must not come out as a number.
    The leading axes are left to broadcast against the batch shape.
    """
    value = jax.numpy.asarray(value)
    event_shape = tuple(event_shape)
    n = len(event_shape)
    if value.ndim < n or tuple(value.shape[value.ndim - n :]) != event_shape:
        want = ", ".join(["..."] + [str(d) for d in event_shape])
        raise ValueError(
            f"{name} must have shape ({want}) (the event shape {event_shape} after any batch "
            f"axes), got {value.shape}"
        )
    return value


def broadcast_parameters(*values, batch_shape=()):
    """A distribution's parameters as arrays of their common floating dtype (at least the
    default float), broadcast to one batch shape: ``(batch_shape, arrays)``, the shape that of
    the values and ``batch_shape`` (e.g. that of a parameter that is itself a distribution)."""
    shape = jax.numpy.broadcast_shapes(*(jax.numpy.shape(v) for v in values), batch_shape)
    dtype = jax.numpy.result_type(*values, float)
    return shape, tuple(jax.numpy.broadcast_to(jax.numpy.asarray(v, dtype), shape) for v in values)


def is_concrete(*values):
    """True when no leaf of ``values`` is a JAX tracer (their values can be checked on the host)."""
    return not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values))


class FixedOptions:
    """Mix-in for engines whose compiled functions close over their options.

    The attributes named in ``fixed_options`` can be set once (in ``__init__``); setting one
    again raises ``AttributeError`` instead of leaving compiled code that silently uses the old
    value.
    """

    fixed_options = ()

    def __setattr__(self, name, value):
        if name in self.fixed_options and name in self.__dict__:
            cls = type(self).__name__
            raise AttributeError(
                f"{cls}.{name} is fixed when the engine is built (its compiled functions use "
                f"it); build a new {cls}(..., {name}=...) instead"
            )
        super().__setattr__(name, value)


def renamed_arguments(**renames):
    """Decorator: accept the old keyword names ``old="new"`` of renamed arguments, for now.

    A call that passes ``old=value`` runs as ``new=value`` after a ``FutureWarning`` naming both
    ("`alpha` is renamed `mass`; the old name will be removed in 0.2"); passing both raises
    ``TypeError``. The wrapped function keeps its name, docstring and signature (those of the new
    names), so ``inspect.signature`` and pickling by name see the function itself. The table of
    names: ``docs/vocabulary.md``.

    :param renames: ``old_name="new_name"`` pairs.
    """

    def decorate(fn):
        where = fn.__qualname__.removesuffix(".__init__")  # a class is called by its name

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(
                        f"{where}() got both `{old}` and `{new}`: `{old}` is renamed "
                        f"`{new}`, pass only `{new}`"
                    )
                warnings.warn(
                    f"{where}: `{old}` is renamed `{new}`; the old name will be "
                    f"removed in {RENAMED_REMOVAL}",
                    FutureWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper

    return decorate
