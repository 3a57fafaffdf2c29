r"""Collapsed column moves of :class:`~numpyro_bnp.infer.CRMSlice`: births at any dimension.

For the Normal latent trait models of the slice sampler (Zhu, Bouchard-Côté & Campbell, *Slice
sampling for general completely random measures*, UAI 2020, Eq. 11; ``docs/crm_slice.md``,
"Births at high dimension"): an atom revealed from the tail gets its trait ``ψ_k`` from the prior
``N(μ_0, σ_0² I)``, and at large ``D`` such a trait fits no row, so the count step (which
conditions on ``ψ_k``) almost never switches a row onto a new atom. These moves update a whole
column ``X_{·k}`` with ``ψ_k`` integrated out, then draw ``ψ_k`` from its conditional: a
collapsed block Gibbs update of ``(X_{·k}, ψ_k)`` given the rest of the state and the slice
variables ``U``.

Given ``U`` (paper Eq. 25) the target of the column and the trait is

.. math::
    p(X_{·k}, ψ_k \mid ·) \propto N(ψ_k; μ_0, σ_0^2 I) \prod_n h(X_{nk} \mid θ_k)\,
    N(y_n; X_n ψ, σ^2 I)\, \frac{1[k_n \le K_n]}{ξ(k_n)},

``k_n`` the last atom row ``n`` uses, ``K_n`` its slice bound and ``ξ(k) = e^{-k/Δ_ξ}``.
Integrating ``ψ_k`` out couples the rows through ``S = Σ_n X_nk²`` and ``T = Σ_n X_nk r_n``
(``r_n = y_n - Σ_{j≠k} X_nj ψ_j``, fixed during the move): per column ``d``,
``ψ_kd | X_{·k} ~ N(m_d, 1/P_d)`` with ``P_d = S/σ_d² + 1/σ_{0d}²`` and
``m_d = (T_d/σ_d² + μ_{0d}/σ_{0d}²)/P_d``. Visiting the rows in a random order, entry ``X_nk``
moves given the others with the statistics ``(m, P)`` of the other rows of the column: the
predictive of row ``n`` with count ``x`` is ``N(r_n; x m, (σ² + x²/P) I)``, so

.. math::
    \frac{P(X_{nk} = 1 \mid ·)}{P(X_{nk} = 0 \mid ·)} = \frac{θ_k}{1-θ_k}\,
    \frac{N(r_n; m, σ^2 + 1/P)}{N(r_n; 0, σ^2)}\,
    \frac{ξ(k_n^{-k})}{ξ(\max(k, k_n^{-k}))}, \qquad k \le K_n,

``k_n^{-k}`` the last atom of row ``n`` other than ``k`` (``X_nk = 0`` for ``k > K_n``); Poisson
and negative-binomial counts take a ±1 Metropolis step with the same three ratios. A column that
no row uses is a birth when a row switches on (the trait then fits it: the Occam factor
``(1 + σ_0²/σ²)^{-D/2}`` against the fit ``|r_n|² σ_0² / 2σ²(σ² + σ_0²)``, both ``O(D)``); a
column whose last row switches off is a death. The atom is chosen uniformly among the
instantiated ones, independently of its column, so the choice and the update together keep the
target (a random-scan Gibbs update). Without data (a prior-only model) the predictive ratio is 1
and ``ψ_k`` is drawn from its prior.
"""

import copy
from typing import NamedTuple

import jax.numpy as jnp
from jax import lax, random


class ColumnInfo(NamedTuple):
    """What the collapsed column moves of one sweep did (scalars, int32).

    :ivar births: moves that turned an unused atom into a used one.
    :ivar deaths: moves that left a used atom unused.
    :ivar changed: entries of ``X`` changed.
    """

    births: jnp.ndarray
    deaths: jnp.ndarray
    changed: jnp.ndarray


def _log_predictive(r, count, mean, precision, noise_var):
    """``log N(r; c m, (σ² + c²/P) I) - log N(r; 0, σ² I)`` of a row with count ``c``:
    ``r``, ``mean``, ``precision``, ``noise_var`` ``(D,)``, ``count`` a scalar."""
    var = noise_var + count**2 / precision
    return -0.5 * jnp.sum(
        jnp.log(var / noise_var) + (r - count * mean) ** 2 / var - r**2 / noise_var
    )


def collapsed_column(key, k, x, residual, traits, theta, slice_atoms, *, atoms, gaussian, xi_scale):
    r"""Update column ``k`` of ``X`` with ``ψ_k`` integrated out, then draw ``ψ_k`` (module
    docstring).

    :param key: PRNG key.
    :param k: the atom (0-based, a traced int32 scalar), ``k < K*``.
    :param x: ``(N, C)`` counts; :param residual: ``(N, D)`` ``y - Xψ`` (``(N, 0)`` without
        data); :param traits: ``(C, D)``; :param theta: ``(C,)`` atoms; :param slice_atoms:
        ``(N,)`` slice bounds ``K_n``.
    :param atoms: the :class:`~numpyro_bnp.infer.features.crm.atoms.AtomSeries` (count law ``h``).
    :param gaussian: ``(noise_var, trait_loc, trait_var)``, each ``(D,)``: ``σ²``, ``μ_0``,
        ``σ_0²``; ``noise_var`` is ``None`` for a prior-only model.
    :param xi_scale: ``Δ_ξ``.
    :return: ``(x, residual, traits, info)``: the new counts, residual and traits (row ``k``
        of ``traits`` redrawn, the others unchanged) and a :class:`ColumnInfo`.
    """
    noise_var, trait_loc, trait_var = gaussian
    observed, dtype = noise_var is not None, atoms.dtype
    n = x.shape[0]
    index = jnp.arange(1, x.shape[1] + 1, dtype=jnp.int32)
    key_order, key_prop, key_acc, key_trait = random.split(key, 4)
    column = lax.dynamic_index_in_dim(x, k, axis=1, keepdims=False)
    trait, th = traits[k], theta[k]
    rest = residual + column.astype(dtype)[:, None] * trait if observed else residual
    cf = column.astype(dtype)
    stat_s = jnp.sum(cf * cf)
    stat_t = cf @ rest if observed else jnp.zeros((0,), dtype)
    # the rows in a random order; per row: k_n^{-k} (the last atom other than k, fixed during
    # the move), whether k <= K_n, the residual without atom k, the count law's r_n
    order = random.permutation(key_order, n)
    other_last = jnp.max(jnp.where((x > 0) & (index != k + 1), index, 0), axis=1)[order]
    allowed = (k + 1 <= slice_atoms)[order]
    totals = None if atoms.total_count is None else atoms.total_count[order]
    log_u = jnp.log(random.uniform(key_acc, (n,), dtype))
    steps = jnp.where(random.bernoulli(key_prop, 0.5, (n,)), 1, -1).astype(x.dtype)

    def log_weight(count, row):
        """``log h(c | θ_k) - log ξ(k_n(c))`` of a row, up to c-free terms."""
        row_atoms = atoms
        if totals is not None:  # negative-binomial counts: the row's own r_n
            row_atoms = copy.copy(atoms)
            row_atoms.total_count = row["total"]
        last = row["other_last"]
        last = jnp.where((count > 0) & (last < k + 1), k + 1, last)
        return row_atoms.entry_logh(count[None], th)[0] + last / xi_scale

    def log_predictive(count, r, stat_s, stat_t):
        """The row's predictive with count ``c`` over that with count 0 (0 without data)."""
        if not observed:
            return jnp.zeros((), dtype)
        precision = stat_s / noise_var + 1.0 / trait_var
        mean = (stat_t / noise_var + trait_loc / trait_var) / precision
        return _log_predictive(r, count.astype(dtype), mean, precision, noise_var)

    def visit(stats, row):
        stat_s, stat_t = stats
        old, r = row["old"], row["rest"]
        of = old.astype(dtype)
        s_other = stat_s - of * of
        t_other = stat_t - of * r if observed else stat_t
        if atoms.likelihood == "bernoulli":
            one, zero = jnp.ones_like(old), jnp.zeros_like(old)
            logit = (
                log_weight(one, row)
                - log_weight(zero, row)
                + log_predictive(one, r, s_other, t_other)
            )
            new = (row["log_u"] < -jnp.logaddexp(0.0, -logit)).astype(old.dtype)
        else:  # ±1 Metropolis (symmetric; a step below 0 is rejected)
            prop = jnp.maximum(old + row["step"], 0)
            log_ratio = (
                log_weight(prop, row)
                - log_weight(old, row)
                + log_predictive(prop, r, s_other, t_other)
                - log_predictive(old, r, s_other, t_other)
            )
            ok = (old + row["step"] >= 0) & (row["log_u"] < log_ratio)
            new = jnp.where(ok, prop, old)
        new = jnp.where(row["allowed"], new, old)
        nf = new.astype(dtype)
        stat_t = t_other + nf * r if observed else stat_t
        return (s_other + nf * nf, stat_t), new

    rows = dict(old=column[order], rest=rest[order], other_last=other_last, allowed=allowed)
    rows.update(log_u=log_u, step=steps)
    if totals is not None:
        rows["total"] = totals
    (stat_s, stat_t), visited = lax.scan(visit, (stat_s, stat_t), rows)
    new_column = jnp.zeros_like(column).at[order].set(visited)
    eps = random.normal(key_trait, trait.shape, dtype)
    if observed:  # ψ_k | X_{·k}, rest: N(m, 1/P) per column
        precision = stat_s / noise_var + 1.0 / trait_var
        mean = (stat_t / noise_var + trait_loc / trait_var) / precision
        new_trait = mean + eps / jnp.sqrt(precision)
        residual = rest - new_column.astype(dtype)[:, None] * new_trait
    else:
        new_trait = trait_loc + jnp.sqrt(trait_var) * eps
    was_used, is_used = jnp.any(column > 0), jnp.any(new_column > 0)
    info = ColumnInfo(
        births=(is_used & ~was_used).astype(jnp.int32),
        deaths=(was_used & ~is_used).astype(jnp.int32),
        changed=jnp.sum(new_column != column).astype(jnp.int32),
    )
    x = lax.dynamic_update_index_in_dim(x, new_column, k, axis=1)
    return x, residual, traits.at[k].set(new_trait), info


def collapsed_columns(
    key,
    x,
    residual,
    traits,
    theta,
    slice_atoms,
    num_atoms,
    *,
    atoms,
    gaussian,
    xi_scale,
    n_columns,
):
    """``n_columns`` :func:`collapsed_column` moves, each on an atom uniform on the
    ``num_atoms`` instantiated ones (``K*`` after the count step; with none, no row may use
    atom 1 and the move only redraws its trait, which the sweep draws again anyway).

    Arguments as :func:`collapsed_column`; :param num_atoms: ``K*`` (a traced int32 scalar);
    :param int n_columns: the number of moves. :return: ``(x, residual, traits, info)``, the
    :class:`ColumnInfo` summed over the moves.
    """
    zero = jnp.zeros((), jnp.int32)
    info = ColumnInfo(zero, zero, zero)

    def move(_, carry):
        x, residual, traits, info, key = carry
        key, k_atom, k_move = random.split(key, 3)
        k = random.randint(k_atom, (), 0, jnp.maximum(num_atoms, 1), jnp.int32)
        x, residual, traits, step = collapsed_column(
            k_move,
            k,
            x,
            residual,
            traits,
            theta,
            slice_atoms,
            atoms=atoms,
            gaussian=gaussian,
            xi_scale=xi_scale,
        )
        info = ColumnInfo(*(a + b for a, b in zip(info, step, strict=True)))
        return x, residual, traits, info, key

    x, residual, traits, info, _ = lax.fori_loop(
        0, n_columns, move, (x, residual, traits, info, key)
    )
    return x, residual, traits, info
