"""Read a user's NumPyro model once: the trace and the site finder every model reader shares.

Engines never look at site *names*: they trace the model once (``handlers.seed`` +
``handlers.trace``) and find sites by the type and shape of their distributions. A model that does
not fit gets a ``ValueError`` that names what was expected and lists what was found.

Every reader starts from :class:`TracedSites`: one trace of the model, its sample sites, and its
errors, each naming the engine, what it expected (or why the model does not fit) and the sites
found; :func:`sites_of` finds sites by the type of their distribution, :func:`observed_site` the
observed site, :func:`normal_params` a ``Normal``'s mean and variance. The readers built on them:
:func:`numpyro_bnp.infer.features.feature_model.read_feature_model` (latent feature models),
:func:`numpyro_bnp.infer.features.restricted_model.read_restricted_feature_model` (restricted-IBP
models), :func:`numpyro_bnp.infer.features.crm.model.read_crm_trait_model` (latent trait models
with a completely random measure prior) and
:func:`numpyro_bnp.infer.mixtures.model.read_mixture_model` (mixture models). Engines that cache
what they read (and the code compiled from it) key the cache with :func:`model_cache_key`.
"""

import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.primitives import Messenger

from numpyro_bnp._checks import is_concrete

__all__ = [
    "TracedSites",
    "model_cache_key",
    "normal_params",
    "observed_site",
    "sites_of",
    "trace_model",
    "unwrap",
]


def unwrap(fn):
    """Strip ``Independent`` / ``ExpandedDistribution`` wrappers: the base distribution."""
    while isinstance(fn, dist.Independent | dist.ExpandedDistribution):
        fn = fn.base_dist
    return fn


def model_cache_key(model, model_args=(), model_kwargs=None):
    """A key, compared with ``==``, that is equal for two calls exactly when they read one model.

    The model function by identity; the arguments by value: every array leaf (NumPy or JAX) by a
    SHA-256 hash of its bytes with its dtype and shape, every other leaf by its type and value,
    and the tree structure. ``repr`` would not do: NumPy abbreviates arrays over 1,000 elements,
    so two different arrays print alike. Returns ``None`` when a leaf is a JAX tracer (nothing to
    compare on the host: do not cache).
    """
    tree = (tuple(model_args), sorted(dict(model_kwargs or {}).items(), key=lambda kv: kv[0]))
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if not is_concrete(leaves):
        return None
    keys = []
    for leaf in leaves:
        if isinstance(leaf, np.ndarray | np.generic | jax.Array):
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                leaf = jax.random.key_data(leaf)
            arr = np.ascontiguousarray(np.asarray(leaf))
            digest = hashlib.sha256(arr.view(np.uint8).reshape(-1)).hexdigest()
            keys.append(("array", arr.dtype.str, arr.shape, digest))
        else:
            keys.append((type(leaf), leaf))
    return model, treedef, tuple(keys)


class _LastSite(Messenger):
    """Remembers the name of the last site the model has finished (to say where it failed)."""

    def __init__(self, fn):
        super().__init__(fn)
        self.last = None

    def postprocess_message(self, msg):
        if msg["type"] in ("sample", "deterministic", "param", "plate"):
            self.last = msg["name"]


def trace_model(model, model_args, model_kwargs, engine, *, seed=True):
    """``handlers.trace`` of ``model(*model_args, **model_kwargs)`` (seeded unless ``seed`` is
    False); an exception raised inside the model is re-raised as itself, with a note naming
    ``engine`` and the last site the model had finished before it failed."""
    watched = _LastSite(model)
    fn = handlers.seed(watched, rng_seed=0) if seed else watched
    try:
        # The readers check the model's traced values against their own products (a mean
        # ``Z @ A``, say). A GPU multiplies float32 matrices in TF32 (about three decimal
        # digits) at JAX's default precision, which failed that check on an H200.
        with jax.default_matmul_precision("highest"):
            return handlers.trace(fn).get_trace(*model_args, **(model_kwargs or {}))
    except Exception as err:
        where = f"after its site {watched.last!r}" if watched.last else "before its first site"
        err.add_note(f"raised inside the model while {engine} was tracing it ({where})")
        raise


def sites_of(sites, kind, shape=None):
    """The sites among ``sites`` whose (unwrapped) distribution is a ``kind`` and, if ``shape`` is
    given, whose value has that shape."""
    return [
        s
        for s in sites
        if isinstance(unwrap(s["fn"]), kind)
        and (shape is None or tuple(jnp.shape(s["value"])) == shape)
    ]


def site_named(sites, name):
    """The site among ``sites`` called ``name``."""
    return next(s for s in sites if s["name"] == name)


def _describe(site):
    fn = site["fn"]
    inner = unwrap(fn)
    kind = type(inner).__name__
    if inner is not fn:
        kind += f" (in {type(fn).__name__})"
    observed = ", observed" if site["is_observed"] else ""
    return f"{site['name']}: {kind}, shape {tuple(jnp.shape(site['value']))}{observed}"


def _unvalued_only(substitute_fn):
    """``substitute_fn`` asked only for the sample sites without a value (``None`` for the
    others: deterministic sites, observed or given values)."""

    def stand_in(site):
        if site["type"] != "sample" or site["value"] is not None:
            return None
        return substitute_fn(site)

    return stand_in


class TracedSites:
    """One trace of a user's model as a reader sees it: its sample sites and the errors naming them.

    The model runs once, eagerly (``jax.ensure_compile_time_eval``), under ``handlers.seed`` and
    ``handlers.trace``; ``substitute_fn`` (see ``handlers.substitute``) may stand in for slow
    draws: it is asked for the sample sites that have no value yet (neither observed nor given by
    an inner handler), the others keep theirs. Sites named in ``given`` (conditioned by the other
    blocks of a :class:`numpyro.infer.Gibbs` composite) are parameters here and are left out.

    :ivar sites: the sample sites in trace order (NumPyro's site dicts).
    :ivar summary: one line per site: name, distribution, value shape, observed.
    """

    def __init__(self, model, model_args, model_kwargs, engine, *, substitute_fn=None, given=()):
        if substitute_fn is not None:
            model = handlers.substitute(model, substitute_fn=_unvalued_only(substitute_fn))
        with jax.ensure_compile_time_eval():
            tr = trace_model(model, model_args, model_kwargs, f"{engine} (reading the model)")
        given = set(given)
        self.sites = [s for s in tr.values() if s["type"] == "sample" and s["name"] not in given]
        self.summary = tuple(_describe(s) for s in self.sites)
        self.engine = engine
        self.found = "; ".join(self.summary) or "no sample sites"
        if given:
            self.found += f" (given by other Gibbs blocks: {sorted(given)})"

    def fail(self, expected):
        """Raise ``ValueError``: the engine expected ``expected``; list the sites found."""
        raise ValueError(f"{self.engine} expected {expected}; the model has: {self.found}")

    def reject(self, problem):
        """Raise ``ValueError``: the engine cannot take the model because of ``problem``."""
        raise ValueError(f"{self.engine}: {problem}; the model has: {self.found}")

    def the_one(self, kind):
        """The one sample site whose distribution is a ``kind`` (fails unless there is one)."""
        found = sites_of(self.sites, kind)
        if len(found) != 1:
            self.fail(
                f"exactly one sample site with a {kind.__name__} distribution, found {len(found)}"
            )
        return found[0]


def normal_params(site, shape):
    """Mean and variance of a (wrapped) ``Normal`` site, broadcast to ``shape``, as float64."""
    base = unwrap(site["fn"])
    loc = np.broadcast_to(np.asarray(base.loc, np.float64), shape)
    var = np.broadcast_to(np.asarray(base.scale, np.float64) ** 2, shape)
    return loc, var


def observed_site(rest, num_rows, after, fail):
    """The observed site among ``rest`` (the sites after the prior's, ``after`` names it): the one
    observed site, or the last site when the model is traced without data; its value must be
    ``(num_rows, D)``."""
    observed = [s for s in rest if s["is_observed"]]
    if len(observed) > 1:
        fail("at most one observed site")
    if not rest:
        fail(f"an observed site after {after}")
    obs = observed[0] if observed else rest[-1]
    obs_shape = tuple(jnp.shape(obs["value"]))
    if len(obs_shape) != 2 or obs_shape[0] != num_rows:
        fail(f"an observed site of shape (N={num_rows}, D), got {obs['name']!r} {obs_shape}")
    return obs
