"""The one place that knows the difference between ArviZ 0.23 and ArviZ 1.x.

Python 3.11 resolves ArviZ 0.23 (``InferenceData``, ``from_dict`` with keyword groups); Python
>= 3.12 resolves ArviZ 1.x (``xarray.DataTree``, ``from_dict`` with a nested dict, and
``from_numpyro`` that leaves out the log-likelihood unless asked). Everything else in the library
calls these functions and never branches on the version itself. ArviZ is imported lazily so that
``import numpyro_bnp`` stays fast.
"""

import functools
import warnings

__all__ = ["add_group", "arviz", "from_dict", "from_numpyro", "group", "is_arviz_1"]


@functools.cache
def arviz():
    """The ``arviz`` module (0.23 warns about its coming refactor on import; that is silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az
    return az


def is_arviz_1():
    """True on ArviZ >= 1.0 (DataTree API)."""
    return int(arviz().__version__.split(".")[0]) >= 1


def from_dict(groups, *, dims=None, coords=None):
    """Build ArviZ data from ``{group_name: {var_name: array}}``.

    Arrays follow ArviZ's convention: leading ``(chain, draw)`` dimensions for the sampled groups
    (``posterior``, ``sample_stats``, ``log_likelihood``, ...), none for ``observed_data``.
    Returns an ``InferenceData`` (ArviZ 0.23) or a ``DataTree`` (ArviZ 1.x).
    """
    az = arviz()
    if is_arviz_1():
        return az.from_dict(dict(groups), dims=dims, coords=coords)
    return az.from_dict(**groups, dims=dims, coords=coords)


def add_group(data, name, variables, *, coords=None):
    """``data`` with a group ``name`` of variables that are not draws (no ``chain``/``draw``).

    ``variables`` maps a name to ``(dims, array)``; ``coords`` gives coordinate values. ArviZ's
    tools that read draws (``summary``, ``plot_trace``) leave such a group alone. ArviZ 0.23:
    added to the ``InferenceData`` with ``add_groups``; ArviZ 1.x: a child of the ``DataTree``.
    Returns ``data`` (changed in place).
    """
    import xarray as xr

    dataset = xr.Dataset(dict(variables), coords=coords)
    if is_arviz_1():
        data[name] = xr.DataTree(dataset)
    else:
        with warnings.catch_warnings():  # a group outside ArviZ 0.23's schema: it says so
            warnings.simplefilter("ignore", UserWarning)
            data.add_groups({name: dataset})
    return data


def from_numpyro(mcmc, *, log_likelihood=True, **kwargs):
    """``arviz.from_numpyro`` with the log-likelihood group on by default on both versions."""
    return arviz().from_numpyro(mcmc, log_likelihood=log_likelihood, **kwargs)


def group(data, name):
    """The group ``name`` of ``data`` as an ``xarray.Dataset`` (on either ArviZ version)."""
    if is_arviz_1():
        return data[name].to_dataset()
    return getattr(data, name)
