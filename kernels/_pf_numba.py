"""numba kernels of the reservoir particle filter (:mod:`kernels.particle_filter`).

Steps (1)–(6) are those of ``docs/particle-filter.md`` ("One token"): (1) the optimal
proposal q_k, (2) the incremental weight Σ_k q_k, (3) drawing z_i, (4) ESS-triggered multinomial resampling,
(5) rejuvenation from the reservoir, (6) resetting the weights. The algorithm is the Rao-Blackwellized
particle filter of Canini, Shi & Griffiths (2009) with the rejuvenation sequence drawn from a Vitter
Algorithm-R reservoir, as studied in seed 003 (``../shared/seeds/003_a7c52d8f7fc270fa.txt``).

Storage of the topic–word counts n_kw^(p) (the part that would be P·K·W numbers): a pool of K-long count rows
shared copy-on-write between particles. ``ptr[w, p]`` is the pool row holding particle p's counts of word w;
row 0 is the all-zero row shared by every unseen word and is never written; ``refcnt[r]`` counts the particles
pointing to row r ≥ 1; ``free[:ctr[N_FREE]]`` is a stack of free rows. A particle writes a row only after
making it private (:func:`own_row`), so resampling copies a particle by copying its row pointers, not its
K·W counts, and a token step copies at most one K-long row per particle.

Resampling touches only what can differ between particles. ``div[:ctr[N_DIV]]`` lists every word whose
pointers may differ between particles (``div_mark[w]`` = 1 while listed): :func:`own_row` adds a word when it
gives a particle a new row of it, and :func:`copy_pairs` drops a word once all P pointers agree again. Words off
the list have one row (or the zero row) shared by all particles, so a resampling never looks at them: its cost
is proportional to the words seen since the particles last coalesced, not to W·P. The document–topic counts
n_d·^(p) are stored the same way: ``dptr[s, p]`` is the row of ``drows`` holding particle p's counts of the
document in slot s (0 = the zero row), shared copy-on-write with reference counts ``dref`` and a free stack
``dfree`` (:func:`own_drow`); a resampling rewrites one pointer per (slot in use, copied particle), not K
counts. The pool has D·P + 1 rows, so it never runs out. The reservoir's z are handled like the words:
``rdiv[:ctr[N_RDIV]]`` lists the reservoir slots whose z may differ between particles (``rdiv_mark``), added
when a token is stored or rejuvenated, dropped by :func:`copy_pairs` once all particles agree.

Randomness: a xoshiro256** generator whose 4-word state is an array stored in the model state (seeded from the
model's ``rng_``), so every draw is reproducible and a restored model continues bit-identically.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

# Indices into the int64 counter array ``ctr``.
N_FREE = 0  # free pool rows (top of the ``free`` stack)
TOKENS = 1  # tokens seen by the filter, init sample included (the i of Algorithm R)
FILL = 2  # reservoir slots in use
RESAMPLES = 3  # ESS-triggered resamplings (step 4)
REJUVENATIONS = 4  # rejuvenation sequences run (step 5)
COLLAPSES = 5  # pool-full fallbacks (all particles set to one drawn by weight)
SLOT_TOP = 6  # free document slots (top of the ``slot_free`` stack)
COPIED = 7  # integers written when copying particles in resampling (pointers + counts)
COW_ROWS = 8  # K-long rows copied on write
PEAK_ROWS = 9  # largest number of pool rows in use
N_DIV = 10  # words on the divergent-word list ``div[:ctr[N_DIV]]``
D_FREE = 11  # free document-count rows (top of the ``dfree`` stack)
N_RDIV = 12  # reservoir slots on the divergent-token list ``rdiv[:ctr[N_RDIV]]``
N_CTR = 13

# Indices into the float64 array ``fst``.
LOG_EVIDENCE = 0  # Σ_i log Σ_p ω^(p) Σ_k q_k^(p): the filter's estimate of log P(w_1..w_i)
LAST_ESS = 1
N_FST = 2

_M5 = np.uint64(5)
_M9 = np.uint64(9)
_S17 = np.uint64(17)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


@njit(cache=True, nogil=True)
def _rotl(x: np.uint64, k: int) -> np.uint64:
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@njit(cache=True, nogil=True)
def rng_next(s: NDArray[np.uint64]) -> np.uint64:
    """xoshiro256** (Blackman & Vigna): the next 64-bit output; advances ``s`` in place."""
    s0 = s[0]
    s1 = s[1]
    s2 = s[2]
    s3 = s[3]
    result = _rotl(s1 * _M5, 7) * _M9
    t = s1 << _S17
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, 45)
    s[0] = s0
    s[1] = s1
    s[2] = s2
    s[3] = s3
    return result


@njit(cache=True, nogil=True)
def rng_uniform(s: NDArray[np.uint64]) -> float:
    """Uniform double in [0, 1) from the top 53 bits."""
    return float(rng_next(s) >> _S11) * _INV53


@njit(cache=True, nogil=True)
def rng_below(s: NDArray[np.uint64], n: int) -> int:
    """Uniform integer in [0, n) (n ≥ 1)."""
    j = int(rng_uniform(s) * n)
    return j if j < n else n - 1


@njit(cache=True, nogil=True)
def sample_cat(q: NDArray[np.float64], K: int, total: float, s: NDArray[np.uint64]) -> int:
    """Draw k with probability q_k / total (step 3)."""
    u = rng_uniform(s) * total
    acc = 0.0
    for k in range(K):
        acc += q[k]
        if u < acc:
            return k
    # Rounding: fall back to the last topic with positive mass.
    for k in range(K - 1, -1, -1):
        if q[k] > 0.0:
            return k
    return K - 1


@njit(cache=True, nogil=True)
def proposal(
    rows: NDArray[np.int32],
    r: int,
    nk_p: NDArray[np.int64],
    ndk_ps: NDArray[np.int32],
    nd: float,
    alpha: float,
    beta: float,
    wbeta: float,
    q: NDArray[np.float64],
) -> float:
    """Step 1 for one particle: q_k = (n_kw + β)/(n_k + Wβ) · (n_dk + α)/(n_d + Kα), into ``q``.

    ``r`` is the pool row of the word, ``nk_p`` the particle's n_k, ``ndk_ps`` its n_d· for the document,
    ``nd`` the document's tokens so far (token i excluded). Returns Σ_k q_k, the incremental weight of step 2.
    """
    K = q.shape[0]
    kalpha = K * alpha
    total = 0.0
    for k in range(K):
        v = (rows[r, k] + beta) / (nk_p[k] + wbeta) * (ndk_ps[k] + alpha) / (nd + kalpha)
        q[k] = v
        total += v
    return total


@njit(cache=True, nogil=True)
def own_row(
    rows: NDArray[np.int32],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    ptr: NDArray[np.int32],
    div: NDArray[np.int32],
    div_mark: NDArray[np.uint8],
    p: int,
    w: int,
) -> int:
    """Make particle p's row of word w private (copy on write) and return its pool index.

    The caller guarantees a free row (``ctr[N_FREE] ≥ 1``) when the row is shared or the zero row. A word that
    gets a new row goes on the divergent-word list.
    """
    r = ptr[w, p]
    if r != 0 and refcnt[r] == 1:
        return r
    if div_mark[w] == 0:
        div_mark[w] = 1
        div[ctr[N_DIV]] = w
        ctr[N_DIV] += 1
    ctr[N_FREE] -= 1
    new = free[ctr[N_FREE]]
    K = rows.shape[1]
    if r == 0:
        for k in range(K):
            rows[new, k] = 0
    else:
        for k in range(K):
            rows[new, k] = rows[r, k]
        refcnt[r] -= 1
        ctr[COW_ROWS] += 1
    refcnt[new] = 1
    ptr[w, p] = new
    used = rows.shape[0] - 1 - ctr[N_FREE]
    if used > ctr[PEAK_ROWS]:
        ctr[PEAK_ROWS] = used
    return new


@njit(cache=True, nogil=True)
def own_drow(
    drows: NDArray[np.int32],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    ctr: NDArray[np.int64],
    dptr: NDArray[np.int32],
    s: int,
    p: int,
) -> int:
    """Make particle p's document-count row of slot s private (copy on write) and return its index. The pool
    (D·P + 1 rows) always has a free row: a shared or zero row means fewer than D·P rows are in use."""
    r = dptr[s, p]
    if r != 0 and dref[r] == 1:
        return r
    ctr[D_FREE] -= 1
    new = dfree[ctr[D_FREE]]
    K = drows.shape[1]
    if r == 0:
        for k in range(K):
            drows[new, k] = 0
    else:
        for k in range(K):
            drows[new, k] = drows[r, k]
        dref[r] -= 1
    dref[new] = 1
    dptr[s, p] = new
    return new


@njit(cache=True, nogil=True)
def release_slot(
    dref: NDArray[np.int64], dfree: NDArray[np.int64], ctr: NDArray[np.int64], dptr: NDArray[np.int32], s: int
) -> None:
    """Point every particle's document counts of slot s at the zero row (rows nobody uses go back)."""
    P = dptr.shape[1]
    for p in range(P):
        r = dptr[s, p]
        if r != 0:
            dref[r] -= 1
            if dref[r] == 0:
                dfree[ctr[D_FREE]] = r
                ctr[D_FREE] += 1
            dptr[s, p] = 0


@njit(cache=True, nogil=True)
def copy_pairs(
    src: NDArray[np.int64],
    dst: NDArray[np.int64],
    n_pairs: int,
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    ptr: NDArray[np.int32],
    div: NDArray[np.int32],
    div_mark: NDArray[np.uint8],
    nk: NDArray[np.int64],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
    slot_refs: NDArray[np.int64],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
) -> None:
    """Make particle ``dst[i]`` a copy of ``src[i]`` for every pair i (step 4), copying only what differs.

    Topic–word counts: only the words on the divergent-word list are visited (every other word has one row
    shared by all particles); of those, only row pointers that differ are rewritten (reference counts
    adjusted, rows nobody points to any more go back to the free stack), never the K-long rows. A word whose P
    pointers all agree afterwards leaves the list. n_k is copied; the n_d· row pointers only for document slots
    in use; the reservoir's z only for the slots on the divergent-token list (dropped from it once all
    particles agree). No source is a destination.
    """
    P = ptr.shape[1]
    K = nk.shape[1]
    copied = 0
    a = 0
    while a < ctr[N_DIV]:
        w = div[a]
        pw = ptr[w]
        for i in range(n_pairs):
            rs = pw[src[i]]
            rd = pw[dst[i]]
            if rs != rd:
                if rd != 0:
                    refcnt[rd] -= 1
                    if refcnt[rd] == 0:
                        free[ctr[N_FREE]] = rd
                        ctr[N_FREE] += 1
                if rs != 0:
                    refcnt[rs] += 1
                pw[dst[i]] = rs
                copied += 1
        r0 = pw[0]
        same = True
        for p in range(1, P):
            if pw[p] != r0:
                same = False
                break
        if same:  # leaves the list (swap with the last entry, which is visited next)
            div_mark[w] = 0
            last = ctr[N_DIV] - 1
            div[a] = div[last]
            ctr[N_DIV] = last
        else:
            a += 1
    for i in range(n_pairs):
        for k in range(K):
            nk[dst[i], k] = nk[src[i], k]
    copied += K * n_pairs
    for s in range(dptr.shape[0]):
        if slot_refs[s] > 0:
            ds = dptr[s]
            for i in range(n_pairs):
                rs = ds[src[i]]
                rd = ds[dst[i]]
                if rs != rd:
                    if rd != 0:
                        dref[rd] -= 1
                        if dref[rd] == 0:
                            dfree[ctr[D_FREE]] = rd
                            ctr[D_FREE] += 1
                    if rs != 0:
                        dref[rs] += 1
                    ds[dst[i]] = rs
                    copied += 1
    a = 0
    while a < ctr[N_RDIV]:
        j = rdiv[a]
        zj = res_z[j]
        for i in range(n_pairs):
            zj[dst[i]] = zj[src[i]]
        copied += n_pairs
        z0 = zj[0]
        same = True
        for p in range(1, P):
            if zj[p] != z0:
                same = False
                break
        if same:
            rdiv_mark[j] = 0
            last = ctr[N_RDIV] - 1
            rdiv[a] = rdiv[last]
            ctr[N_RDIV] = last
        else:
            a += 1
    ctr[COPIED] += copied


@njit(cache=True, nogil=True)
def resample(
    weights: NDArray[np.float64],
    offspring: NDArray[np.int64],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    ptr: NDArray[np.int32],
    div: NDArray[np.int32],
    div_mark: NDArray[np.uint8],
    nk: NDArray[np.int64],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
    slot_refs: NDArray[np.int64],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    zcur: NDArray[np.int64],
    rng: NDArray[np.uint64],
) -> None:
    """Step 4: multinomial resampling, P draws with probability ∝ ω, then ω = 1/P (step 6).

    A particle drawn at least once stays in its own slot; only the slots of particles drawn zero times are
    overwritten with the extra copies, so a resampling copies P − (number of distinct survivors) particles.
    """
    P = weights.shape[0]
    total = 0.0
    for p in range(P):
        total += weights[p]
        offspring[p] = 0
    for _ in range(P):
        u = rng_uniform(rng) * total
        acc = 0.0
        a = P - 1
        for p in range(P):
            acc += weights[p]
            if u < acc:
                a = p
                break
        offspring[a] += 1
    src = np.empty(P, dtype=np.int64)
    dst = np.empty(P, dtype=np.int64)
    n_pairs = 0
    dead = 0
    for a in range(P):
        while offspring[a] > 1:
            while offspring[dead] != 0:
                dead += 1
            src[n_pairs] = a
            dst[n_pairs] = dead
            n_pairs += 1
            zcur[dead] = zcur[a]
            offspring[dead] = -1  # filled
            offspring[a] -= 1
    copy_pairs(
        src, dst, n_pairs, refcnt, free, ctr, ptr, div, div_mark, nk, dref, dfree, dptr, slot_refs, res_z,
        rdiv, rdiv_mark,
    )  # fmt: skip
    for p in range(P):
        weights[p] = 1.0 / P


@njit(cache=True, nogil=True)
def collapse(
    weights: NDArray[np.float64],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    ptr: NDArray[np.int32],
    div: NDArray[np.int32],
    div_mark: NDArray[np.uint8],
    nk: NDArray[np.int64],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
    slot_refs: NDArray[np.int64],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    zcur: NDArray[np.int64],
    rng: NDArray[np.uint64],
) -> None:
    """Pool-full fallback: draw one particle a with probability ω_a and make every particle a copy of it.

    This is a valid (if maximally degenerate) resampling — every particle's expected number of copies is P·ω_a
    — so the filter stays consistent and its evidence estimate unbiased. Afterwards the pool holds one
    particle's rows only (≤ W), which the validated pool size always leaves room for.
    """
    P = weights.shape[0]
    total = 0.0
    for p in range(P):
        total += weights[p]
    u = rng_uniform(rng) * total
    acc = 0.0
    a = P - 1
    for p in range(P):
        acc += weights[p]
        if u < acc:
            a = p
            break
    src = np.full(P - 1, a, dtype=np.int64)
    dst = np.empty(P - 1, dtype=np.int64)
    n_pairs = 0
    for b in range(P):
        if b != a:
            dst[n_pairs] = b
            n_pairs += 1
            zcur[b] = zcur[a]
    copy_pairs(
        src, dst, n_pairs, refcnt, free, ctr, ptr, div, div_mark, nk, dref, dfree, dptr, slot_refs, res_z,
        rdiv, rdiv_mark,
    )  # fmt: skip
    for p in range(P):
        weights[p] = 1.0 / P
    ctr[COLLAPSES] += 1


@njit(cache=True, nogil=True)
def rejuvenate(
    n_rejuv: int,
    idx: NDArray[np.int64],
    rows: NDArray[np.int32],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    ptr: NDArray[np.int32],
    div: NDArray[np.int32],
    div_mark: NDArray[np.uint8],
    nk: NDArray[np.int64],
    drows: NDArray[np.int32],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
    res_w: NDArray[np.int32],
    res_slot: NDArray[np.int32],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    alpha: float,
    beta: float,
    q: NDArray[np.float64],
    rng: NDArray[np.uint64],
) -> None:
    """Step 5: draw r reservoir tokens uniformly (with replacement); for every particle and every drawn token
    j, remove z_j from the counts and redraw it from P(z_j = k | rest) ∝ (n_kw¬j + β)/(n_k¬j + Wβ)·(n_dk¬j +
    α) (one collapsed Gibbs step), then add it back. Needs up to r free pool rows per particle."""
    W, P = ptr.shape
    K = nk.shape[1]
    wbeta = W * beta
    fill = ctr[FILL]
    if fill == 0 or n_rejuv == 0:
        return
    for t in range(n_rejuv):
        j = rng_below(rng, fill)
        idx[t] = j
        if rdiv_mark[j] == 0:
            rdiv_mark[j] = 1
            rdiv[ctr[N_RDIV]] = j
            ctr[N_RDIV] += 1
    for p in range(P):
        for t in range(n_rejuv):
            j = idx[t]
            w = res_w[j]
            s = res_slot[j]
            k_old = res_z[j, p]
            r = own_row(rows, refcnt, free, ctr, ptr, div, div_mark, p, w)
            rd = own_drow(drows, dref, dfree, ctr, dptr, s, p)
            rows[r, k_old] -= 1
            nk[p, k_old] -= 1
            drows[rd, k_old] -= 1
            total = 0.0
            for k in range(K):
                v = (rows[r, k] + beta) / (nk[p, k] + wbeta) * (drows[rd, k] + alpha)
                q[k] = v
                total += v
            k_new = sample_cat(q, K, total, rng)
            rows[r, k_new] += 1
            nk[p, k_new] += 1
            drows[rd, k_new] += 1
            res_z[j, p] = k_new
    ctr[REJUVENATIONS] += 1


@njit(cache=True, nogil=True)
def reservoir_position(i: int, fill: int, R: int, rng: NDArray[np.uint64]) -> int:
    """Vitter's Algorithm R for token number ``i`` (counted from 1): the slot it goes to, or -1.

    While slots are free (i ≤ R, or after :func:`kernels.particle_filter.ParticleFilterLDA.reset_words`
    emptied some) the token is appended; otherwise u is uniform on 1..i and the token overwrites slot u if u ≤
    R, so each of the i tokens seen so far is in the reservoir with probability R/i.
    """
    if R == 0:
        return -1
    if fill < R:
        return fill
    u = rng_below(rng, i)  # 0..i-1
    return u if u < R else -1


@njit(cache=True, nogil=True)
def store_token(
    pos: int,
    w: int,
    s: int,
    zcur: NDArray[np.int64],
    ctr: NDArray[np.int64],
    res_w: NDArray[np.int32],
    res_slot: NDArray[np.int32],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    slot_refs: NDArray[np.int64],
    slot_free: NDArray[np.int64],
    scratch: int,
) -> None:
    """Put a token (word w of the document in slot s, z^(p) = zcur[p]) into reservoir slot ``pos``.

    An evicted token releases its document slot when no other reservoir token (and no open document) uses it.
    """
    P = res_z.shape[1]
    if pos == ctr[FILL]:
        ctr[FILL] += 1
    else:
        old = res_slot[pos]
        slot_refs[old] -= 1
        if slot_refs[old] == 0 and old != scratch:
            slot_free[ctr[SLOT_TOP]] = old
            ctr[SLOT_TOP] += 1
    res_w[pos] = w
    res_slot[pos] = s
    z0 = zcur[0]
    same = True
    for p in range(P):
        res_z[pos, p] = zcur[p]
        if zcur[p] != z0:
            same = False
    if not same and rdiv_mark[pos] == 0:
        rdiv_mark[pos] = 1
        rdiv[ctr[N_RDIV]] = pos
        ctr[N_RDIV] += 1
    slot_refs[s] += 1


@njit(cache=True, nogil=True)
def open_slot(
    ctr: NDArray[np.int64],
    slot_free: NDArray[np.int64],
    slot_refs: NDArray[np.int64],
    slot_len: NDArray[np.int64],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
) -> int:
    """Give the next document a slot for its n_d· (the scratch slot, last, when none is free: its tokens then
    stay out of the reservoir). The open document holds one reference to its slot."""
    scratch = dptr.shape[0] - 1
    if ctr[SLOT_TOP] > 0:
        ctr[SLOT_TOP] -= 1
        s = slot_free[ctr[SLOT_TOP]]
    else:
        s = scratch
    slot_refs[s] = 1
    slot_len[s] = 0
    release_slot(dref, dfree, ctr, dptr, s)
    return s


@njit(cache=True, nogil=True)
def close_slot(s: int, ctr: NDArray[np.int64], slot_free: NDArray[np.int64], slot_refs: NDArray[np.int64]) -> None:
    """The document in slot s is complete: drop its reference; free the slot if no reservoir token uses it."""
    scratch = slot_refs.shape[0] - 1
    slot_refs[s] -= 1
    if s == scratch:
        slot_refs[s] = 0
    elif slot_refs[s] == 0:
        slot_free[ctr[SLOT_TOP]] = s
        ctr[SLOT_TOP] += 1


@njit(cache=True, nogil=True)
def filter_docs(
    indptr: NDArray[np.int64],
    word_ids: NDArray[np.int64],
    counts: NDArray[np.int64],
    tok: NDArray[np.int64],
    rows: NDArray[np.int32],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ptr: NDArray[np.int32],
    div: NDArray[np.int32],
    div_mark: NDArray[np.uint8],
    nk: NDArray[np.int64],
    weights: NDArray[np.float64],
    res_w: NDArray[np.int32],
    res_slot: NDArray[np.int32],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    drows: NDArray[np.int32],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
    slot_len: NDArray[np.int64],
    slot_refs: NDArray[np.int64],
    slot_free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    fst: NDArray[np.float64],
    rng: NDArray[np.uint64],
    alpha: float,
    beta: float,
    ess_threshold: float,
    n_rejuv: int,
    theta: NDArray[np.float64],
) -> int:
    """Run the particle filter over the documents of a batch, token by token (steps 1–6 for each token).

    The tokens of a document (``counts`` copies of each word) are visited in a random order. After the last
    token of document d, θ_d = Σ_p ω^(p) (n_d·^(p) + α)/(n_d + Kα) is written to ``theta[d]`` (the prior mean
    for an empty document). Returns 0, or -1 if the pool ran out of rows even after a collapse (cannot happen
    with the validated pool size).
    """
    W, P = ptr.shape
    K = nk.shape[1]
    R = res_w.shape[0]
    scratch = dptr.shape[0] - 1
    wbeta = W * beta
    kalpha = K * alpha
    q = np.empty(K, dtype=np.float64)
    zcur = np.zeros(P, dtype=np.int64)
    offspring = np.zeros(P, dtype=np.int64)
    idx = np.zeros(max(n_rejuv, 1), dtype=np.int64)
    n_docs = indptr.shape[0] - 1
    for d in range(n_docs):
        n = 0
        for j in range(indptr[d], indptr[d + 1]):
            for _ in range(counts[j]):
                tok[n] = word_ids[j]
                n += 1
        if n == 0:
            for k in range(K):
                theta[d, k] = 1.0 / K
            continue
        for t in range(n - 1, 0, -1):  # Fisher–Yates: a random token order
            u = rng_below(rng, t + 1)
            tmp = tok[t]
            tok[t] = tok[u]
            tok[u] = tmp
        s = open_slot(ctr, slot_free, slot_refs, slot_len, dref, dfree, dptr)
        for t in range(n):
            w = tok[t]
            if ctr[N_FREE] < P:
                collapse(
                    weights, refcnt, free, ctr, ptr, div, div_mark, nk, dref, dfree, dptr, slot_refs, res_z,
                    rdiv, rdiv_mark, zcur, rng,
                )  # fmt: skip
                if ctr[N_FREE] < P:
                    return -1
            nd = float(slot_len[s])
            total = 0.0
            for p in range(P):
                inc = proposal(rows, ptr[w, p], nk[p], drows[dptr[s, p]], nd, alpha, beta, wbeta, q)  # step 1
                k = sample_cat(q, K, inc, rng)  # step 3
                zcur[p] = k
                r = own_row(rows, refcnt, free, ctr, ptr, div, div_mark, p, w)
                rows[r, k] += 1
                nk[p, k] += 1
                rd = own_drow(drows, dref, dfree, ctr, dptr, s, p)
                drows[rd, k] += 1
                weights[p] *= inc  # step 2
                total += weights[p]
            slot_len[s] += 1
            fst[LOG_EVIDENCE] += math.log(total)
            sq = 0.0
            for p in range(P):
                weights[p] /= total
                sq += weights[p] * weights[p]
            ess = 1.0 / sq
            fst[LAST_ESS] = ess
            ctr[TOKENS] += 1
            if s != scratch:
                pos = reservoir_position(ctr[TOKENS], ctr[FILL], R, rng)
                if pos >= 0:
                    store_token(
                        pos, w, s, zcur, ctr, res_w, res_slot, res_z, rdiv, rdiv_mark, slot_refs, slot_free, scratch
                    )
            if ess < ess_threshold * P:
                resample(
                    weights, offspring, refcnt, free, ctr, ptr, div, div_mark, nk, dref, dfree, dptr, slot_refs,
                    res_z, rdiv, rdiv_mark, zcur, rng,
                )  # fmt: skip
                ctr[RESAMPLES] += 1
                if n_rejuv > 0 and ctr[FILL] > 0:
                    if ctr[N_FREE] < n_rejuv * P:
                        collapse(
                            weights, refcnt, free, ctr, ptr, div, div_mark, nk, dref, dfree, dptr, slot_refs,
                            res_z, rdiv, rdiv_mark, zcur, rng,
                        )  # fmt: skip
                        if ctr[N_FREE] < n_rejuv * P:
                            return -1
                    rejuvenate(
                        n_rejuv,
                        idx,
                        rows,
                        refcnt,
                        free,
                        ctr,
                        ptr,
                        div,
                        div_mark,
                        nk,
                        drows,
                        dref,
                        dfree,
                        dptr,
                        res_w,
                        res_slot,
                        res_z,
                        rdiv,
                        rdiv_mark,
                        alpha,
                        beta,
                        q,
                        rng,
                    )
        nd_final = float(slot_len[s])
        for k in range(K):
            acc = 0.0
            for p in range(P):
                acc += weights[p] * (drows[dptr[s, p], k] + alpha)
            theta[d, k] = acc / (nd_final + kalpha)
        close_slot(s, ctr, slot_free, slot_refs)
    return 0


@njit(cache=True, nogil=True)
def install_init(
    words: NDArray[np.int64],
    doc_ptr: NDArray[np.int64],
    z: NDArray[np.int64],
    rows: NDArray[np.int32],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ptr: NDArray[np.int32],
    nk: NDArray[np.int64],
    res_w: NDArray[np.int32],
    res_slot: NDArray[np.int32],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    drows: NDArray[np.int32],
    dref: NDArray[np.int64],
    dfree: NDArray[np.int64],
    dptr: NDArray[np.int32],
    slot_len: NDArray[np.int64],
    slot_refs: NDArray[np.int64],
    slot_free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    rng: NDArray[np.uint64],
    alpha: float,
    theta: NDArray[np.float64],
) -> int:
    """Start every particle from one initial model: the assignments ``z`` of the initial sample's tokens
    (``words`` in document order, documents delimited by ``doc_ptr``).

    All particles share the resulting count rows and document-count rows (reference count P), so no word is
    divergent. The initial sample's tokens then enter
    the reservoir in order like any other tokens (notes, "Initialisation"), and θ_d of each initial document
    is (n_dk + α)/(n_d + Kα). Returns 0, or -1 if the pool is too small.
    """
    P = ptr.shape[1]
    K = nk.shape[1]
    R = res_w.shape[0]
    scratch = dptr.shape[0] - 1
    zcur = np.zeros(P, dtype=np.int64)
    for i in range(words.shape[0]):
        w = words[i]
        k = z[i]
        r = ptr[w, 0]
        if r == 0:
            if ctr[N_FREE] < 1:
                return -1
            ctr[N_FREE] -= 1
            r = free[ctr[N_FREE]]
            for kk in range(K):
                rows[r, kk] = 0
            refcnt[r] = P
            for p in range(P):
                ptr[w, p] = r
        rows[r, k] += 1
        for p in range(P):
            nk[p, k] += 1
    used = rows.shape[0] - 1 - ctr[N_FREE]
    if used > ctr[PEAK_ROWS]:
        ctr[PEAK_ROWS] = used
    n_docs = doc_ptr.shape[0] - 1
    for d in range(n_docs):
        lo = doc_ptr[d]
        hi = doc_ptr[d + 1]
        s = open_slot(ctr, slot_free, slot_refs, slot_len, dref, dfree, dptr)
        if hi > lo:
            ctr[D_FREE] -= 1
            rd = dfree[ctr[D_FREE]]
            for kk in range(K):
                drows[rd, kk] = 0
            for i in range(lo, hi):
                drows[rd, z[i]] += 1
            dref[rd] = P
            for p in range(P):
                dptr[s, p] = rd
        slot_len[s] = hi - lo
        for kk in range(K):
            theta[d, kk] = (drows[dptr[s, 0], kk] + alpha) / ((hi - lo) + K * alpha)
        for i in range(lo, hi):
            ctr[TOKENS] += 1
            if s != scratch:
                pos = reservoir_position(ctr[TOKENS], ctr[FILL], R, rng)
                if pos >= 0:
                    for p in range(P):
                        zcur[p] = z[i]
                    store_token(
                        pos, words[i], s, zcur, ctr, res_w, res_slot, res_z, rdiv, rdiv_mark, slot_refs,
                        slot_free, scratch,
                    )  # fmt: skip
        close_slot(s, ctr, slot_free, slot_refs)
    return 0


# ------------------------------------------------------------------------------------------ collapsed Gibbs
@njit(cache=True, nogil=True)
def gibbs_chain(
    words: NDArray[np.int64],
    doc_of: NDArray[np.int64],
    n_docs: int,
    V: int,
    K: int,
    alpha: float,
    beta: float,
    wbeta: float,
    sweeps: int,
    z: NDArray[np.int64],
    init_random: bool,
    rng: NDArray[np.uint64],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Collapsed Gibbs sampling for LDA (Griffiths & Steyvers 2004) on tokens ``words`` (local ids < V) of
    documents ``doc_of``: the initialisation of the notes/seed. P(z_i = k | rest) ∝ (n_kw¬i + β)/(n_k¬i + Wβ)
    · (n_dk¬i + α), with ``wbeta`` = Wβ of the full vocabulary. If ``init_random`` the chain starts from
    uniform topics, else from ``z``. ``z`` is updated in place; returns (n_kw as K×V, n_k, n_dk as
    n_docs×K)."""
    N = words.shape[0]
    nkw = np.zeros((K, V), dtype=np.int64)
    nk = np.zeros(K, dtype=np.int64)
    ndk = np.zeros((n_docs, K), dtype=np.int64)
    q = np.empty(K, dtype=np.float64)
    for i in range(N):
        if init_random:
            z[i] = rng_below(rng, K)
        k = z[i]
        nkw[k, words[i]] += 1
        nk[k] += 1
        ndk[doc_of[i], k] += 1
    for _ in range(sweeps):
        for i in range(N):
            w = words[i]
            d = doc_of[i]
            k = z[i]
            nkw[k, w] -= 1
            nk[k] -= 1
            ndk[d, k] -= 1
            total = 0.0
            for kk in range(K):
                v = (nkw[kk, w] + beta) / (nk[kk] + wbeta) * (ndk[d, kk] + alpha)
                q[kk] = v
                total += v
            k = sample_cat(q, K, total, rng)
            z[i] = k
            nkw[k, w] += 1
            nk[k] += 1
            ndk[d, k] += 1
    return nkw, nk, ndk


@njit(cache=True, nogil=True)
def gibbs_add_docs(
    words: NDArray[np.int64],
    doc_of: NDArray[np.int64],
    z: NDArray[np.int64],
    start: int,
    nkw: NDArray[np.int64],
    nk: NDArray[np.int64],
    ndk: NDArray[np.int64],
    alpha: float,
    beta: float,
    wbeta: float,
    rng: NDArray[np.uint64],
) -> None:
    """Add tokens ``start:`` to a Gibbs state one at a time, each drawn from its conditional given everything
    added before it (used to fold the held-out part of the initial sample into the chosen chain)."""
    K = nk.shape[0]
    q = np.empty(K, dtype=np.float64)
    for i in range(start, words.shape[0]):
        w = words[i]
        d = doc_of[i]
        total = 0.0
        for kk in range(K):
            v = (nkw[kk, w] + beta) / (nk[kk] + wbeta) * (ndk[d, kk] + alpha)
            q[kk] = v
            total += v
        k = sample_cat(q, K, total, rng)
        z[i] = k
        nkw[k, w] += 1
        nk[k] += 1
        ndk[d, k] += 1


@njit(cache=True, nogil=True)
def fold_in_gibbs(
    tok_ptr: NDArray[np.int64],
    toks: NDArray[np.int64],
    phi: NDArray[np.float64],
    alpha: float,
    sweeps: int,
    rng: NDArray[np.uint64],
) -> NDArray[np.int64]:
    """The seed's evaluation: with φ (K×V) fixed, run ``sweeps`` Gibbs sweeps on each document's tokens
    (P(z_i = k) ∝ φ_k,w (n_dk¬i + α), topics initialised uniformly at random) and return the final n_dk."""
    K = phi.shape[0]
    n_docs = tok_ptr.shape[0] - 1
    ndk = np.zeros((n_docs, K), dtype=np.int64)
    q = np.empty(K, dtype=np.float64)
    for d in range(n_docs):
        lo = tok_ptr[d]
        hi = tok_ptr[d + 1]
        z = np.empty(hi - lo, dtype=np.int64)
        for i in range(lo, hi):
            k = rng_below(rng, K)
            z[i - lo] = k
            ndk[d, k] += 1
        for _ in range(sweeps):
            for i in range(lo, hi):
                w = toks[i]
                k = z[i - lo]
                ndk[d, k] -= 1
                total = 0.0
                for kk in range(K):
                    v = phi[kk, w] * (ndk[d, kk] + alpha)
                    q[kk] = v
                    total += v
                k = sample_cat(q, K, total, rng)
                z[i - lo] = k
                ndk[d, k] += 1
    return ndk


@njit(cache=True, nogil=True)
def heldout_loglik(
    tok_ptr: NDArray[np.int64],
    toks: NDArray[np.int64],
    phi: NDArray[np.float64],
    alpha: float,
    sweeps: int,
    rng: NDArray[np.uint64],
) -> tuple[float, int]:
    """Document completion: infer θ_d from the even-numbered tokens of each document by Gibbs fold-in with φ
    fixed, then score the odd-numbered ones by log Σ_k θ_dk φ_kw. Returns (sum of log-likelihoods, tokens
    scored); the seed's best-of-N initialisation keeps the chain with the lowest perplexity exp(-sum/n)."""
    K = phi.shape[0]
    n_docs = tok_ptr.shape[0] - 1
    q = np.empty(K, dtype=np.float64)
    ndk = np.zeros(K, dtype=np.int64)
    ll = 0.0
    n_scored = 0
    for d in range(n_docs):
        lo = tok_ptr[d]
        hi = tok_ptr[d + 1]
        n_half = (hi - lo + 1) // 2
        z = np.empty(n_half, dtype=np.int64)
        for k in range(K):
            ndk[k] = 0
        for a in range(n_half):
            k = rng_below(rng, K)
            z[a] = k
            ndk[k] += 1
        for _ in range(sweeps):
            for a in range(n_half):
                w = toks[lo + 2 * a]
                k = z[a]
                ndk[k] -= 1
                total = 0.0
                for kk in range(K):
                    v = phi[kk, w] * (ndk[kk] + alpha)
                    q[kk] = v
                    total += v
                k = sample_cat(q, K, total, rng)
                z[a] = k
                ndk[k] += 1
        for i in range(lo + 1, hi, 2):
            w = toks[i]
            pr = 0.0
            for k in range(K):
                pr += (ndk[k] + alpha) / (n_half + K * alpha) * phi[k, w]
            ll += math.log(pr)
            n_scored += 1
    return ll, n_scored


# ------------------------------------------------------------------------------------------ read-outs
@njit(cache=True, nogil=True)
def mean_phi_columns(
    cols: NDArray[np.int64],
    rows: NDArray[np.int32],
    ptr: NDArray[np.int32],
    nk: NDArray[np.int64],
    weights: NDArray[np.float64],
    beta: float,
) -> NDArray[np.float64]:
    """Columns ``cols`` of φ = Σ_p ω^(p) (n_kw^(p) + β)/(n_k^(p) + Wβ), shape (K, len(cols))."""
    W, P = ptr.shape
    K = nk.shape[1]
    wbeta = W * beta
    inv = np.empty((P, K), dtype=np.float64)
    for p in range(P):
        for k in range(K):
            inv[p, k] = weights[p] / (nk[p, k] + wbeta)
    out = np.zeros((K, cols.shape[0]), dtype=np.float64)
    for c in range(cols.shape[0]):
        pw = ptr[cols[c]]
        for p in range(P):
            r = pw[p]
            for k in range(K):
                out[k, c] += (rows[r, k] + beta) * inv[p, k]
    return out


@njit(cache=True, nogil=True)
def fold_in_mean_field(
    indptr: NDArray[np.int64],
    local: NDArray[np.int64],
    counts: NDArray[np.float64],
    phi: NDArray[np.float64],
    alpha: float,
    iters: int,
) -> NDArray[np.float64]:
    """Deterministic fold-in for ``transform``: with φ fixed, iterate
    θ_dk ∝ α + Σ_w c_w θ_dk φ_kw / Σ_k' θ_dk' φ_k'w (the EM fixed point of the document's posterior mean).
    Rows sum to 1; an empty document gets the prior mean."""
    K = phi.shape[0]
    n_docs = indptr.shape[0] - 1
    theta = np.empty((n_docs, K), dtype=np.float64)
    acc = np.empty(K, dtype=np.float64)
    for d in range(n_docs):
        for k in range(K):
            theta[d, k] = 1.0 / K
        lo = indptr[d]
        hi = indptr[d + 1]
        if hi == lo:
            continue
        for _ in range(iters):
            for k in range(K):
                acc[k] = alpha
            for j in range(lo, hi):
                c = local[j]
                norm = 0.0
                for k in range(K):
                    norm += theta[d, k] * phi[k, c]
                f = counts[j] / norm
                for k in range(K):
                    acc[k] += f * theta[d, k] * phi[k, c]
            tot = 0.0
            for k in range(K):
                tot += acc[k]
            for k in range(K):
                theta[d, k] = acc[k] / tot
    return theta


@njit(cache=True, nogil=True)
def forget_words(
    ids: NDArray[np.int64],
    mask: NDArray[np.bool_],
    refcnt: NDArray[np.int64],
    free: NDArray[np.int64],
    ctr: NDArray[np.int64],
    rows: NDArray[np.int32],
    ptr: NDArray[np.int32],
    nk: NDArray[np.int64],
    res_w: NDArray[np.int32],
    res_slot: NDArray[np.int32],
    res_z: NDArray[np.int16],
    rdiv: NDArray[np.int32],
    rdiv_mark: NDArray[np.uint8],
    slot_refs: NDArray[np.int64],
    slot_free: NDArray[np.int64],
) -> None:
    """reset_words: point every particle's rows of these words at the zero row (n_k reduced accordingly, rows
    nobody uses go back to the pool) and drop the words' tokens from the reservoir (compacted)."""
    P = ptr.shape[1]
    K = nk.shape[1]
    scratch = slot_refs.shape[0] - 1
    for p in range(P):
        for a in range(ids.shape[0]):
            w = ids[a]
            r = ptr[w, p]
            if r != 0:
                for k in range(K):
                    nk[p, k] -= rows[r, k]
                refcnt[r] -= 1
                if refcnt[r] == 0:
                    free[ctr[N_FREE]] = r
                    ctr[N_FREE] += 1
                ptr[w, p] = 0
    j = 0
    while j < ctr[FILL]:
        if mask[res_w[j]]:
            s = res_slot[j]
            slot_refs[s] -= 1
            if slot_refs[s] == 0 and s != scratch:
                slot_free[ctr[SLOT_TOP]] = s
                ctr[SLOT_TOP] += 1
            last = ctr[FILL] - 1
            res_w[j] = res_w[last]
            res_slot[j] = res_slot[last]
            for p in range(P):
                res_z[j, p] = res_z[last, p]
            ctr[FILL] -= 1
        else:
            j += 1
    # The compaction moved tokens between slots: rebuild the divergent-token list.
    for a in range(ctr[N_RDIV]):
        rdiv_mark[rdiv[a]] = 0
    ctr[N_RDIV] = 0
    for j in range(ctr[FILL]):
        for p in range(1, P):
            if res_z[j, p] != res_z[j, 0]:
                rdiv_mark[j] = 1
                rdiv[ctr[N_RDIV]] = j
                ctr[N_RDIV] += 1
                break
