r"""Slice sampler for latent trait models with a completely random measure prior.

Zhu, Bouchard-Côté & Campbell, *Slice sampling for general completely random measures*, UAI 2020
(the steps and the choices that differ from the paper: ``docs/crm_slice.md``). The model (paper
Eq. 11): the atoms of a CRM are a series representation ``θ_k = τ(V_k, Γ_k)`` over the arrivals
``Γ_1 < Γ_2 < …`` of a unit-rate Poisson process with marks ``V_k ~ G``; each row ``n`` uses atom
``k`` ``X_nk ~ h(· | θ_k)`` times; the observations are ``y_n ~ N(Σ_k X_nk ψ_k, σ² I)`` with
traits ``ψ_k ~ N(μ_0, σ_0² I)``.

One sweep is :func:`numpyro_bnp.infer.features.crm.sweep.sweep_atoms` (slices, the thinned reveal
of new
atoms, the moves of the arrivals and the marks) around this model's two steps: the counts given
the slices (:func:`numpyro_bnp.infer.features.crm.counts.update_counts`: a two-point Gibbs draw per
entry for Bernoulli counts, a ±1 Metropolis step for Poisson / negative-binomial ones, or with
``collapsed_rows`` the rows with every trait integrated out,
:func:`numpyro_bnp.infer.features.crm.rows.collapsed_rows`; then exchange
moves ``X_nj ↔ X_nk``, then collapsed column moves with one atom's trait integrated out,
:func:`numpyro_bnp.infer.features.crm.births.collapsed_columns`: the births at high dimension) and
the conjugate matrix-normal draw of the traits (:func:`_gaussian_trait_step`). When the CRM's mass
is a latent site of the model (``alpha ~ Gamma(a, b)``), each sweep ends with a draw of the mass
from its exact conditional given the atoms (:func:`numpyro_bnp.infer.features.crm.atoms.draw_mass`:
conjugate for a Gamma prior).

The data, the noise variance and the trait prior are read from the model's arguments at every
sweep (:meth:`CRMSlice.sample`) and passed to the pure sweep :func:`_sweep` as a
:class:`~numpyro_bnp.infer.features.crm.model.CRMTraitNumbers`: as a block of
:class:`numpyro.infer.Gibbs` they follow the other blocks' sites (e.g. the noise scale, sampled
by NUTS), and a run continued on new data fits the new data.

Each state reports ``log_likelihood`` (``log p(y | X, ψ)``) and ``log_joint``, the log density of
the sampler's target at the state with the slice variables and the atoms after the last
instantiated one integrated out (module :mod:`numpyro_bnp.infer.features.crm.target`).

The beta–negative-binomial topic model has its own kernel,
:class:`~numpyro_bnp.infer.CRMTopicSlice`.
"""

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_bnp._checks import (
    is_concrete,
    nonnegative_int,
    observed_array,
    renamed_arguments,
    true_or_false,
)
from numpyro_bnp.infer.core.mcmc import SaturationError, with_deterministic
from numpyro_bnp.infer.core.tempering import (
    split_replicas,
    stack_replicas,
    temperature_ladder,
    temperatures_option,
)
from numpyro_bnp.infer.features.crm import target, tempering
from numpyro_bnp.infer.features.crm.atoms import draw_mass
from numpyro_bnp.infer.features.crm.births import collapsed_columns
from numpyro_bnp.infer.features.crm.counts import swap_moves, update_counts
from numpyro_bnp.infer.features.crm.kernel import CRMSliceKernel
from numpyro_bnp.infer.features.crm.model import CRMTraitNumbers
from numpyro_bnp.infer.features.crm.rows import collapsed_rows
from numpyro_bnp.infer.features.crm.sweep import (
    atom_fields,
    initial_atom_fields,
    live_theta,
    pad_atom_fields,
    pad_last,
    sweep_atoms,
)
from numpyro_bnp.infer.features.linear_gaussian import feature_posterior, sample_feature_posterior

__all__ = ["CRMSlice", "CRMSliceState"]

_REFRESH_ROWS = 64  # collapsed row moves: rows between recomputations of the trait posterior
_STARTS = ("empty", "prior")  # the first states CRMSlice(start=) offers


class CRMSliceState(NamedTuple):
    """State of :class:`CRMSlice` (one chain; vectorized chains add a leading axis).

    The fields of the atoms and the sweep (``i``, ``arrivals`` to ``accept_marks``, ``rng_key``)
    are those of every CRM slice sampler, :class:`~numpyro_bnp.infer.CRMTopicSliceState` too
    (filled by :func:`~numpyro_bnp.infer.features.crm.sweep.atom_fields`): they are documented here.

    :ivar i: sweeps done.
    :ivar z: the sample field: ``{count site: (N, C), trait site: (C, D)}`` plus ``{CRM site:
        (C,)}`` rates ``θ`` (0 beyond ``num_atoms``) and ``{mass site: ()}`` when the model has
        one, for a capacity ``C``.
    :ivar arrivals: ``(C,)`` arrival times ``Γ_k`` of the instantiated atoms (0 beyond).
    :ivar marks: ``(C,)`` uniform coordinates ``P_k = F_G(V_k)`` of the marks.
    :ivar num_atoms: instantiated atoms ``K`` (the last used atom).
    :ivar num_active: atoms used by at least one row.
    :ivar parity: 1 if ``X`` has an even number of non-zero entries (label-invariant test
        function of the paper, Section 5).
    :ivar num_slice_atoms: ``K* = max_n K_n`` of this sweep, before clipping to the capacity.
    :ivar saturated: True when ``K*`` exceeded the capacity (this sweep was truncated).
    :ivar num_saturated: saturated sweeps of this chain so far.
    :ivar accept_gamma: acceptance rate of this sweep's Γ moves.
    :ivar accept_marks: acceptance rate of this sweep's V moves.
    :ivar log_likelihood: ``log p(y | X, ψ)`` (0 for a prior-only model).
    :ivar log_joint: the log density of the sampler's target at the state,
        ``log p(y, X, ψ_{1:K}, Γ_{1:K}, P_{1:K})`` (see
        :func:`~numpyro_bnp.infer.features.crm.target.log_joint`; plus ``log p(α)`` with a mass
        site)
        with the slice variables, the atoms after the ``K``-th and their traits integrated out.
    :ivar rng_key: the PRNG key of the next sweep.
    :ivar replicas: with tempered replicas (``CRMSlice(..., temperatures=)``), the hot replicas
        (:class:`~numpyro_bnp.infer.features.crm.tempering.Replicas`); the fields above are those
        of the
        untempered replica (``β_0 = 1``), except ``saturated`` / ``num_saturated``, which count
        a sweep in which any replica saturated. ``None`` without tempering.
    :ivar swap_rate: ``(R - 1,)`` the probability ``min(1, exp(Δ_r))`` that replicas ``r`` and
        ``r + 1`` exchange their states, at every sweep for every pair (proposed or not): its
        mean over draws is the pair's swap acceptance rate (``None`` without tempering).
    :ivar swapped: ``(R - 1,)`` bool, the pairs exchanged in this sweep (``None`` without
        tempering).
    """

    i: jnp.ndarray
    z: dict
    arrivals: jnp.ndarray
    marks: jnp.ndarray
    num_atoms: jnp.ndarray
    num_active: jnp.ndarray
    parity: jnp.ndarray
    num_slice_atoms: jnp.ndarray
    saturated: jnp.ndarray
    num_saturated: jnp.ndarray
    accept_gamma: jnp.ndarray
    accept_marks: jnp.ndarray
    log_likelihood: jnp.ndarray
    log_joint: jnp.ndarray
    rng_key: jnp.ndarray
    replicas: object = None
    swap_rate: jnp.ndarray | None = None
    swapped: jnp.ndarray | None = None


class _Constants(NamedTuple):
    """What the pure functions of :class:`CRMSlice` close over, read once from the model."""

    spec: object  # CRMTraitModel
    atoms: object  # AtomSeries at the model's mass
    capacity: int
    gibbs: bool
    xi_scale: float
    n_swaps: int
    n_collapsed: int
    collapsed_rows: bool  # the count step moves rows with every trait integrated out
    shared_var: bool  # one noise variance and one trait variance for all columns
    betas: tuple | None = None  # the ladder of inverse temperatures (None: no tempering)
    mesh: object = None  # devices over which the replicas are sharded (None: one device)
    num_warmup: int = 0  # a Gibbs block's hot replicas follow the other blocks until then
    start: str = "empty"  # the first state: "empty" or "prior" (drawn from the prior)


# ---------------------------------------------------------------------------------------------
# pure functions of (constants, numbers, state)
# ---------------------------------------------------------------------------------------------
def _atoms_at(c, z):
    """The atom series at the state's mass (the model's, unless it has a mass site)."""
    return c.atoms if c.spec.mass_site is None else c.atoms.at_mass(z[c.spec.mass_site])


def _draw_traits(key, num, numbers, dim, dtype):
    """``num`` i.i.d. traits from the prior ``N(μ_0, σ_0² I)``: ``(num, D)``."""
    eps = random.normal(key, (num, dim), dtype)
    return numbers.trait_loc + jnp.sqrt(numbers.trait_var) * eps


def _gaussian_trait_step(key, x, numbers, shared_var, dim):
    """``Ψ | X, Y``: per column, ``N(P^{-1} b, P^{-1})`` with ``P = XᵀX/σ² + I/σ_0²`` (the
    conjugate matrix-normal draw, sweep step 7); prior draws without data. ``(C, D)``."""
    dtype = numbers.trait_var.dtype
    if numbers.obs is None:
        return _draw_traits(key, x.shape[1], numbers, dim, dtype)
    xf = x.astype(dtype)
    noise_var, trait_var = numbers.noise_var, numbers.trait_var
    if shared_var:  # one precision matrix for all columns
        noise_var, trait_var = noise_var[0], trait_var[0]
    mean, chol = feature_posterior(
        xf.T @ xf, xf.T @ numbers.obs, noise_var, trait_var, numbers.trait_loc
    )
    return sample_feature_posterior(key, mean, chol)


def _collapsed_rows_step(key, x, theta, slice_atoms, stop, atoms, c, numbers):
    """The count step's rows with every trait integrated out
    (:func:`~numpyro_bnp.infer.features.crm.rows.collapsed_rows`), then the traits from their
    conditional: ``(x, traits, residual)``."""
    num_rows, dtype = x.shape[0], atoms.dtype
    observed = numbers.obs is not None
    obs = numbers.obs if observed else jnp.zeros((num_rows, 0), dtype)
    x = collapsed_rows(
        key,
        x,
        obs,
        theta,
        slice_atoms,
        stop,
        atoms=atoms,
        noise_var=numbers.noise_var[0] if observed else jnp.ones((), dtype),
        trait_loc=numbers.trait_loc,
        trait_var=numbers.trait_var[0],
        xi_scale=c.xi_scale,
        refresh_every=_REFRESH_ROWS,
    )
    traits = _gaussian_trait_step(random.fold_in(key, 3), x, numbers, c.shared_var, c.spec.dim)
    residual = obs - x.astype(dtype) @ traits if observed else obs
    return x, traits, residual


def _log_terms(c, atoms, z, theta, arrivals, num_atoms, numbers):
    """``(log_likelihood, log_joint)`` of the state ``z`` (and its atoms) at ``numbers``."""
    spec = c.spec
    x, traits = z[spec.count_site], z[spec.trait_site]
    dtype = atoms.dtype
    if numbers.obs is None:
        log_lik = jnp.zeros((), dtype)
    else:
        residual = numbers.obs - x.astype(dtype) @ traits
        log_lik = target.log_likelihood(residual, numbers.noise_var).astype(dtype)
    log_joint = target.log_joint(
        atoms,
        theta,
        arrivals,
        num_atoms,
        x,
        traits,
        log_lik,
        trait_loc=numbers.trait_loc,
        trait_var=numbers.trait_var,
    )
    if spec.mass_site is not None:
        log_joint = log_joint + spec.mass_prior.log_prob(z[spec.mass_site]).astype(dtype)
    return log_lik, log_joint


def _init_chain(c, numbers, key):
    """A chain's first state, the mass (with a mass site) drawn from its prior. ``c.start ==
    "empty"``: no count, no instantiated atom, traits from the prior. ``"prior"``: the atoms and
    counts drawn from the prior
    (:meth:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries.draw_prior`),
    the traits from their conditional given the counts and the data; ``saturated`` marks a draw
    that did not fit the buffer."""
    spec, dtype, cap = c.spec, c.atoms.dtype, c.capacity
    key, k_psi = random.split(key)
    z = {}
    if spec.mass_site is not None:
        key, k_mass = random.split(key)
        z[spec.mass_site] = spec.mass_prior.sample(k_mass).astype(dtype)
    atoms = _atoms_at(c, z)
    if c.start == "prior":
        key, k_atoms = random.split(key)
        x, arrivals, marks, num_atoms, truncated = atoms.draw_prior(k_atoms, spec.num_rows, cap)
        traits = _gaussian_trait_step(k_psi, x, numbers, c.shared_var, spec.dim)
    else:
        x = jnp.zeros((spec.num_rows, cap), jnp.int32)
        arrivals, marks = jnp.zeros(cap, dtype), jnp.full(cap, 0.5, dtype)
        num_atoms, truncated = jnp.zeros((), jnp.int32), jnp.zeros((), bool)
        traits = _draw_traits(k_psi, cap, numbers, spec.dim, dtype)
    z[spec.count_site], z[spec.trait_site] = x, traits
    theta = live_theta(atoms, arrivals, marks, num_atoms)
    if spec.crm_site is not None:
        z[spec.crm_site] = theta
    log_lik, log_joint = _log_terms(c, atoms, z, theta, arrivals, num_atoms, numbers)
    return CRMSliceState(
        z=z,
        **initial_atom_fields(x, arrivals, marks, num_atoms),
        log_likelihood=log_lik,
        log_joint=log_joint,
        rng_key=key,
    )._replace(saturated=truncated)


def _sweep(c, numbers, state):
    """One sweep of one chain on the data and Gaussian parameters ``numbers``."""
    spec, dtype = c.spec, c.atoms.dtype
    key, *steps = random.split(state.rng_key, 8)
    x, traits = state.z[spec.count_site], state.z[spec.trait_site]
    atoms = _atoms_at(c, state.z)
    observed = numbers.obs is not None
    residual = numbers.obs - x.astype(dtype) @ traits if observed else jnp.zeros((x.shape[0], 0))
    noise_var = numbers.noise_var if observed else None

    def count_step(key, x, traits, theta, slice_atoms, stop):
        if c.collapsed_rows:  # X | θ, U, Y, then ψ | X, Y for the moves that read ψ
            x, traits, residual_x = _collapsed_rows_step(
                key, x, theta, slice_atoms, stop, atoms, c, numbers
            )
            x, residual_x = swap_moves(
                random.fold_in(key, 2),
                x,
                residual_x,
                traits,
                theta,
                slice_atoms,
                atoms=atoms,
                noise_var=noise_var,
                xi_scale=c.xi_scale,
                n_swaps=c.n_swaps,
            )
        else:
            x, residual_x = update_counts(
                key,
                x,
                residual,
                traits,
                theta,
                slice_atoms,
                stop,
                atoms=atoms,
                noise_var=noise_var,
                xi_scale=c.xi_scale,
                n_swaps=c.n_swaps,
            )
        if c.n_collapsed:  # the traits they draw are drawn again in the trait step
            x, residual_x, _, _ = collapsed_columns(
                random.fold_in(key, 1),
                x,
                residual_x,
                traits,
                theta,
                slice_atoms,
                stop,
                atoms=atoms,
                gaussian=(noise_var, numbers.trait_loc, numbers.trait_var),
                xi_scale=c.xi_scale,
                n_columns=c.n_collapsed,
            )
        return x, residual_x

    def trait_step(key, x, _):
        return _gaussian_trait_step(key, x, numbers, c.shared_var, spec.dim)

    swept = sweep_atoms(
        steps,
        atoms,
        x,
        traits,
        state.arrivals,
        state.marks,
        state.num_atoms,
        xi_scale=c.xi_scale,
        draw_traits=lambda key, num: _draw_traits(key, num, numbers, spec.dim, dtype),
        count_step=count_step,
        trait_step=trait_step,
    )
    z = {spec.count_site: swept.x, spec.trait_site: swept.traits}
    if spec.crm_site is not None:
        z[spec.crm_site] = swept.theta
    if spec.mass_site is not None:  # α | atoms; the atoms stay, their arrivals scale with α
        key, k_mass = random.split(key)
        mass = state.z[spec.mass_site]
        last = jnp.maximum(swept.num_atoms - 1, 0)
        last_arrival = jnp.where(swept.num_atoms > 0, swept.arrivals[last], 0.0)
        log_tail = atoms.log_no_later_use(last_arrival, swept.theta[last], swept.num_atoms)
        new = draw_mass(k_mass, spec.mass_prior, mass, last_arrival, swept.num_atoms, log_tail)
        new = new.astype(dtype)
        swept = swept._replace(arrivals=swept.arrivals * (new / mass))
        z[spec.mass_site] = new
        atoms = c.atoms.at_mass(new)
    log_lik, log_joint = _log_terms(
        c, atoms, z, swept.theta, swept.arrivals, swept.num_atoms, numbers
    )
    return CRMSliceState(
        i=state.i + 1,
        z=z,
        **atom_fields(swept, state.num_saturated),
        log_likelihood=log_lik,
        log_joint=log_joint,
        rng_key=key,
    )


def _refresh(c, numbers, state):
    """``log_likelihood`` and ``log_joint`` of ``state`` at new ``numbers`` (the sample kept)."""
    atoms = _atoms_at(c, state.z)
    theta = live_theta(atoms, state.arrivals, state.marks, state.num_atoms)
    log_lik, log_joint = _log_terms(
        c, atoms, state.z, theta, state.arrivals, state.num_atoms, numbers
    )
    return state._replace(log_likelihood=log_lik, log_joint=log_joint)


# ---------------------------------------------------------------------------------------------
# tempered replicas (module features.crm.tempering; docs/crm_slice.md, "Tempered replicas")
# ---------------------------------------------------------------------------------------------
_NUMBERS_AXES = CRMTraitNumbers(obs=None, noise_var=0, trait_loc=0, trait_var=0, num_rows=None)


def _replica_numbers(c, numbers, state):
    """The ``R`` replicas' numbers and the hot ones to keep in the state (``None`` outside
    Gibbs). A block of :class:`numpyro.infer.Gibbs` tempers the other blocks' current values
    during warm-up and keeps those of its end afterwards: the hot replicas' targets must not move
    with sites that the other blocks update from the untempered replica alone."""
    tempered = tempering.replica_numbers(numbers, c.betas)
    if not c.gibbs:
        return tempered, None
    hot = state.replicas
    warm = state.i < c.num_warmup
    keep = [
        jnp.where(warm, now[1:], kept)
        for now, kept in zip(
            (tempered.noise_var, tempered.trait_loc, tempered.trait_var),
            (hot.noise_var, hot.trait_loc, hot.trait_var),
            strict=True,
        )
    ]
    full = tempered._replace(
        noise_var=stack_replicas(tempered.noise_var[0], keep[0]),
        trait_loc=stack_replicas(tempered.trait_loc[0], keep[1]),
        trait_var=stack_replicas(tempered.trait_var[0], keep[2]),
    )
    return full, keep


def _tempered_init_chain(c, numbers, key):
    """A chain of ``R`` replicas, each started as :func:`_init_chain` says (``saturated``: any
    replica's prior draw did not fit the buffer)."""
    nums = tempering.replica_numbers(numbers, c.betas)
    keys = random.split(key, len(c.betas))
    states = jax.vmap(lambda n, k: _init_chain(c, n, k), in_axes=(_NUMBERS_AXES, 0))(nums, keys)
    cold, hot = split_replicas(states)
    cold = cold._replace(saturated=jnp.any(states.saturated))
    gaussian = (None, None, None)
    if c.gibbs:
        gaussian = (nums.noise_var[1:], nums.trait_loc[1:], nums.trait_var[1:])
    dtype = c.atoms.dtype
    num_pairs = len(c.betas) - 1
    return cold._replace(
        replicas=tempering.Replicas(hot, *gaussian),
        swap_rate=jnp.ones(num_pairs, dtype),
        swapped=jnp.zeros(num_pairs, bool),
    )


def _tempered_sweep(c, numbers, state):
    """One sweep of every replica (one vectorized program, sharded over ``c.mesh``), then the
    exchanges of adjacent replicas
    (:func:`~numpyro_bnp.infer.features.crm.tempering.swap_replicas`)."""
    nums, kept = _replica_numbers(c, numbers, state)
    cold = state._replace(replicas=None, swap_rate=None, swapped=None)
    stack = stack_replicas(cold, state.replicas.states)
    stack, gaussian = tempering.constrain_replicas(
        (stack, (nums.noise_var, nums.trait_loc, nums.trait_var)), c.mesh
    )  # the data (nums.obs) are not split over the devices
    nums = nums._replace(noise_var=gaussian[0], trait_loc=gaussian[1], trait_var=gaussian[2])
    swept = jax.vmap(lambda n, s: _sweep(c, n, s), in_axes=(_NUMBERS_AXES, 0))(nums, stack)
    swept = tempering.constrain_replicas(swept, c.mesh)
    # the exchange's key comes from the first replica's stream (it moves with its state)
    key, k_swap = random.split(swept.rng_key[0])
    swept = swept._replace(rng_key=swept.rng_key.at[0].set(key))
    swept, rate, swapped = tempering.swap_replicas(
        k_swap,
        swept,
        nums,
        numbers.obs,
        state.i % 2,
        count_site=c.spec.count_site,
        trait_site=c.spec.trait_site,
    )
    saturated = jnp.any(swept.saturated)
    new, hot = split_replicas(swept)
    gaussian = (None, None, None) if kept is None else tuple(kept)
    return new._replace(
        saturated=saturated,
        num_saturated=state.num_saturated + saturated.astype(jnp.int32),
        replicas=tempering.Replicas(hot, *gaussian),
        swap_rate=rate,
        swapped=swapped,
    )


# ---------------------------------------------------------------------------------------------
# the kernel
# ---------------------------------------------------------------------------------------------
class CRMSlice(CRMSliceKernel):
    r"""Slice sampler for CRM latent trait models, as a NumPyro MCMC kernel (module docstring).

    :param model: a NumPyro model with a CRM site and a count site (Bernoulli or
        negative-binomial counts of a ``BetaProcess``, Poisson counts of any CRM), or a
        ``RecursiveIBP`` site; a Normal trait site ``(K, D)``; a Normal observed site with mean
        ``X @ ψ`` (see :func:`~numpyro_bnp.infer.features.crm.model.read_crm_trait_model`), e.g.
        :func:`numpyro_bnp.models.linear_gaussian` or
        :func:`numpyro_bnp.models.beta_bernoulli_linear_gaussian`; optionally a latent scalar
        site that is the CRM's mass (``alpha ~ Gamma(a, b)``, updated given the atoms). Traced
        without data the model is sampled from its prior. The topic model
        :func:`numpyro_bnp.models.bnb_combinatorial_clustering` is
        :class:`~numpyro_bnp.infer.CRMTopicSlice`'s (a ``ValueError`` says so).
    :param str representation: series representation of the atoms: ``"bondesson"`` (default;
        ``θ = V e^{-Γ/c}``), ``"inverse_levy"`` (``θ = N^{-1}(Γ)``, decreasing atoms) or
        ``"rejection"`` (``θ = ν̃^{-1}(Γ)`` kept when ``V <= dν/dν̃``, else 0; ``V ~ Unif(0, 1)``,
        Campbell et al. 2019) — each where the prior has it
        (:meth:`CompletelyRandomMeasure.series`).
    :param float xi_scale: ``Δ_ξ`` of the slice sequence ``ξ(k) = exp(-k/Δ_ξ)``; it changes the
        speed, never the target.
    :param int max_features: capacity of the atom buffer (``max_atoms`` before); ``None``: the
        number of atoms of the model's CRM site (its ``truncation``, the ``max_features`` of the
        ready models) plus ``Δ_ξ (log N + 6)``.
    :param int n_gamma: Metropolis moves per arrival time and sweep (paper: 10).
    :param float gamma_step: scale of the Γ random walk, in units of ``c / sqrt(1 + Σ_n X_nk)``
        (``c`` the Bondesson constant): about the posterior spread of ``Γ_k``.
    :param int n_marks: Metropolis moves per mark and sweep.
    :param float mark_step: scale ``Δ_V`` of the logit random walk of the marks (paper: 0.3).
    :param int n_swaps: exchange moves per row and sweep after step 3 (``X_nj ↔ X_nk``; not in
        the paper, see :func:`~numpyro_bnp.infer.features.crm.counts.swap_moves`); 0 gives the
        paper's sweep.
    :param int n_collapsed: collapsed column moves per sweep after the exchange moves (not in
        the paper; ``docs/crm_slice.md``, "Births at high dimension"): the column ``X_{·k}`` of
        an atom drawn uniformly among the instantiated ones, with its trait ``ψ_k`` integrated
        out, then ``ψ_k`` from its conditional
        (:func:`~numpyro_bnp.infer.features.crm.births.collapsed_column`). A new atom's trait drawn
        from the prior fits no row when ``D`` is large (digits, ``D = 64``): without these moves new
        features are almost never born there; on digits ``n_collapsed=5, xi_scale=3`` finds
        as many features as :class:`~numpyro_bnp.infer.AcceleratedIBPGibbs`. Each costs ``N``
        sequential ``O(D)`` steps. Default 0 (the paper's count step): on low-dimensional data
        a birth seeded by one row's residual can keep a blend of features as a feature of its
        own (measured in the doc).
    :param bool collapsed_rows: the count step moves each row's entries with every trait
        integrated out (not in the paper; ``docs/crm_slice.md``, "Collapsed rows";
        :func:`~numpyro_bnp.infer.features.crm.rows.collapsed_rows`), then draws the traits from
        their conditional for the moves after it, instead of moving each entry given the traits. A
        feature's trait and its rows then change together, as in the collapsed sampler of
        Doshi-Velez & Ghahramani (2009): on digits the held-out score climbs faster, in sweeps
        and in time (measured in the doc). Each row costs ``O(C² + K* (C + D))`` for a
        capacity ``C``. Needs Bernoulli counts (a beta process or ``RecursiveIBP`` site) and
        one noise variance and one trait variance for all columns (a ``ValueError`` says so).
        Default ``False``.
    :param temperatures: tempered replicas (parallel tempering: Geyer 1991; Earl & Deem 2005;
        ``docs/crm_slice.md``, "Tempered replicas";
        :mod:`numpyro_bnp.infer.features.crm.tempering`):
        ``None`` (default) runs one replica; a sequence of inverse temperatures
        ``1 = β_0 > β_1 > … > 0`` runs one replica per ``β_r``, that of ``β_r`` on the model with
        noise variance ``σ²/β_r`` (the likelihood raised to ``β_r``), all swept as one vectorized
        program; after each sweep adjacent replicas exchange their states with probability
        ``min(1, exp((β_r - β_{r+1})(ℓ_{r+1} - ℓ_r)))``, ``ℓ`` the untempered log-likelihood.
        An int ``R >= 2`` gives ``R`` replicas on the geometric ladder
        ``β_r = exp(-r √(2/(N D)))``. The samples, ``num_active``, ``log_joint`` and the other
        fields are the untempered replica's; ``swap_rate`` and ``swapped`` (``extra_fields``)
        report the exchanges (:class:`CRMSliceState`). As a block of
        :class:`numpyro.infer.Gibbs` the other blocks see the untempered replica only, and the
        hot replicas keep the noise and trait prior of the end of warm-up.
    :param bool shard_replicas: with several devices (``jax.devices()``), lay the replicas out
        over the largest number of them that divides ``R`` (default ``True``). Set ``False``
        when the chains already take the devices (``chain_method="parallel"``).
    :param str start: the first state of each chain: ``"empty"`` (default; no instantiated
        atom, the first sweeps reveal them) or ``"prior"``: the atoms and every row's counts
        drawn from the prior (the series up to its last used atom,
        :meth:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries.draw_prior`), the traits from their
        conditional given those counts and the data — as
        :class:`~numpyro_bnp.infer.AcceleratedIBPGibbs` starts from an IBP draw. On digits
        (``D = 64``) chains started from the prior reach a better fit sooner (measured in
        ``docs/crm_slice.md``, "Starting from a prior draw"). The target is the same either way.
    :param str on_saturation: a sweep that needs more atoms than the buffer holds ``"warn"`` s
        (a ``RuntimeWarning`` on the host, again each time a chain's count of such sweeps
        doubles) or raises (``"error"``: a ``RuntimeError`` stops the run).

    **Example**

    .. code-block:: python

        >>> import numpy as np
        >>> from jax import random
        >>> from numpyro.infer import MCMC
        >>> from numpyro_bnp.infer import CRMSlice
        >>> from numpyro_bnp.models import linear_gaussian
        >>> rng = np.random.default_rng(0)
        >>> y = (rng.random((100, 2)) < 0.5) @ rng.normal(size=(2, 5)) + 0.1 * rng.normal(
        ...     size=(100, 5))
        >>> mcmc = MCMC(CRMSlice(linear_gaussian), num_warmup=200, num_samples=200,
        ...             progress_bar=False)
        >>> mcmc.run(random.PRNGKey(0), y, num_obs=100, dim=5, sigma_o=0.1)
        >>> int(np.median(mcmc.get_extra_fields()["num_active"]))
        2
    """

    observation = "linear_gaussian"
    other_kernel = "CRMTopicSlice"
    fixed_options = (
        *CRMSliceKernel.fixed_options,
        "n_swaps",
        "n_collapsed",
        "collapsed_rows",
        "temperatures",
        "shard_replicas",
        "start",
    )

    @renamed_arguments(max_atoms="max_features")
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
        n_swaps=5,
        n_collapsed=0,
        collapsed_rows=False,
        temperatures=None,
        shard_replicas=True,
        start="empty",
        on_saturation="warn",
    ):
        super().__init__(
            model,
            representation=representation,
            xi_scale=xi_scale,
            max_features=max_features,
            n_gamma=n_gamma,
            gamma_step=gamma_step,
            n_marks=n_marks,
            mark_step=mark_step,
            on_saturation=on_saturation,
        )
        self.n_swaps = nonnegative_int(n_swaps, "n_swaps")
        self.n_collapsed = nonnegative_int(n_collapsed, "n_collapsed")
        self.collapsed_rows = true_or_false(collapsed_rows, "collapsed_rows")
        self.temperatures = temperatures_option(temperatures)
        self.shard_replicas = true_or_false(shard_replicas, "shard_replicas")
        if start not in _STARTS:
            raise ValueError(f"start must be one of {_STARTS}, got {start!r}")
        self.start = start
        self._num_warmup = 0

    @property
    def temperature_ladder(self):
        """The inverse temperatures ``(β_0 = 1, β_1, …)`` of the replicas (``None`` without
        tempering, or before :meth:`init` for an int ``temperatures``)."""
        if self.constants is not None:
            return self.constants.betas
        return None if isinstance(self.temperatures, int) else self.temperatures

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """A chain (or a batch of chains) with no instantiated atom, or drawn from the prior
        (``start="prior"``; with ``temperatures``: ``R`` such replicas); see
        :meth:`CRMSliceKernel.init`. A prior draw that needs more atoms than the buffer holds is
        reported as ``on_saturation`` says."""
        self._num_warmup = int(num_warmup)
        state = super().init(rng_key, num_warmup, init_params, model_args, model_kwargs)
        truncated = np.atleast_1d(np.asarray(state.saturated))
        if truncated.any():
            message = (
                f"CRMSlice(start='prior'): the prior draw of the first state of chain(s) "
                f"{np.flatnonzero(truncated).tolist()} used atoms beyond the buffer of "
                f"{self.constants.capacity}; they were left out (the chains still target the "
                "posterior, from a truncated start). Build CRMSlice(..., max_features=) larger."
            )
            if self.on_saturation == "error":
                raise SaturationError(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return state

    @renamed_arguments(max_atoms="max_features")
    def grow(self, state, max_features=None):
        """Pad ``state`` (one chain or a batch) to capacity ``max_features`` (default: double;
        ``max_atoms`` before).

        Between runs: ``mcmc.post_warmup_state = kernel.grow(mcmc.last_state)`` then
        ``mcmc.run(...)`` continues the chains with the larger buffer (one recompilation).
        """
        return super().grow(state, max_features)

    def postprocess_fn(self, model_args, model_kwargs):
        """Zero the traits of unused atoms (their values are prior draws, not posterior), then add
        the model's deterministic sites at the sampled values."""
        spec = self.spec

        def fn(z):
            used = jnp.any(z[spec.count_site] != 0, axis=-2)
            out = dict(z)
            out[spec.trait_site] = jnp.where(used[..., None], z[spec.trait_site], 0.0)
            return out

        return with_deterministic(self._model, model_args, model_kwargs, fn)

    def refresh(self, state, model_args, model_kwargs):
        """The other Gibbs blocks moved: recompute ``log_likelihood`` and ``log_joint`` at the new
        noise variance and trait prior (nothing else depends on them)."""
        if not self.constants.gibbs:
            return state
        numbers = self._data(self.constants, state, model_args, model_kwargs)
        return _refresh(self.constants, numbers, state)

    # ------------------------------------------------------------------ kernel pieces
    def _constants(self, spec, atoms, capacity, gibbs):
        shared = bool(
            np.all(spec.noise_var == spec.noise_var[0])
            and np.all(spec.trait_var == spec.trait_var[0])
        )
        if self.collapsed_rows and (atoms.likelihood != "bernoulli" or not shared):
            raise ValueError(
                "collapsed_rows=True needs Bernoulli counts (a beta process or RecursiveIBP "
                "site) and one noise variance and one trait variance for all columns; this "
                f"model has {atoms.likelihood} counts"
                + ("" if shared else " and per-column variances")
            )
        cells = spec.num_rows * spec.dim if spec.obs_value is not None else 1
        betas = temperature_ladder(self.temperatures, cells)
        mesh = None if betas is None else tempering.replica_mesh(len(betas), self.shard_replicas)
        return _Constants(
            spec,
            atoms,
            capacity,
            gibbs,
            self.xi_scale,
            self.n_swaps,
            self.n_collapsed,
            self.collapsed_rows,
            shared,
            betas,
            mesh,
            self._num_warmup,
            self.start,
        )

    def _state_rows(self, state):
        return state.z[self.spec.count_site].shape[-2]

    def _data(self, c, state, model_args, model_kwargs):
        """The data, noise variance and trait prior at these arguments (and the other Gibbs
        blocks' values), checked against the state: a :class:`CRMTraitNumbers`."""
        spec, dtype, cap = c.spec, c.atoms.dtype, c.capacity
        rows = spec.num_rows if state is None else self._state_rows(state)
        # concrete values (not staged into the compiled sweep): the data are checked here
        with jax.ensure_compile_time_eval():
            template = {
                spec.count_site: jnp.zeros((rows, cap), jnp.int32),
                spec.trait_site: jnp.zeros((cap, spec.dim), dtype),
            }
            if spec.crm_site is not None:
                template[spec.crm_site] = jnp.zeros(cap, dtype)
            if spec.mass_site is not None:
                template[spec.mass_site] = jnp.ones((), dtype)
            numbers = spec.numbers(template, model_args, model_kwargs)
        self._check_rows(state, numbers.num_rows, "counts")
        obs = numbers.obs
        if obs is not None:
            name = f"the data of the observed site {spec.obs_site!r}"
            if is_concrete(obs):
                observed_array(obs, name, dtype=dtype, dim=spec.dim)
            elif jnp.shape(obs)[-1] != spec.dim:
                raise ValueError(f"{name} must have {spec.dim} columns, got {jnp.shape(obs)}")
            obs = jnp.asarray(obs, dtype)
        return CRMTraitNumbers(
            obs=obs,
            noise_var=jnp.asarray(numbers.noise_var, dtype),
            trait_loc=jnp.asarray(numbers.trait_loc, dtype),
            trait_var=jnp.asarray(numbers.trait_var, dtype),
            num_rows=None,  # checked above; the compiled sweep takes arrays only
        )

    def _init_chain(self, c, numbers, key):
        if c.betas is None:
            return _init_chain(c, numbers, key)
        return _tempered_init_chain(c, numbers, key)

    def _sweep(self, c, numbers, state):
        if c.betas is None:
            return _sweep(c, numbers, state)
        return _tempered_sweep(c, numbers, state)

    def _pad(self, c, state, pad):
        spec = c.spec
        z = dict(state.z)
        z[spec.trait_site] = pad_last(z[spec.trait_site], -2, pad)
        for name in (spec.count_site, spec.crm_site):
            if name is not None:
                z[name] = pad_last(z[name], -1, pad)
        state = state._replace(z=z)
        if state.replicas is None:
            return state
        hot = pad_atom_fields(self._pad(c, state.replicas.states, pad), pad)
        return state._replace(replicas=state.replicas._replace(states=hot))
