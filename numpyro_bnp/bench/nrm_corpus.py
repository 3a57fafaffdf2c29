"""The synthetic corpus of ``bench nrm``: the generator of Tank, Foti & Fox (2015, §4.2) at the
scale of their NYT experiment, a Pitman–Yor(0.75, 1) mixture of Dirichlet(0.05)-multinomial
topics over 8,000 words, documents of Poisson(150) words, held as scipy.sparse CSR."""

import numpy as np
import scipy.sparse as sp

SYN_VOCAB, SYN_DISCOUNT, SYN_CONCENTRATION = 8_000, 0.75, 1.0
SYN_TOPIC_CONCENTRATION, SYN_MEAN_LENGTH = 0.05, 150.0


def pitman_yor_labels(num_docs, discount, concentration, rng):
    """Cluster labels (N,) of a Pitman–Yor(discount, concentration) Chinese restaurant process.

    A new cluster with probability (c + K d)/(i + c); otherwise a previous document is drawn
    uniformly and its cluster k kept with probability (n_k − d)/n_k, which picks k with
    probability ∝ n_k − d (acceptance at least 1 − d).
    """
    labels = np.empty(num_docs, np.int64)
    counts = np.zeros(num_docs, np.int64)
    new = rng.random(num_docs)
    k = 0
    for i in range(num_docs):
        if new[i] * (i + concentration) < concentration + k * discount:
            labels[i], counts[k] = k, 1
            k += 1
            continue
        while True:
            t = labels[rng.integers(i)]
            if rng.random() * counts[t] < counts[t] - discount:
                break
        labels[i] = t
        counts[t] += 1
    return labels


def synthetic_corpus(num_docs, seed=0, vocab=SYN_VOCAB):
    """Synthetic Pitman–Yor multinomial mixture: (N, V) int32 CSR counts and labels (N,).

    Labels from a PY(0.75, 1) CRP; for each cluster a topic θ_k ~ Dirichlet(0.05) over the
    vocabulary; document lengths ~ Poisson(150) (at least 1); words drawn by inverse CDF,
    vectorised per cluster.
    """
    rng = np.random.default_rng(seed)
    labels = pitman_yor_labels(num_docs, SYN_DISCOUNT, SYN_CONCENTRATION, rng)
    lengths = np.maximum(rng.poisson(SYN_MEAN_LENGTH, num_docs), 1)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(labels.max() + 2))
    keys, counts = [], []
    for k in range(labels.max() + 1):
        docs = order[bounds[k] : bounds[k + 1]]
        cdf = np.cumsum(rng.gamma(SYN_TOPIC_CONCENTRATION, size=vocab))
        lens = lengths[docs]
        words = np.searchsorted(cdf, rng.random(lens.sum()) * cdf[-1], side="right")
        uniq, cnt = np.unique(
            np.repeat(docs, lens) * vocab + np.minimum(words, vocab - 1), return_counts=True
        )
        keys.append(uniq)
        counts.append(cnt)
    keys, counts = np.concatenate(keys), np.concatenate(counts).astype(np.int32)
    corpus = sp.csr_matrix((counts, (keys // vocab, keys % vocab)), shape=(num_docs, vocab))
    return corpus, labels
