"""Monte-Carlo checks shared by the MCMC tests."""

import itertools

import numpy as np

from numpyro_bnp.arviz_compat import arviz


def check_mean(draws, truth):
    """``draws`` (chain, draw): |mean - truth| < 4 MCSE, the MCSE from ArviZ's ESS (false-alarm
    rate about 6e-5 per check)."""
    draws = np.asarray(draws, np.float64)
    ess = float(arviz().ess(draws))
    se = draws.std() / np.sqrt(ess)
    assert ess > 100, ess
    assert abs(draws.mean() - truth) < 4 * se, (draws.mean(), truth, se, ess)


def check_partition_events(num_clusters, together, probs, parts):
    """The frequencies of a chain's partitions of ``R`` rows against their exact probabilities:
    P(K = k) for every k and P(rows i, j together) for every pair.

    :param num_clusters: ``(chain, draw)`` the number of clusters;
    :param together: ``(chain, draw, P)`` whether each pair of rows shares a cluster, the pairs
        ``itertools.combinations(range(R), 2)`` in order;
    :param probs: ``(num partitions,)`` exact probabilities of ``parts``, the canonical labels
        of every partition ``(num partitions, R)``.

    Events with probability in (0.01, 0.99) within 4 MCSE (:func:`check_mean`), at least 8 of
    them; rarer ones within 0.01.
    """
    pairs = itertools.combinations(range(parts.shape[1]), 2)
    events = [
        (num_clusters == k, probs[parts.max(1) + 1 == k].sum())
        for k in range(1, parts.shape[1] + 1)
    ]
    events += [
        (together[..., p], probs[parts[:, i] == parts[:, j]].sum())
        for p, (i, j) in enumerate(pairs)
    ]
    checked = 0
    for draws, exact in events:
        if 0.01 < exact < 0.99:
            check_mean(draws, exact)
            checked += 1
        else:  # too rare (or too sure) for an ESS-based error: a plain bound
            assert abs(draws.mean() - exact) < 0.01, (draws.mean(), exact)
    assert checked >= 8


def check_labels_against_enumeration(labels, probs, parts):
    """:func:`check_partition_events` of sampled canonical labels ``(chain, draw, R)``."""
    pairs = itertools.combinations(range(parts.shape[1]), 2)
    together = np.stack([labels[..., i] == labels[..., j] for i, j in pairs], axis=-1)
    check_partition_events(labels.max(-1) + 1, together, probs, parts)
