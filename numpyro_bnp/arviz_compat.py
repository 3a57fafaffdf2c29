"""The one place that knows the difference between ArviZ 0.23 and ArviZ 1.x.

Python 3.11 resolves ArviZ 0.23 (``InferenceData``, ``from_dict`` with keyword groups); Python
>= 3.12 resolves ArviZ 1.x (``xarray.DataTree``, ``from_dict`` with a nested dict, and
``from_numpyro`` that leaves out the log-likelihood unless asked). Everything else in the library
calls these functions and never branches on the version itself. ArviZ is imported lazily so that
``import numpyro_bnp`` stays fast.

ArviZ 1.x registers ``numpyro`` as a lazily loaded module (``lazy_loader``) when it is imported.
If the first import of NumPyro after that names a submodule (``from numpyro.infer import MCMC``),
CPython's import system runs ``numpyro/__init__.py`` (which imports ``numpyro.infer``) only when
it reads the lazy parent's ``__path__``, and then imports ``numpyro.infer`` a second time: the
second package object, the one left in ``sys.modules`` and on ``numpyro``, lacks the attributes
of the submodules the first run had already imported (``numpyro.infer.initialization``), which
ArviZ 1.x's ``from_numpyro`` reads. :func:`repair_numpyro_packages` puts them back; the library
calls it on import and before every export.
"""

import functools
import sys
import warnings

import numpy as np

__all__ = [
    "add_group",
    "arviz",
    "from_dict",
    "from_numpyro",
    "group",
    "is_arviz_1",
    "loo_pointwise",
    "repair_numpyro_packages",
]


def repair_numpyro_packages():
    """Give every imported ``numpyro`` package the attributes of its imported submodules.

    Restores ``numpyro.infer.initialization`` and the like after the double import described in
    the module docstring; a no-op when nothing is missing. Returns the names repaired.
    """
    repaired = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("numpyro."):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is None or type(parent).__name__ == "_LazyModule":
            continue  # not imported, or not yet run (reading it would run it)
        if child not in vars(parent):
            setattr(parent, child, module)
            repaired.append(name)
    return repaired


@functools.cache
def arviz():
    """The ``arviz`` module (0.23 warns about its coming refactor on import; that is silenced).

    ArviZ 0.23 records the day of that warning in a stamp file in the user's cache, through a
    temporary file of a fixed name: when two processes import it at once on a new day (``pytest
    -n 2``, a process pool), one of them fails with ``FileNotFoundError``. The stamp is written by
    then, so the import is tried once more.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            import arviz as az
        except FileNotFoundError as error:
            if "daily_warning" not in str(error):
                raise
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
    repair_numpyro_packages()
    return arviz().from_numpyro(mcmc, log_likelihood=log_likelihood, **kwargs)


def group(data, name):
    """The group ``name`` of ``data`` as an ``xarray.Dataset`` (on either ArviZ version)."""
    if is_arviz_1():
        return data[name].to_dataset()
    return getattr(data, name)


def loo_pointwise(data, **kwargs):
    """``arviz.loo(data, pointwise=True)``: ``(n_data_points, elpd_i)``, the number of observations
    ArviZ counted and the pointwise ELPD as a NumPy array (``loo_i`` on 0.23, ``elpd_i`` on 1.x)."""
    result = arviz().loo(data, pointwise=True, **kwargs)
    if is_arviz_1():
        return int(result.n_data_points), np.asarray(result.elpd_i)
    return int(result["n_data_points"]), np.asarray(result["loo_i"])
