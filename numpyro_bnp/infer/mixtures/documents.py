"""Documents as rows of a mixture engine: word counts validated on the host and stored as
:class:`~numpyro_bnp.families.SparseCounts` (distinct word ids and their counts), so that the
work per document is O(distinct words), never O(vocabulary)."""

import numpy as np

from numpyro_bnp.families import SMALL_COUNT, SparseCounts
from numpyro_bnp.infer.core.streaming import BadBatchError

_MIN_WORDS = 4  # the padded width of a block is at least this


def _width(need):
    """The padded number of entries per document: the smallest ``2^k`` or ``3 · 2^(k-1)``
    that holds ``need`` (a few compiled shapes across batches, at most a third wasted)."""
    need = max(int(need), _MIN_WORDS)
    power = 1 << (need - 1).bit_length()
    return 3 * power // 4 if 3 * power // 4 >= need else power


def _pack(rows, cols, values, num, dtype):
    """``(ids, counts)`` ``(num, L)`` of the entries ``(rows, cols, values)`` (sorted by row)."""
    per_doc = np.bincount(rows, minlength=num)
    width = _width(per_doc.max(initial=0))
    starts = np.concatenate([[0], np.cumsum(per_doc)[:-1]])
    position = np.arange(len(rows)) - np.repeat(starts, per_doc)
    ids = np.zeros((num, width), np.int32)
    counts = np.zeros((num, width), dtype)
    ids[rows, position], counts[rows, position] = cols, values
    return ids, counts


def check_documents(batch, *, vocab, dtype, name="batch"):
    """Word counts ``(n, V)`` (a dense array, one document ``(V,)`` or a ``scipy.sparse``
    matrix) as split :class:`SparseCounts` of NumPy arrays: the counts up to
    :data:`~numpyro_bnp.families.SMALL_COUNT` in the first block ``(n, L)``, the larger ones in
    the second ``(n, L')``; ids ``int32``, counts in ``dtype``, padded with count-0 entries.

    :raises TypeError: when the counts are not real numbers.
    :raises BadBatchError: (a ``ValueError``) on a wrong shape, an empty batch, or counts that
        are not non-negative integers exactly representable in ``dtype``; the message names
        ``name`` and the first bad document.
    """
    if hasattr(batch, "tocsr") and hasattr(batch, "nnz"):  # scipy.sparse, never densified
        csr = batch.tocsr()
        if csr.ndim != 2 or csr.shape[1] != vocab:
            raise BadBatchError(f"{name} must have shape (n, V={vocab}), got {csr.shape}")
        csr.sum_duplicates()
        rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        cols, values = csr.indices, np.asarray(csr.data)
        num = csr.shape[0]
    else:
        arr = np.asarray(batch)
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] != vocab:
            raise BadBatchError(f"{name} must have shape (n, V={vocab}), got {arr.shape}")
        rows, cols = np.nonzero(arr)
        values, num = arr[rows, cols], arr.shape[0]
    if num == 0:
        raise BadBatchError(f"{name} is empty (0 documents)")
    if values.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold word counts (real numbers), got dtype {values.dtype}")
    cast = values.astype(dtype)
    bad = ~(np.isfinite(cast) & (cast >= 0) & (cast == np.round(values)) & (cast == values))
    if bad.any():
        first = int(np.argmax(bad))
        raise BadBatchError(
            f"{name}: document {int(rows[first])} holds {values[first].item()!r} for word "
            f"{int(cols[first])}; word counts must be non-negative integers (exact in {dtype})"
        )
    keep = cast != 0
    rows, cols, cast = rows[keep], cols[keep], cast[keep]
    small = cast <= SMALL_COUNT
    ids, counts = _pack(rows[small], cols[small], cast[small], num, dtype)
    large_ids, large_counts = _pack(rows[~small], cols[~small], cast[~small], num, dtype)
    return SparseCounts(ids, counts, large_ids, large_counts)
