r"""One sweep of the CRM slice sampler over the atom series, shared by its kernels.

Zhu, Bouchard-Côté & Campbell, *Slice sampling for general completely random measures*, UAI 2020
(the steps and the choices that differ from the paper: ``docs/crm_slice.md``). Both kernels —
:class:`~numpyro_bnp.infer.CRMSlice` (count site, Normal traits) and
:class:`~numpyro_bnp.infer.CRMTopicSlice` (latent word counts, Dirichlet topics) — run the same
sweep over the atoms ``θ_k = τ(V_k, Γ_k)``
(:class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries`)
and differ only in how the counts ``X`` and the traits ``ψ`` move given the atoms:
:func:`sweep_atoms` is the sweep with those two steps as arguments.

Slice variables ``U_n ~ Unif[0, ξ(k_n)]`` with ``k_n`` the last atom used by row ``n`` and
``ξ(k) = exp(-k / Δ_ξ)`` restrict row ``n`` to the atoms ``k <= K_n = ⌊-Δ_ξ log U_n⌋``, so only
finitely many atoms are ever instantiated; the rest (the tail) is integrated out exactly. One sweep
(the paper's steps, in this order, which matters; the slice density is paper Eq. 25):

1. ``U``: ``U_n = ξ(k_n) · Unif(0, 1)``, hence ``K_n = k_n + ⌊Δ_ξ E_n⌋`` with ``E_n ~ Exp(1)``;
2. reveal atoms up to ``K* = max_n K_n`` from the tail *given that no row uses them*: the thinned
   Poisson process with intensity ``du G(dv) Π_n h(0 | τ(v, u))``;
3. ``X`` given the slices (the kernel's count step);
4. prune the trailing unused atoms back into the tail, reveal one sentinel atom;
5. ``Γ``: Metropolis for each interior arrival, flat on ``(Γ_{k-1}, Γ_{k+1})`` times the counts'
   likelihood; 6. ``V``: logit random walk on the marks;
7. ``ψ`` given ``X`` (the kernel's trait step);
8. drop the sentinel.

Atoms live in a fixed-capacity buffer of ``C`` slots; atoms ``k < num_atoms`` are instantiated. A
sweep whose slices ask for more than ``C`` atoms is *saturated*: it runs on the truncated model.
"""

from typing import NamedTuple

import jax.numpy as jnp
from jax import lax, random

from numpyro_bnp._math import count_parity
from numpyro_bnp.distributions.ibp import num_active_features

__all__ = [
    "SweepResult",
    "atom_fields",
    "initial_atom_fields",
    "live_theta",
    "num_used_atoms",
    "pad_atom_fields",
    "pad_last",
    "sweep_atoms",
]


class SweepResult(NamedTuple):
    """The atoms, counts and traits after :func:`sweep_atoms`.

    :ivar x: ``(N, C)`` counts; :ivar traits: ``(C, D)`` (prior draws beyond ``num_atoms``);
    :ivar aux: what the count step returned besides ``x`` (passed to the trait step);
    :ivar arrivals: ``(C,)`` ``Γ`` (0 beyond ``num_atoms``); :ivar marks: ``(C,)`` uniform marks
        (0.5 beyond); :ivar theta: ``(C,)`` atoms (0 beyond);
    :ivar num_atoms: instantiated atoms (the last used one); :ivar num_slice_atoms: ``max_n K_n``
        before clipping to the capacity; :ivar saturated: ``num_slice_atoms > C``;
    :ivar accept_gamma, accept_marks: acceptance rates of the Γ and V moves.
    """

    x: jnp.ndarray
    traits: jnp.ndarray
    aux: object
    arrivals: jnp.ndarray
    marks: jnp.ndarray
    theta: jnp.ndarray
    num_atoms: jnp.ndarray
    num_slice_atoms: jnp.ndarray
    saturated: jnp.ndarray
    accept_gamma: jnp.ndarray
    accept_marks: jnp.ndarray


def atom_fields(swept, num_saturated):
    """The fields that every CRM slice sampler's state takes from a sweep, as keyword arguments:
    the atoms and the sweep's diagnostics (:class:`~numpyro_bnp.infer.CRMSliceState` says what
    they mean); ``num_saturated`` is the count before this sweep."""
    return dict(
        arrivals=swept.arrivals,
        marks=swept.marks,
        num_atoms=swept.num_atoms,
        num_active=num_active_features(swept.x).astype(jnp.int32),
        parity=count_parity(swept.x),
        num_slice_atoms=swept.num_slice_atoms,
        saturated=swept.saturated,
        num_saturated=num_saturated + swept.saturated.astype(jnp.int32),
        accept_gamma=swept.accept_gamma,
        accept_marks=swept.accept_marks,
    )


def initial_atom_fields(x, arrivals, marks, num_atoms):
    """:func:`atom_fields` of a chain's first state (no sweep done), with counts ``x`` ``(N, C)``
    and the given atoms; plus ``i = 0``."""
    zero = jnp.zeros((), arrivals.dtype)
    return dict(
        i=jnp.zeros((), jnp.int32),
        arrivals=arrivals,
        marks=marks,
        num_atoms=num_atoms,
        num_active=num_active_features(x).astype(jnp.int32),
        parity=count_parity(x),
        num_slice_atoms=jnp.zeros((), jnp.int32),
        saturated=jnp.zeros((), bool),
        num_saturated=jnp.zeros((), jnp.int32),
        accept_gamma=zero,
        accept_marks=zero,
    )


def pad_atom_fields(state, pad):
    """``state`` with ``pad`` more empty atom slots in its shared fields (``arrivals``,
    ``marks``) and ``saturated`` cleared; the kernel pads its own fields."""
    return state._replace(
        arrivals=pad_last(state.arrivals, -1, pad),
        marks=pad_last(state.marks, -1, pad, 0.5),
        saturated=jnp.zeros_like(state.saturated),
    )


def live_theta(atoms, arrivals, marks, num_atoms):
    """``(C,)`` atoms ``θ_k = τ(V_k, Γ_k)`` of the ``num_atoms`` instantiated atoms, 0 beyond."""
    live = jnp.arange(arrivals.shape[-1]) < num_atoms
    return jnp.where(live, atoms.theta(jnp.where(live, arrivals, 1.0), marks), 0.0)


def num_used_atoms(x):
    """The last atom (1-based) some row of ``x`` ``(N, C)`` uses, 0 if none: int32."""
    index = jnp.arange(1, x.shape[-1] + 1, dtype=jnp.int32)
    return jnp.max(jnp.where(jnp.any(x > 0, axis=-2), index, 0)).astype(jnp.int32)


def pad_last(x, axis, pad, value=0):
    """``x`` padded with ``pad`` entries of ``value`` at the end of ``axis``."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=value)


def _reveal(atoms, key, arrivals, marks, traits, start, stop, draw_traits):
    """Instantiate atoms ``start..stop-1`` (0-based) from the thinned tail, with prior traits."""

    def body(j, carry):
        arrivals, marks, traits, key = carry
        key, k_thin, k_trait = random.split(key, 3)
        previous = jnp.where(j > 0, arrivals[jnp.maximum(j - 1, 0)], 0.0)
        u, mark = atoms.thin(k_thin, previous)
        trait = draw_traits(k_trait, 1)[0]
        return arrivals.at[j].set(u), marks.at[j].set(mark), traits.at[j].set(trait), key

    init = (arrivals, marks, traits, key)
    arrivals, marks, traits, _ = lax.fori_loop(start, stop, body, init)
    return arrivals, marks, traits


def sweep_atoms(
    keys,
    atoms,
    x,
    traits,
    arrivals,
    marks,
    num_atoms,
    *,
    xi_scale,
    draw_traits,
    count_step,
    trait_step,
):
    """One sweep (module docstring, steps 1-8) around the kernel's count and trait steps.

    :param keys: seven PRNG keys, those of steps 1, 2, 3, 4, 5, 6 and 7;
    :param atoms: the :class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries` of the prior;
    :param x: ``(N, C)`` counts; :param traits: ``(C, D)``; :param arrivals, marks: ``(C,)``;
    :param num_atoms: instantiated atoms; :param float xi_scale: ``Δ_ξ``;
    :param draw_traits: ``(key, num) -> (num, D)`` prior draws of traits;
    :param count_step: ``(key, x, traits, theta, slice_atoms, stop) -> (x, aux)``, step 3:
        ``slice_atoms`` ``(N,)`` the ``K_n``, ``stop = max_n K_n``;
    :param trait_step: ``(key, x, aux) -> traits``, step 7.
    :return: a :class:`SweepResult`.
    """
    cap = x.shape[1]
    index = jnp.arange(1, cap + 1, dtype=jnp.int32)
    k_u, k_ext, k_x, k_sent, k_g, k_v, k_psi = keys

    # 1. slice variables: K_n = k_n + floor(Δ_ξ E_n)
    last = jnp.max(jnp.where(x > 0, index, 0), axis=1).astype(jnp.int32)
    e = random.exponential(k_u, last.shape, atoms.dtype)
    wanted = last + jnp.floor(xi_scale * e).astype(jnp.int32)
    slice_atoms = jnp.minimum(wanted, cap).astype(jnp.int32)
    k_star = jnp.max(slice_atoms)

    # 2. reveal atoms up to K* from the thinned tail
    arrivals, marks, traits = _reveal(
        atoms, k_ext, arrivals, marks, traits, num_atoms, k_star, draw_traits
    )
    theta = live_theta(atoms, arrivals, marks, jnp.maximum(num_atoms, k_star))

    # 3. counts, restricted by the slices
    x, aux = count_step(k_x, x, traits, theta, slice_atoms, k_star)

    # 4. prune trailing unused atoms, reveal one sentinel
    num_atoms = num_used_atoms(x)
    with_sentinel = jnp.minimum(num_atoms + 1, cap).astype(jnp.int32)
    arrivals, marks, traits = _reveal(
        atoms, k_sent, arrivals, marks, traits, num_atoms, with_sentinel, draw_traits
    )

    # 5.-6. arrivals and marks
    totals = jnp.sum(x, axis=0).astype(atoms.dtype)
    arrivals, accept_gamma = atoms.move_arrivals(k_g, arrivals, marks, totals, with_sentinel)
    marks, accept_marks = atoms.move_marks(k_v, arrivals, marks, totals, with_sentinel)

    # 7. traits; 8. drop the sentinel
    traits = trait_step(k_psi, x, aux)
    live = index <= num_atoms
    arrivals = jnp.where(live, arrivals, 0.0)
    marks = jnp.where(live, marks, 0.5)
    return SweepResult(
        x=x,
        traits=traits,
        aux=aux,
        arrivals=arrivals,
        marks=marks,
        theta=live_theta(atoms, arrivals, marks, num_atoms),
        num_atoms=num_atoms,
        num_slice_atoms=jnp.max(wanted).astype(jnp.int32),
        saturated=jnp.max(wanted) > cap,
        accept_gamma=accept_gamma,
        accept_marks=accept_marks,
    )
