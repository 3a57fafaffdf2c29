"""Argument checks shared by the distributions (static sizes, concreteness)."""

import operator

import jax

__all__ = ["is_concrete", "positive_int"]


def positive_int(value, name):
    """``value`` as a Python int ``>= 1``; else ``TypeError``/``ValueError`` naming ``name``."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a positive integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a positive integer, got {value!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def is_concrete(*values):
    """True when no leaf of ``values`` is a JAX tracer (their values can be checked on the host)."""
    return not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values))
