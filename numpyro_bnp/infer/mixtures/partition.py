"""Read the partition site of a user's NumPyro mixture model and its parameters.

Part of the mixture-model reader :func:`~numpyro_bnp.infer.mixtures.model.read_mixture_model`
(``docs/model_contract.md``, section "Mixture models"), on its trace
(:class:`~numpyro_bnp.infer.core.model.TracedSites`). The **partition site** is of one of two
kinds (an engine names those it takes, ``partitions``, keys of :data:`PARTITIONS`):

- ``"nggp"``, a normalized generalized gamma process (NGGP) partition prior (Tank, Foti & Fox,
  AISTATS 2015; Favaro & Teh, Stat. Sci. 2013): exactly one latent sample site whose
  distribution is an :class:`~numpyro_bnp.distributions.NGGP` with batch shape ``()``; its
  value is the labels ``z`` ``(N,)``. Its ``mass``, ``sigma`` and ``tau`` are read as numbers;
  for an engine that learns them (``hyper=True``, :class:`~numpyro_bnp.infer.NGGPMarginalGibbs`)
  they may be set by **hyper-parameter sites**: scalar latent sites whose value sets only the
  NGGP's parameters (or another such site's prior), found by tracing the model again with the
  site at another value and every other latent site held;
  :meth:`~numpyro_bnp.infer.mixtures.model.MixtureModel.numbers` reads the model at any values
  of them;
- ``"stick_breaking"``, the truncated stick-breaking of a Dirichlet process (Ishwaran & James,
  JASA 2001; Blei & Jordan, Bayesian Analysis 2006), in a model without an NGGP site: exactly
  one latent ``Categorical`` site of batch shape ``(N,)`` (the labels) whose ``probs`` are, at
  the traced values, ``w_k = v_k Π_{j<k} (1 - v_j)`` (``k < T``), ``w_T = Π_{j<T} (1 - v_j)``
  with ``v`` the **sticks site**: one latent ``Beta(1, α)`` site of batch shape ``(T - 1,)``,
  ``α`` a number, the same for every stick (a prior on it is not supported yet), ``T >= 2``
  the labels' number of categories and the clusters plate's size. It reads as the Dirichlet
  process: ``mass = α``, ``sigma = 0``, ``tau = 1``.

The reader's numerical comparisons of traced values (:func:`_first_bad_row`,
:func:`_same_for_all`) live here too: the component reader uses them as well.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions.transforms import biject_to

from numpyro_bnp._checks import is_concrete
from numpyro_bnp._math import stick_breaking_weights
from numpyro_bnp.distributions import NGGP
from numpyro_bnp.infer.core.model import observed_site, site_named, sites_of, unwrap

__all__ = ["PARTITIONS"]

#: the partition kinds a mixture engine may take (``read_mixture_model(partitions=...)``): what
#: the partition site is, and which engines fit such models
PARTITIONS = {
    "nggp": ("sample site with a NGGP distribution", "fit NGGP mixtures with ADFNRM or EPNRM"),
    "stick_breaking": (
        "latent Categorical labels site whose probs are the truncated stick-breaking weights of "
        "Beta(1, alpha) sticks",
        "fit truncated stick-breaking Dirichlet-process mixtures (numpyro_bnp.models.dp_mixture) "
        "with PowerPriorSVB",
    ),
}

_CATEGORICAL = (dist.CategoricalProbs, dist.CategoricalLogits)


def _partition_kinds(partitions):
    """``partitions`` checked: a non-empty tuple of the keys of :data:`PARTITIONS`."""
    if isinstance(partitions, str) or not partitions or not set(partitions) <= set(PARTITIONS):
        raise ValueError(
            f"partitions must be a non-empty tuple of {tuple(PARTITIONS)}, got {partitions!r}"
        )
    return tuple(partitions)


def _partition_site(read, partitions):
    """``(kind, site)``: the NGGP site, or, in a model without one, the one latent
    ``Categorical`` labels site; refused unless its kind is one of ``partitions``."""
    nggp = sites_of(read.sites, NGGP)
    labels = [s for s in sites_of(read.sites, _CATEGORICAL) if not s["is_observed"]]
    if nggp and "nggp" not in partitions:
        what, fit = PARTITIONS["nggp"]
        read.reject(
            f"the model's partition {nggp[0]['name']!r} is of the kind 'nggp' ({what}); this "
            f"engine takes the partition kinds {partitions}: {fit}"
        )
    if nggp or not labels or "stick_breaking" not in partitions:
        hint = ""
        if labels and not nggp:  # an engine of NGGP partitions only
            hint = (
                f" (this engine takes the partition kinds {partitions}; the latent Categorical "
                f"site {labels[0]['name']!r} is a 'stick_breaking' partition if its probs are "
                f"the truncated stick-breaking weights of Beta(1, alpha) sticks: "
                f"{PARTITIONS['stick_breaking'][1]})"
            )
        wanted = " or one ".join(PARTITIONS[kind][0] for kind in partitions)
        if len(nggp) != 1:
            read.fail(f"exactly one {wanted}, found {len(nggp)}{hint}")
        return "nggp", nggp[0]
    if len(labels) != 1:
        names = ", ".join(repr(s["name"]) for s in labels)
        read.fail(
            f"exactly one latent Categorical labels site (the stick-breaking partition), found "
            f"{len(labels)}: {names}"
        )
    return "stick_breaking", labels[0]


def _roles(read, partitions):
    """``(kind, partition, observed, latent)`` sites of a trace."""
    kind, partition = _partition_site(read, partitions)
    if kind == "nggp":
        num_rows = int(unwrap(partition["fn"]).num_points)
        after = "the NGGP partition site"
    else:
        fn = partition["fn"]
        if len(fn.batch_shape) != 1 or fn.event_shape != ():
            read.fail(
                f"a labels site of batch shape (N,), one label per row (a Categorical in a "
                f"numpyro.plate over the rows); {partition['name']!r} has batch shape "
                f"{tuple(fn.batch_shape)} and event shape {tuple(fn.event_shape)}"
            )
        num_rows = fn.batch_shape[0]
        after = f"the labels site {partition['name']!r}"
    rest = [s for s in read.sites if s is not partition]
    obs = observed_site(rest, num_rows, after, read.fail)
    return kind, partition, obs, [s for s in rest if s is not obs]


def _not_a_prior(read, latent, value, what, unsupported):
    """Refuse the model when the partition's parameter ``what`` is the value of a latent scalar
    site: a prior on it (``unsupported`` says which priors are not supported)."""
    for s in latent:
        if np.shape(s["value"]) == () and np.isclose(float(s["value"]), value):
            read.reject(
                f"{what} is the value of the sample site {s['name']!r}: {unsupported} is not "
                "supported yet; pass numbers"
            )


def _nggp_params(read, partition, latent, check_priors=True):
    """The NGGP's ``(mass, sigma, tau)`` as host floats (at the traced values of its
    hyper-parameter sites, which ``check_priors=False`` lets set them)."""
    fn = unwrap(partition["fn"])
    if partition["fn"] is not fn or fn.batch_shape != ():
        read.fail(
            f"a partition site with scalar mass, sigma and tau (an NGGP of batch shape (), "
            f"outside any plate); {partition['name']!r} has batch shape "
            f"{tuple(partition['fn'].batch_shape)}"
        )
    if partition["is_observed"]:
        read.fail(f"a latent NGGP partition site; {partition['name']!r} is observed")
    params = {}
    for name in ("mass", "sigma", "tau"):
        value = getattr(fn, name)
        if not is_concrete(value):
            read.reject(
                f"the NGGP's {name} must be a number when the model is read, got a traced "
                "value (NGGPMarginalGibbs learns a prior on them when it reads the model)"
            )
        params[name] = float(value)
        if check_priors:
            unsupported = "a prior on the NGGP's mass, sigma or tau (NGGPMarginalGibbs learns it)"
            _not_a_prior(read, latent, params[name], f"the NGGP's {name}", unsupported)
    return params


#: the points of the unconstrained line at which a hyper-parameter site's values are checked
_PROBES = (-12.0, 12.0)  # both ends: e^{∓12}, sigmoid(∓12), ... (and the traced value)


_NGGP_PARAMS = {"mass": "finite and > 0", "sigma": "in [0, 1)", "tau": "finite and >= 0"}


def _nggp_readings(sites, partition, obs, held):
    """What a hyper-parameter site may set, read from a trace: the NGGP's parameters and the
    log density of every other site at its held (or observed) value."""
    out = {}
    with jax.ensure_compile_time_eval(), warnings.catch_warnings():
        # data not yet checked (check_observed) may lie outside the support: compared, not used
        warnings.simplefilter("ignore", UserWarning)
        for s in sites:
            if s["name"] == partition:
                fn = unwrap(s["fn"])
                for p in _NGGP_PARAMS:
                    out[f"the NGGP's {p}"] = np.asarray(getattr(fn, p), np.float64)
                continue
            value = s["value"] if s["is_observed"] else held[s["name"]]
            what = "the observed site" if s["name"] == obs else f"the prior of {s['name']!r}"
            out[what] = np.asarray(jnp.sum(s["fn"].log_prob(value)), np.float64)
    return out


def _values_at(sites, point):
    """``{name: value}``: the scalar ``sites`` at the point ``point`` of their unconstrained
    lines."""
    return {
        s["name"]: biject_to(s["fn"].support)(jnp.asarray(point, jnp.result_type(s["value"])))
        for s in sites
    }


def _problem_at(retrace, sites, point, partition):
    """What goes wrong with the scalar ``sites`` at the point ``point`` of their unconstrained
    lines (``retrace(data)`` traces the model): ``None``, the model's error, or the NGGP's
    parameters that are not valid there."""
    values = _values_at(sites, point)
    try:
        traced = retrace(values)
    except ValueError as err:
        return f"the model fails: {err}"
    nggp = unwrap(site_named(traced, partition)["fn"])
    got = {p: float(getattr(nggp, p)) for p in _NGGP_PARAMS}
    ok = {
        "mass": np.isfinite(got["mass"]) and got["mass"] > 0,
        "sigma": 0 <= got["sigma"] < 1,
        "tau": np.isfinite(got["tau"]) and got["tau"] >= 0,
    }
    bad = [f"the NGGP's {p} is {got[p]!r} (must be {_NGGP_PARAMS[p]})" for p in got if not ok[p]]
    return "; ".join(bad) or None


def _hyper_sites(read, partition, obs, scalar, retrace):
    """``(hyper-parameter sites, conjugate mass site or None)`` among the ``scalar`` latent
    sites: each is traced again at another value, every other latent site held
    (``retrace(data)`` gives the sample sites), and must set only the NGGP's parameters or
    another such site's prior; the NGGP's parameters must be valid over the sites' supports
    (checked at both ends, :data:`_PROBES`, of their unconstrained lines). Fails naming the
    site."""
    name_of = partition["name"]
    held = {s["name"]: s["value"] for s in read.sites if not s["is_observed"]}
    names = [s["name"] for s in scalar]
    allowed = {f"the NGGP's {p}" for p in _NGGP_PARAMS} | {f"the prior of {n!r}" for n in names}
    base = _nggp_readings(read.sites, name_of, obs["name"], held)
    conjugate = None
    for site in scalar:
        name, fn = site["name"], site["fn"]
        if fn.support.is_discrete:
            kind = type(unwrap(fn)).__name__
            read.reject(f"the hyper-parameter site {name!r} ({kind}) must be continuous")
        free = np.asarray(biject_to(fn.support).inv(site["value"]), np.float64)
        other = _values_at([site], free + 0.5)
        try:
            sites = retrace(other)
        except ValueError as err:
            read.reject(
                f"the hyper-parameter site {name!r} at {float(other[name])!r}, a point of its "
                f"support, makes the model fail: {err}"
            )
        moved = _nggp_readings(sites, name_of, obs["name"], held)
        changed = [
            what
            for what in base
            if what != f"the prior of {name!r}"
            and not np.allclose(base[what], moved[what], rtol=1e-9, atol=0.0, equal_nan=True)
        ]
        bad = [w for w in changed if w not in allowed]
        if bad:
            read.reject(
                f"the latent site {name!r} sets {', '.join(bad)}; {read.engine} learns the "
                "sites that set only the NGGP's mass, sigma or tau (or the prior of such a "
                f"site): sample {name!r} in another block of numpyro.infer.Gibbs, e.g. "
                f"(NUTS(model), [{name!r}]), with {read.engine} on the partition and the "
                "component sites"
            )
        is_mass = all(
            np.isclose(np.asarray(mass), np.asarray(value, np.float64), rtol=1e-6)
            for mass, value in (
                (base["the NGGP's mass"], site["value"]),
                (moved["the NGGP's mass"], other[name]),
            )
        )
        if is_mass and changed == ["the NGGP's mass"] and isinstance(fn, dist.Gamma):
            conjugate = name
    for point in _PROBES:  # all sites at once; one by one to name the culprit
        if _problem_at(retrace, scalar, point, name_of) is None:
            continue
        for group in [*[[s] for s in scalar], scalar]:
            problem = _problem_at(retrace, group, point, name_of)
            if problem is not None:
                where = ", ".join(
                    f"{s['name']!r} ({type(unwrap(s['fn'])).__name__} prior, support "
                    f"{s['fn'].support}) at {float(v)!r}"
                    for s, v in zip(group, _values_at(group, point).values(), strict=True)
                )
                read.reject(
                    f"at the hyper-parameter site {where}, a point of its support, {problem}; "
                    f"give {' and '.join(repr(s['name']) for s in group)} a prior whose "
                    "support fits"
                )
    return tuple(names), conjugate


def _stick_breaking(read, labels, latent, num_clusters):
    """The sticks site whose stick-breaking weights are the probs of the ``labels`` site, and
    the ``α`` of its ``Beta(1, α)`` as a host float (module docstring)."""
    name, t = labels["name"], num_clusters
    weights = (
        "the stick-breaking weights w_k = v_k prod_{j<k} (1 - v_j), w_T = prod_{j<T} (1 - v_j) "
        f"of a latent Beta(1, alpha) sticks site v of batch shape (T - 1,) = ({t - 1},)"
    )
    if t < 2:
        read.fail(
            f"the labels site {name!r} to have T >= 2 categories (the mass alpha is read from "
            f"the Beta(1, alpha) sticks site of T - 1 sticks; one cluster has none), found T = {t}"
        )
    rows = (labels["fn"].batch_shape[0], t)
    sticks = [
        s
        for s in sites_of(latent, dist.Beta)
        if s["fn"].event_shape == () and len(s["fn"].batch_shape) == 1
    ]
    right_length = [s for s in sticks if tuple(s["fn"].batch_shape) == (t - 1,)]
    with jax.ensure_compile_time_eval():  # numbers, also when the reader runs under jit
        probs = unwrap(labels["fn"]).probs  # a CategoricalLogits computes them here
        expected = [np.asarray(stick_breaking_weights(_values(s))) for s in right_length]
    if not is_concrete(probs):
        read.reject(f"the probs of the labels site {name!r} must be numbers when the model is read")
    differ = [_first_bad_row(probs, np.broadcast_to(w, rows)) for w in expected]
    if None not in differ:
        if right_length:
            where = f" (row {differ[0]} differs)" if differ[0] >= 0 else ""
            read.fail(
                f"the labels site {name!r} to have probs = {weights}; found probs that are not "
                f"the stick-breaking of {right_length[0]['name']!r}{where}"
            )
        found = ", ".join(
            f"{s['name']!r} of batch shape {tuple(s['fn'].batch_shape)}" for s in sticks
        )
        read.fail(
            f"the labels site {name!r} to have probs = {weights}; found "
            + (f"Beta sites of the wrong length: {found}" if sticks else "no such Beta site")
        )
    site = right_length[differ.index(None)]
    fn = unwrap(site["fn"])
    if not is_concrete(fn.concentration1, fn.concentration0):
        read.reject(
            f"the Beta(1, alpha) of the sticks site {site['name']!r} must have numbers when the "
            "model is read, got a traced value (a prior on the mass is not supported yet)"
        )
    shape = (t - 1,)
    c1 = np.broadcast_to(np.asarray(fn.concentration1, np.float64), shape)
    alpha = np.broadcast_to(np.asarray(fn.concentration0, np.float64), shape)
    if not np.allclose(c1, 1.0):
        read.fail(
            f"the sticks site {site['name']!r} to be Beta(1, alpha), the sticks of a Dirichlet "
            f"process; found concentration1 = {sorted(set(c1.tolist()))}"
        )
    if not _same_for_all(alpha):
        read.fail(
            f"the sticks site {site['name']!r} to be Beta(1, alpha) with one alpha for all sticks; "
            f"found concentration0 = {sorted(set(alpha.tolist()))}"
        )
    mass = f"the mass alpha of the sticks site {site['name']!r}"
    _not_a_prior(read, latent, alpha[0], mass, "a prior on the mass")
    return site, float(alpha[0])


def _values(site):
    return np.asarray(site["value"], np.float64)


def _first_bad_row(param, expected):
    """``None`` if ``param`` equals ``expected`` (``(N, ...)``) up to rounding, else the first
    row that differs (-1: shapes that do not broadcast)."""
    expected = np.asarray(expected, np.float64)
    try:
        param = np.broadcast_to(np.asarray(param, np.float64), expected.shape)
    except ValueError:
        return -1
    scale = np.abs(expected) + np.abs(expected).max(initial=0.0)
    ok = (np.abs(param - expected) <= 1e-4 * scale) & np.isfinite(param)
    ok = ok.reshape(ok.shape[0], -1).all(axis=1)
    return None if ok.all() else int(np.argmin(ok))


def _same_for_all(values):
    """Whether ``values`` ``(K, ...)`` are equal along the leading axis (up to rounding)."""
    values = np.asarray(values, np.float64)
    return _first_bad_row(values, np.broadcast_to(values[:1], values.shape)) is None
