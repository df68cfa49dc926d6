"""Rank-normalised split R-hat and bulk / tail ESS (Vehtari, Gelman, Simpson, Carpenter and Buerkner 2021) for
every parameter at once.

ArviZ computes them one parameter at a time (~4.5 ms each: 190 s for the 41,883 parameters of a 12 x 41,871
fit); here the same formulas run over blocks of parameters with numpy, and agree with ``arviz.rhat`` /
``arviz.ess(method="bulk" | "tail")`` (version 0.23) to ~1e-12 on the same draws (tests/test_convergence.py).
ArviZ stays available as the exact reference (``benchfill.irt.checks.convergence_summary(fit, method="arviz")``).

What makes it fast:

* Ranks from one sort per parameter: a float32 draw's order-preserving 32 bits and its position (12-20 bits)
  are packed into one 64-bit key whose bit pattern, viewed as a positive float64, sorts in the same order; numpy's
  vectorised float sort then yields both the sorted values and the permutation (argsort is ~3x slower). Average
  ranks of ties (IMH repeats states; float32 draws can collide) come from two running max / min scans, and the
  normal scores from a lookup table indexed by twice the average rank (ranks are multiples of 1/2).
* Autocovariances lag by lag, only as far as Geyer's initial positive sequence needs them for each parameter
  (well-mixed chains stop after a few lags), instead of a full FFT per chain.
"""

from __future__ import annotations

import numpy as np

CONST_VAR = 1e-24  # a chain set of z-scores or indicators with less variance is constant (ArviZ: ESS = its size)


def _split(x: np.ndarray) -> np.ndarray:
    """(k, C, S) -> (k, 2C, S // 2): first and last halves of every chain (a middle draw of odd S is dropped)."""
    half = x.shape[2] // 2
    return np.concatenate([x[:, :, :half], x[:, :, x.shape[2] - half:]], axis=1)


def _order32(v: np.ndarray) -> np.ndarray:
    """float32 -> uint32 whose unsigned order is the float order (NaN-free input; -0.0 made +0.0, its equal)."""
    v = v + np.float32(0.0)
    b = v.view(np.uint32)
    b ^= (v.view(np.int32) >> 31).view(np.uint32) | np.uint32(0x80000000)
    return b


def _float32_of(order: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_order32` (uint32 or wider integer input)."""
    b = order.astype(np.uint32)
    neg = b < np.uint32(0x80000000)
    b ^= np.where(neg, np.uint32(0xFFFFFFFF), np.uint32(0x80000000))
    return b.view(np.float32)


def _sorted_with_order(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of v (k, N) sorted -> (sorted values, tie key of the sorted values, flat permutation (k * N,): the
    position in v.ravel() of each sorted entry)."""
    k, N = v.shape
    if v.dtype == np.float32 and N < 2**20:
        bits = int(N - 1).bit_length()
        key = _order32(v).astype(np.uint64)
        key <<= np.uint64(bits)
        key |= np.arange(N, dtype=np.uint64)
        key = np.sort(key.view(np.float64), axis=1).view(np.uint64)  # positive float64 order = integer order
        flat = (key & np.uint64((1 << bits) - 1)).astype(np.intp)
        flat += (np.arange(k) * N)[:, None]
        key >>= np.uint64(bits)
        return _float32_of(key), key, flat.ravel()
    order = np.argsort(v, axis=1, kind="stable")
    sv = np.take_along_axis(v, order, axis=1)
    order += (np.arange(k) * N)[:, None]
    return sv, sv, order.ravel()


def _ppf_table(N: int) -> np.ndarray:
    """Normal scores of the Blom-backtransformed average ranks r = j / 2 (j = 0..2N+1):
    Phi^-1((r - 3/8) / (N + 1/4)), as ArviZ's ``_z_scale`` (scipy.stats.norm.ppf)."""
    from statistics import NormalDist  # Wichura's AS 241, ~1e-16 relative: scipy.special's import costs ~0.3 s

    q = (np.arange(2 * N + 2) / 2.0 - 3.0 / 8.0) / (N - 2 * (3.0 / 8.0) + 1)
    inv = NormalDist().inv_cdf
    # outside (0, 1) (indices no rank reaches) scipy gives -inf / +inf / NaN; keep that
    return np.array([inv(v) if 0.0 < v < 1.0 else (-np.inf if v == 0.0 else np.inf if v == 1.0 else np.nan)
                     for v in q.tolist()])


def z_scale(v: np.ndarray, table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rank-normalise each row of v (k, N): average ranks of ties, Blom back-transform, normal quantile.
    Returns z (k, N) and the sorted rows of v."""
    k, N = v.shape
    table = _ppf_table(N) if table is None else table
    sv, key, flat = _sorted_with_order(v)
    twice_rank = np.empty((k, N), dtype=np.intp)
    twice_rank[:] = 2 * np.arange(N) + 2
    tie = np.flatnonzero((key[:, 1:] == key[:, :-1]).ravel())  # entry p + 1 of its row equals entry p
    if tie.size:
        row, p = np.divmod(tie, N - 1)
        pos = row * N + p + 1  # flat positions equal to their predecessor
        brk = np.flatnonzero(np.diff(pos) != 1) + 1
        first = np.concatenate([[0], brk])  # runs of consecutive equal entries
        last = np.concatenate([brk - 1, [pos.size - 1]])
        start = pos[first] - 1 - (pos[first] - 1) // N * N
        end = pos[last] - pos[last] // N * N
        run_of = np.repeat(np.arange(first.size), last - first + 1)
        tr = twice_rank.ravel()
        tr[pos] = (start + end + 2)[run_of]
        tr[pos[first] - 1] = start + end + 2
    z = np.empty(k * N)
    z[flat] = table[twice_rank.ravel()]
    return z.reshape(k, N), sv


def _rhat(z: np.ndarray) -> np.ndarray:
    """Split R-hat of (k, M, n) chains (ArviZ ``_rhat``)."""
    n = z.shape[2]
    between = n * np.var(z.mean(2), axis=1, ddof=1)
    within = np.var(z, axis=2, ddof=1).mean(1)
    with np.errstate(all="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def ess(x: np.ndarray) -> np.ndarray:
    """ESS of (k, M, n) chains with Geyer's initial monotone sequence, exactly as ArviZ ``_ess`` (its FFT
    autocovariances replaced by direct sums for the lags actually used)."""
    k, M, n = x.shape
    x = np.asarray(x, dtype=float)
    total = M * n
    out = np.full(k, np.nan)
    chain_mean = x.mean(2)
    xc = x - chain_mean[:, :, None]
    mean_var = np.einsum("kmt,kmt->k", xc, xc) / (n * M) * n / (n - 1.0)
    # ArviZ: max - min < 1e-15 -> the size; for z-scores and indicators that is exactly a (near) zero variance
    const = mean_var <= CONST_VAR
    out[const] = total
    rows = np.flatnonzero(~const)
    if rows.size == 0:
        return out
    if rows.size < k:
        xc, chain_mean, mean_var = xc[rows], chain_mean[rows], mean_var[rows]
    var_plus = mean_var * (n - 1.0) / n
    if M > 1:
        var_plus = var_plus + np.var(chain_mean, axis=1, ddof=1)

    def rho(sub: np.ndarray, lag: int, sel: np.ndarray) -> np.ndarray:
        acov = np.einsum("kmt,kmt->k", sub[:, :, : n - lag], sub[:, :, lag:]) / (n * M)
        with np.errstate(all="ignore"):
            return 1.0 - (mean_var[sel] - acov) / var_plus[sel]

    m_max = (n - 1) // 2 - 1  # the last pair ArviZ's loop can reach (t < n - 3)
    sel = np.arange(rows.size)
    p0 = 1.0 + rho(xc, 1, sel)
    tau = np.zeros(rows.size)  # rows stopping at pair 0: -1 + rho_0 = 0
    bad = np.isnan(p0)
    active = (p0 > 0) & (m_max >= 1)
    S = np.where(active, p0, 0.0)  # sum of the monotone pair sums before the current pair
    prev = p0.copy()
    sel = sel[active]
    sub = xc[sel]
    m = 1
    while sel.size:
        even, odd = rho(sub, 2 * m, sel), rho(sub, 2 * m + 1, sel)
        pair = even + odd
        bad[sel] |= np.isnan(pair)
        stop = ~(pair > 0) | (m == m_max)
        if stop.any():
            s = sel[stop]
            e = np.where((even[stop] > 0) | (pair[stop] >= 0), even[stop], 0.0)
            tau[s] = -1.0 + 2.0 * S[s] + e
        go = ~stop
        sel, sub = sel[go], sub[go]
        mono = np.minimum(pair[go], prev[sel])
        S[sel] += mono
        prev[sel] = mono
        m += 1
    tau = np.maximum(tau, 1.0 / np.log10(total))
    res = total / tau
    res[bad] = np.nan
    out[rows] = res
    return out


def _quantile7(sorted_rows: np.ndarray, p: float) -> np.ndarray:
    """Type-7 quantile of sorted rows (scipy.stats.mstats.mquantiles(alphap=1, betap=1), as ArviZ)."""
    n = sorted_rows.shape[1]
    aleph = n * p + (1.0 - p)
    k = int(np.floor(np.clip(aleph, 1, n - 1)))
    gamma = float(np.clip(aleph - k, 0, 1))
    return (1.0 - gamma) * sorted_rows[:, k - 1].astype(float) + gamma * sorted_rows[:, k].astype(float)


def diagnostics_block(x: np.ndarray, table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k, C, S) draws of k parameters -> rank-normalised split R-hat, bulk ESS, tail ESS (each (k,); NaN where
    ArviZ gives NaN: any NaN draw, fewer than 4 draws, R-hat with one chain)."""
    k, C, S = x.shape
    nan = np.full(k, np.nan)
    if S < 4:
        return nan, nan.copy(), nan.copy()
    finite = np.isfinite(x).all((1, 2))
    if not finite.all():
        out = [nan.copy(), nan.copy(), nan.copy()]
        if finite.any():
            for o, v in zip(out, diagnostics_block(x[finite], table)):
                o[finite] = v
        return tuple(out)  # type: ignore[return-value]
    sp = _split(x)  # (k, M, n), input dtype
    M, n = sp.shape[1:]
    flat = sp.reshape(k, M * n)
    table = _ppf_table(M * n) if table is None or len(table) != 2 * M * n + 2 else table
    z, srt = z_scale(flat, table)
    z = z.reshape(k, M, n)
    bulk = ess(z)
    if C >= 2:
        mid = M * n // 2
        med = srt[:, mid] if (M * n) % 2 else (srt[:, mid - 1] + srt[:, mid]) / flat.dtype.type(2)
        folded = np.abs(flat - med[:, None])
        rhat = np.maximum(_rhat(z), _rhat(z_scale(folded, table)[0].reshape(k, M, n)))
    else:
        rhat = nan
    del z
    whole = srt if S % 2 == 0 else np.sort(x.reshape(k, C * S), axis=1)
    tails = []
    for p in (0.05, 0.95):
        q = _quantile7(whole, p)
        ind = (x <= q[:, None, None]).astype(float)
        tails.append(ess(_split(ind)))
    return rhat, bulk, np.minimum(*tails)


FORK_MIN_VALUES = 1_000_000  # draws x parameters from which the parameters are split over forked processes
# (~0.15 s of work here; a fork costs ~0.03 s)


def rank_diagnostics(draws: np.ndarray, block: int = 1024, processes: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(C, S, K) draws (any float dtype; float32 kept as is) -> R-hat, bulk ESS, tail ESS, each (K,).

    ``processes``: how many processes share the parameters (this one and forked ones, see
    :func:`benchfill.forking.forked_ranges`); None = the cores available when there are at least
    ``FORK_MIN_VALUES`` draws in all, else one."""
    from benchfill.forking import available_cores, forked_ranges

    draws = np.asarray(draws)
    if draws.ndim == 2:
        draws = draws[:, :, None]
    C, S, K = draws.shape
    half = S // 2
    table = _ppf_table(2 * C * half) if half else None
    if processes is None:
        processes = available_cores() if draws.size >= FORK_MIN_VALUES else 1

    def some(bounds: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = bounds
        rhat, bulk, tail = np.empty(hi - lo), np.empty(hi - lo), np.empty(hi - lo)
        for k0 in range(lo, hi, block):
            k1 = min(k0 + block, hi)
            x = np.ascontiguousarray(np.moveaxis(draws[:, :, k0:k1], 2, 0))
            rhat[k0 - lo : k1 - lo], bulk[k0 - lo : k1 - lo], tail[k0 - lo : k1 - lo] = diagnostics_block(x, table)
        return rhat, bulk, tail

    return forked_ranges(some, K, processes)  # type: ignore[return-value]
