r"""The NumPyro kernel shell shared by the CRM slice samplers.

:class:`~numpyro_bnp.infer.CRMSlice` and :class:`~numpyro_bnp.infer.CRMTopicSlice` are thin
shells over pure functions of ``(constants, data, state)``: the options, the
:class:`numpyro.infer.mcmc.MCMCKernel` protocol (chains one after the other or vectorized, the
refusal of ``init_params``), the data read from the model's arguments at every run (never kept
in the state: a run continued on new data fits the new data), the capacity and its growth, and
the saturation report live here once. The sweep itself is
:func:`numpyro_bnp.infer.features.crm.sweep.sweep_atoms`.
"""

import math

import jax
import jax.numpy as jnp
from numpyro.infer.gibbs import GIBBS_SITES_KWARG
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import identity

from numpyro_bnp._checks import (
    FixedOptions,
    model_function,
    nonnegative_int,
    positive_float,
    positive_int,
)
from numpyro_bnp.distributions.crm import REPRESENTATIONS
from numpyro_bnp.infer.core.mcmc import (
    chains_batched,
    on_saturation_option,
    over_chains,
    report_saturation,
)
from numpyro_bnp.infer.features.crm.atoms import AtomSeries
from numpyro_bnp.infer.features.crm.model import read_crm_trait_model
from numpyro_bnp.infer.features.crm.sweep import pad_atom_fields

__all__ = ["CRMSliceKernel"]

#: the diagnostics every state of a CRM slice sampler records (``extra_fields``)
DIAGNOSTIC_FIELDS = (
    "num_active",
    "parity",
    "num_atoms",
    "num_slice_atoms",
    "saturated",
    "accept_gamma",
    "accept_marks",
    "log_likelihood",
    "log_joint",
)


class CRMSliceKernel(FixedOptions, MCMCKernel):
    """Base of the CRM slice samplers (module docstring); the options are those of
    :class:`~numpyro_bnp.infer.CRMSlice`.

    A subclass gives ``observation`` (the kind of model it takes, see
    :func:`~numpyro_bnp.infer.features.crm.model.read_crm_trait_model`) and ``other_kernel`` (the
    kernel for the other kind, named in the error), and implements
    ``_constants(spec, atoms, capacity, gibbs)`` (a ``NamedTuple`` with those fields first),
    ``_data(constants, state, model_args, model_kwargs)`` (the data at these arguments, checked
    against the state; ``state`` is ``None`` at :meth:`init`), ``_state_rows(state)``,
    ``_init_chain(constants, data, key)``, ``_sweep(constants, data, state)`` (one chain; pure)
    and ``_pad(constants, state, pad)`` (the subclass's fields of :meth:`grow`). Its state is a
    ``NamedTuple`` with ``z`` (the sample), ``log_likelihood``, ``log_joint`` and the fields
    every CRM slice sampler shares, which this shell reads (``DIAGNOSTIC_FIELDS``, the
    saturation report, :meth:`grow`): ``i``, ``rng_key`` and those of
    :func:`~numpyro_bnp.infer.features.crm.sweep.atom_fields` (documented in
    :class:`~numpyro_bnp.infer.CRMSliceState`).
    """

    sample_field = "z"
    observation = None
    other_kernel = None
    fixed_options = (
        "representation",
        "xi_scale",
        "max_features",
        "n_gamma",
        "gamma_step",
        "n_marks",
        "mark_step",
        "on_saturation",
    )

    def __init__(
        self,
        model,
        *,
        representation="bondesson",
        xi_scale=1.0,
        max_features=None,
        n_gamma=10,
        gamma_step=1.0,
        n_marks=5,
        mark_step=0.3,
        on_saturation="warn",
    ):
        model_function(model)
        if representation not in REPRESENTATIONS:
            raise ValueError(
                f"representation must be one of {REPRESENTATIONS}, got {representation!r}"
            )
        self._model = model
        self.representation = representation
        self.xi_scale = positive_float(xi_scale, "xi_scale")
        self.max_features = (
            None if max_features is None else positive_int(max_features, "max_features")
        )
        self.n_gamma = nonnegative_int(n_gamma, "n_gamma")
        self.gamma_step = positive_float(gamma_step, "gamma_step")
        self.n_marks = nonnegative_int(n_marks, "n_marks")
        self.mark_step = positive_float(mark_step, "mark_step")
        self.on_saturation = on_saturation_option(on_saturation, type(self).__name__)
        self.constants = None
        self._batched = False
        self._sample_fn = None

    # ------------------------------------------------------------------ numpyro protocol
    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return ("z", *DIAGNOSTIC_FIELDS)

    @property
    def spec(self):
        """What the kernel read from the model (``None`` before :meth:`init`)."""
        return None if self.constants is None else self.constants.spec

    def get_diagnostics_str(self, state):
        sat = ", SATURATED" if bool(jnp.any(state.saturated)) else ""
        return (
            f"K+ {int(state.num_active)}, atoms {int(state.num_atoms)}/"
            f"{state.arrivals.shape[-1]}{sat}, acc Γ {float(state.accept_gamma):.2f}"
        )

    def get_constrain_fn(self, model_args, model_kwargs):
        """Identity: the sample field holds the model's (constrained) site values."""
        return identity

    def wrap_model(self, wrapper):
        """A new kernel with the same options on ``wrapper(model)`` (``numpyro.infer.Gibbs``
        conditions the model this way)."""
        options = {name: getattr(self, name) for name in self.fixed_options}
        return type(self)(wrapper(self._model), **options)

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """A chain (or a batch of chains) at its first state (the subclass's ``_init_chain``).

        ``init_params`` is refused with a ``ValueError``: the sampler's state (arrival times,
        marks, the atom buffer) cannot be rebuilt from site values. As a block of
        :class:`numpyro.infer.Gibbs` the composite always hands every block its sites' values
        drawn from the prior; the block starts from its own empty state instead.
        """
        engine = type(self).__name__
        gibbs = bool(model_kwargs and model_kwargs.get(GIBBS_SITES_KWARG))
        given = init_params is not None and not (isinstance(init_params, dict) and not init_params)
        if given and not gibbs:
            raise ValueError(
                f"{engine} does not take init_params (got sites "
                f"{sorted(init_params) if isinstance(init_params, dict) else init_params!r}): "
                "every chain starts from its own first state (no instantiated atom, or a prior "
                "draw); to continue a run set mcmc.post_warmup_state = mcmc.last_state"
            )
        constants = self._read(model_args, model_kwargs, gibbs)
        self.constants = constants
        self._batched = chains_batched(rng_key, engine)
        # the constants as they are at each call (grow() changes the capacity)
        self._sample_fn = over_chains(
            lambda data, state: self._sweep(self.constants, data, state), self._batched, (None, 0)
        )
        data = self._data(constants, None, model_args, model_kwargs)
        init = over_chains(
            lambda data, key: self._init_chain(constants, data, key), self._batched, (None, 0)
        )
        # one compiled program: run eagerly, the first state costs a compilation per operation
        return jax.jit(init)(data, rng_key)

    def sample(self, state, model_args, model_kwargs):
        """One sweep of every chain on the data of ``model_args, model_kwargs`` (read anew at
        every call: a run continued on new data fits the new data); a sweep whose slices asked
        for more atoms than the buffer holds is reported on the host (``on_saturation``)."""
        if self._sample_fn is None:
            raise RuntimeError(f"{type(self).__name__}.sample called before init")
        data = self._data(self.constants, state, model_args, model_kwargs)
        state = self._sample_fn(data, state)
        report_saturation(
            state.saturated,
            state.num_saturated,
            state.i,
            on_saturation=self.on_saturation,
            engine=type(self).__name__,
            capacity=f"the atom buffer ({self.constants.capacity} atoms)",
            remedy=self._remedy(),
        )
        return state

    def _remedy(self):
        if self.constants.gibbs:
            return (
                "Rebuild the model with a larger max_features (the CRM's truncation is the "
                "buffer of a Gibbs block)"
            )
        return (
            "Grow the buffer and continue (mcmc.post_warmup_state = kernel.grow(mcmc.last_state)"
            f"), or build {type(self).__name__}(..., max_features=) larger"
        )

    # ------------------------------------------------------------------ capacity
    @property
    def capacity(self):
        """The number of atom slots of the states (``None`` before :meth:`init`)."""
        return None if self.constants is None else self.constants.capacity

    def grow(self, state, max_features=None):
        """Pad ``state`` (one chain or a batch) to capacity ``max_features`` (default: double).

        Between runs: ``mcmc.post_warmup_state = kernel.grow(mcmc.last_state)`` then
        ``mcmc.run(...)`` continues the chains with the larger buffer (one recompilation).
        """
        old = state.arrivals.shape[-1]
        new = 2 * old if max_features is None else positive_int(max_features, "max_features")
        if new < old:
            raise ValueError(f"max_features must be >= the current capacity {old}, got {new}")
        if self.constants.gibbs:
            raise ValueError(
                f"{type(self).__name__} as a Gibbs block uses the model's CRM truncation as its "
                "capacity: rebuild the model with a larger max_features instead of grow()"
            )
        pad = new - old
        self.constants = self.constants._replace(capacity=new)
        return pad_atom_fields(self._pad(self.constants, state, pad), pad)

    # ------------------------------------------------------------------ set-up
    def _read(self, model_args, model_kwargs, gibbs):
        """Read the model: its spec, atom series and capacity, as the subclass's constants."""
        engine = type(self).__name__
        spec = read_crm_trait_model(self._model, model_args, model_kwargs, engine=engine)
        if spec.observation != self.observation:
            kinds = {"topics": "the beta–negative-binomial topic model (word counts)"}
            what = kinds.get(spec.observation, "a latent trait model with a count site")
            raise ValueError(
                f"{engine} does not take {what} (sites {spec.crm_site!r}, "
                f"{spec.rate_site or spec.count_site!r}, {spec.trait_site!r}): use "
                f"numpyro_bnp.infer.{self.other_kernel}(model) for it"
            )
        crm = spec.crm
        reasons = crm._representations()
        if reasons[self.representation] is not None:
            raise ValueError(
                f"{engine}: representation={self.representation!r} does not exist for the prior "
                f"of site {spec.crm_site or spec.count_site!r} ({type(crm).__name__}): "
                f"{reasons[self.representation]}"
            )
        atoms = AtomSeries(
            crm,
            self.representation,
            spec.likelihood,
            spec.total_count,
            spec.num_rows,
            jnp.result_type(float),
            n_gamma=self.n_gamma,
            gamma_step=self.gamma_step,
            n_marks=self.n_marks,
            mark_step=self.mark_step,
        )
        if gibbs:
            if spec.crm_site is not None and not atoms.decreasing:
                # the other blocks evaluate the CRM density at the exported atoms, which is
                # finite only for decreasing atoms (the K largest); Bondesson atoms with random
                # marks and rejection atoms (zeros where rejected) are not in order
                raise ValueError(
                    f"{engine} as a Gibbs block needs decreasing atoms at site "
                    f"{spec.crm_site!r}: use representation='inverse_levy' (representation="
                    f"{self.representation!r} of {type(crm).__name__} gives atoms out of order)"
                )
            # the other blocks run the model on the exported values: they need its shapes
            if self.max_features not in (None, spec.truncation):
                raise ValueError(
                    f"{engine} as a Gibbs block uses the {spec.truncation} atoms of the model's "
                    f"CRM site as its capacity (the other blocks see the model's shapes); got "
                    f"max_features={self.max_features}: set the model's max_features (the CRM's "
                    "truncation) instead"
                )
            capacity = spec.truncation
        elif self.max_features is not None:
            capacity = self.max_features
        else:
            n = spec.num_rows
            capacity = spec.truncation + math.ceil(self.xi_scale * (math.log(n) + 6.0))
        return self._constants(spec, atoms, capacity, gibbs)

    def _check_rows(self, state, num_rows, kind):
        """A continued run on data with another number of rows: a ``ValueError``."""
        if state is None:
            return
        rows = self._state_rows(state)
        if rows != num_rows:
            raise ValueError(
                f"{type(self).__name__}: the model now has {num_rows} rows, the chains' state "
                f"{rows}: the {kind} of each row are part of the state, so a run can continue "
                "on new data with the same number of rows only; start new chains (MCMC.run "
                "without post_warmup_state) for these data"
            )
