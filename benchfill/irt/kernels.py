"""Compiled (numba) inner loops of the fast sampler, for large fits only (and, at the end, of the design null's
per-pattern moments, :func:`benchfill.irt.placement.total_moments`).

The kernels read a key's log density on its window straight from the lattice terms, in one pass over each
window instead of the ~10 array passes (gathers, differences, cumulative sums, searches) of the numpy path in
:mod:`benchfill.irt.fast`, which is what a fit with guessing (one key per response pattern, thousands of keys)
spends its time on. The window kernels leave their exponentials to numpy (SIMD where numpy has a vector exp:
~8x faster than numba's scalar exp on an AVX-512 machine; on one without, both are scalar, ~8 ns). They compute
the same quantities as :func:`benchfill.irt.fast.block_log_density`,
:func:`~benchfill.irt.fast.cell_masses` and :func:`~benchfill.irt.fast.cell_draws` (the numpy functions
stay the reference, and tests hold the two paths to agree), from the same uniforms.

Layout of the inputs, for a block of Kb keys on a lattice of L nodes and B ability vectors:
    base: (B, L) log prior (plus the shared-trials term where all keys have the same trials), nats.
    tables, codes: (R, B, L) and (Kb, Q): key k's lattice term is the sum over q of tables[codes[k, q]] (the
        per-key terms themselves, R = Kb and Q = 1; subset sums, :func:`benchfill.irt.fast.kernel_terms`; Q = 0:
        none).
    idx: (Kb, G) lattice index of each window node.  nodes: (Kn, G) their b at the anchor (Kn = Kb or 1).
    r: (Kb,) total correct.  delta: (B,) the lattice shift per ability vector, logits.

numba is a dependency of pytensor (so of pymc); compiled functions are cached on disk (``cache=True``), so only a
machine's first large fit pays the compilation (a few seconds).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, fastmath=False)
def _window_ell(base, tables, codes, idx, nodes, r, delta, b, k, buf):
    """Fill buf[:G] with key k's log density on its window at ability vector b; return the peak.

    A window is a run of consecutive lattice nodes (:func:`benchfill.irt.fast.make_block`: starts + 0..G-1), so it
    is read as the run from its first node's index: contiguous loads, which the loops below compile to SIMD (an
    index gather per node did not, ~3 ns a node on MMLU-Pro's windows). The key's terms are added one run at a
    time (one pass each measured faster than all of them in one pass, 8 runs with zeros for the missing)."""
    G = idx.shape[1]
    kn = k if nodes.shape[0] > 1 else 0
    first = idx[k, 0]
    d = delta[b]
    rk = r[k]
    base_run = base[b, first : first + G]
    node_run = nodes[kn]
    for g in range(G):
        buf[g] = base_run[g] - rk * (node_run[g] + d)
    for q in range(codes.shape[1]):
        row = tables[codes[k, q], b, first : first + G]
        for g in range(G):
            buf[g] += row[g]
    peak = -np.inf
    for g in range(G):
        peak = max(peak, buf[g])
    return peak


@njit(cache=True, nogil=True)
def window_shifted(base, tables, codes, idx, nodes, r, delta, ell, peak):
    """ell[b, k, :] = key k's log density on its window at ability vector b minus its peak; peak[b, k] = the peak.

    numba's scalar exp is ~8x slower than numpy's SIMD one, so the exponentials are left to the caller."""
    B = base.shape[0]
    Kb, G = idx.shape
    for b in range(B):
        for k in range(Kb):
            buf = ell[b, k]
            pk = _window_ell(base, tables, codes, idx, nodes, r, delta, b, k, buf)
            for g in range(G):
                buf[g] -= pk
            peak[b, k] = pk


@njit(cache=True, nogil=True)
def cell_logs(base, tables, codes, idx, nodes, r, delta, log_e0, jump, ell, peak):
    """The exponents of :func:`benchfill.irt.fast.cell_masses`, per (ability vector b, key k, cell c):
    log_e0 = shifted log density at the cell's left node - (mean second difference) / 12, and jump = the log
    density's (clipped) rise across the cell. Returns the largest end-node-to-peak ratio (the coverage check).

    ``ell``, ``peak``: (B, Kb, G) and (B, Kb) to receive :func:`window_shifted`'s outputs from the same pass (an
    independence chain's log density and difficulty draws of one proposal), or (0, 0, 0) and (0, 0): not wanted."""
    B = base.shape[0]
    Kb, G = idx.shape
    C = G - 1
    buf = np.empty(G)
    d1 = np.empty(C)
    edge = -np.inf
    shifted = ell.shape[0] > 0
    for b in range(B):
        for k in range(Kb):
            pk = _window_ell(base, tables, codes, idx, nodes, r, delta, b, k, buf)
            if shifted:
                row = ell[b, k]
                for g in range(G):
                    row[g] = buf[g] - pk
                peak[b, k] = pk
            end = max(buf[0], buf[G - 1]) - pk
            if end > edge:
                edge = end
            for c in range(C):
                d1[c] = buf[c + 1] - buf[c]
            out_e0, out_jump = log_e0[b, k], jump[b, k]
            # mean second difference at the cell's two ends (one-sided at the window's ends): the end cells apart,
            # so the interior loop has no branch and compiles to SIMD
            out_e0[0] = buf[0] - pk - (d1[1] - d1[0]) / 12.0
            for c in range(1, C - 1):
                out_e0[c] = buf[c] - pk - 0.5 * (d1[c + 1] - d1[c - 1]) / 12.0
            out_e0[C - 1] = buf[C - 1] - pk - (d1[C - 1] - d1[C - 2]) / 12.0
            for c in range(C):
                out_jump[c] = min(max(d1[c], -700.0), 700.0)
    return edge


@njit(cache=True, nogil=True)
def _stretch(u, stretch):
    """phi(u) of :class:`benchfill.irt.lattice_map.LatticeMap` with ``stretch`` = (t_lo, t_hi, k_lo, k_hi, w)."""
    t_lo, t_hi, k_lo, k_hi, w = stretch[0], stretch[1], stretch[2], stretch[3], stretch[4]
    x, z = (u - t_hi) / w, (t_lo - u) / w
    # softplus written as numpy's logaddexp(0, x) computes it
    return u + k_hi * w * (max(x, 0.0) + np.log1p(np.exp(-abs(x)))) - k_lo * w * (max(z, 0.0) + np.log1p(np.exp(-abs(z))))


@njit(cache=True, nogil=True)
def draws_from_cells(e0, jump, exp_jump, nodes, delta, h, key_ptr, key_pos, items, u, out, row0, idx, u0, stretch):
    """Inverse-CDF draws of b for every item of a block at each of the B ability vectors, as
    :func:`benchfill.irt.fast.cell_draws` does: cell masses h e0 (e^jump - 1) / jump, then each of a key's
    items inverts its own uniform inside its cell.

    Args:
        e0, jump, exp_jump: (B, Kb, C) from :func:`cell_logs` (e0 = exp(log_e0), exp_jump = exp(jump)).
        key_ptr: (Kb + 1,) CSR pointers: the items of local key k are key_pos[key_ptr[k]:key_ptr[k + 1]].
        key_pos: positions into ``items`` (and the columns of ``u``).
        items: (N,) output column of each of the block's items.  u: (B, N) uniforms in [0, 1).
        out: (rows, I) draws; ability vector b writes row ``row0 + b``.
        idx: (Kb, G) lattice index of each window node.  u0: the lattice's first node in u.
        stretch: (t_lo, t_hi, k_lo, k_hi, w) of a stretched lattice (:class:`benchfill.irt.lattice_map.LatticeMap`;
            both k zero: a uniform one), whose draws are placed in u and mapped to b.
    """
    B, Kb, C = e0.shape
    kn_many = nodes.shape[0] > 1
    stretched = stretch[2] != 0.0 or stretch[3] != 0.0
    cdf = np.empty(C)
    for b in range(B):
        shift = delta[b]
        for k in range(Kb):
            p0, p1 = key_ptr[k], key_ptr[k + 1]
            if p0 == p1:
                continue
            # the cells' running mass, left unnormalised: a uniform is compared as u * total (no division per cell)
            total = 0.0
            for c in range(C):
                dl = jump[b, k, c]
                if abs(dl) < 1e-3:
                    factor = 1.0 + dl * (0.5 + dl / 6.0)
                else:
                    factor = (exp_jump[b, k, c] - 1.0) / dl
                total += h * e0[b, k, c] * factor
                cdf[c] = total
            kn = k if kn_many else 0
            for q in range(p0, p1):
                pos = key_pos[q]
                target = u[b, pos] * total
                # first cell whose running mass exceeds the target (the last cell catches everything)
                lo, hi = 0, C - 1
                while lo < hi:
                    mid = (lo + hi) // 2
                    if cdf[mid] > target:
                        hi = mid
                    else:
                        lo = mid + 1
                prev = cdf[lo - 1] if lo > 0 else 0.0
                rho = (target - prev) / (h * max(e0[b, k, lo], 1e-300))
                dl = jump[b, k, lo]
                if abs(dl) < 1e-9:
                    t = rho
                else:
                    t = np.log1p(max(dl * rho, -1.0 + 1e-16)) / dl
                t = min(max(t, 0.0), 1.0)
                if stretched:
                    out[row0 + b, items[pos]] = _stretch(u0 + h * (idx[k, lo] + t), stretch) + shift
                else:
                    out[row0 + b, items[pos]] = nodes[kn, lo] + shift + h * t


# ---------------------------------------------------------------------------- sums of softplus (Gibbs conditionals)

PRODUCT_RUN = 16  # terms multiplied before one log: each factor is in [1, 2], so a run stays below 2^16


@njit(cache=True, nogil=True)
def softplus_sums_at(v, w, x, out):
    """out[k] = sum_j w_j softplus(v_j - x_k), nats, for values v (J,), weights w (J,) and points x (L,).

    softplus(d) = max(d, 0) + log(1 + e^-|d|); with equal weights the logs of PRODUCT_RUN factors (1 + e^-|d|)
    are taken as the log of their product, so a term costs one exponential instead of an exponential and a log
    (the two cost about the same on a CPU whose numpy has no vector exp). Each product has a relative round-off
    of ~PRODUCT_RUN ulps, i.e. ~4e-15 nats per run. (1 + e^-|d|) drops e^-|d| below 1.1e-16, an absolute error
    of at most that per term. Unequal weights take w_j log1p(e^-|d|) term by term."""
    J = v.shape[0]
    equal = True
    for j in range(1, J):
        if w[j] != w[0]:
            equal = False
            break
    for k in range(x.shape[0]):
        xk = x[k]
        lin = 0.0
        logs = 0.0
        if equal:
            prod = 1.0
            for j in range(J):
                d = v[j] - xk
                if d > 0.0:
                    lin += d
                    d = -d
                prod *= 1.0 + np.exp(d)
                if j % PRODUCT_RUN == PRODUCT_RUN - 1:
                    logs += np.log(prod)
                    prod = 1.0
            out[k] = (w[0] * (lin + logs + np.log(prod))) if J > 0 else 0.0
        else:
            for j in range(J):
                d = v[j] - xk
                if d > 0.0:
                    lin += w[j] * d
                    d = -d
                logs += w[j] * np.log1p(np.exp(d))
            out[k] = lin + logs


@njit(cache=True, nogil=True)
def chebyshev_series_rows(coef, t, out):
    """out[k, i] = sum_m coef[k, m] T_m(t[i]) for K series ``coef`` (K, M) at t (n,) in [-1, 1], as numpy's chebval:
    Clenshaw's recurrence run along the points, one series at a time (no dependence from point to point, so the
    inner loop runs in SIMD lanes; its two running rows stay in cache), where chebval makes M passes over (K, n)
    temporaries; for one series 5-8x faster than the recurrence run per point (in-process, n 60-2,000)."""
    n = t.shape[0]
    m = coef.shape[1]
    x2 = 2.0 * t
    b1 = np.empty(n)
    b2 = np.empty(n)
    for k in range(coef.shape[0]):
        b1[:] = 0.0
        b2[:] = 0.0
        for j in range(m - 1, 0, -1):
            c = coef[k, j]
            for i in range(n):
                v = c + x2[i] * b1[i] - b2[i]
                b2[i] = b1[i]
                b1[i] = v
        c0 = coef[k, 0]
        for i in range(n):
            out[k, i] = c0 + t[i] * b1[i] - b2[i]


# ---------------------------------------------------------------------------- posterior predictive replicates

TWO_POW_M32 = 2.0**-32


@njit(cache=True, nogil=True)
def ppc_counts_1pl(F, E, c, n, bits, y, row, col):
    """One replicated count matrix of a 1PL (with fixed guessing c) for the checks R3 / R4, fused in one pass.

    y[j, i] = #{t < n[j, i] : u_tji < p_ji}, with p_ji = c_i + (1 - c_i) sigmoid(theta_j - b_i) and
    u_tji = bits[t, j, i] / 2^32 (uniform on the 2^32 grid). Written without a division or an exponential per
    cell: F = exp(-theta) (J,), E = exp(b) (I,), so sigmoid = 1 / (1 + E_i F_j), and u < p is tested as
    (u - c_i) (1 + E_i F_j) < 1 - c_i (the same inequality multiplied by 1 + E_i F_j > 0). When E_i F_j
    overflows (p = c_i) the product is -inf, +inf or nan (u = c_i): a hit exactly when u < c_i, as it should be
    (E and F must be finite: the caller clips their exponents).

    Args:
        F, E: as above, float64.  c: (I,) guessing rates (zeros without guessing).  n: (J, I) trials.
        bits: (T, J, I) uint32, T >= max trials.  y: (J, I) int8 output.
        row, col: (J,) / (I,) int64 outputs, += each model's / item's replicated total (size 0: skipped).
    """
    T, J, I = bits.shape
    for j in range(J):
        fj = F[j]
        for i in range(I):
            y[j, i] = 0
        for t in range(T):
            for i in range(I):
                u = bits[t, j, i] * TWO_POW_M32
                hit = ((u - c[i]) * (1.0 + E[i] * fj) < 1.0 - c[i]) & (t < n[j, i])
                y[j, i] += np.int8(hit)
    if row.shape[0] > 0:
        for j in range(J):
            s = 0
            for i in range(I):
                s += y[j, i]
            row[j] += s
    if col.shape[0] > 0:
        for j in range(J):
            for i in range(I):
                col[i] += y[j, i]


@njit(cache=True, nogil=True)
def item_rest_correlations_one(y, n, out):
    """:func:`benchfill.irt.checks.item_rest_correlations` of one (J, I) count matrix into ``out`` (I,), in three
    passes over the cells (the same centred sums; NaN where fewer than 3 models answered or a side has no
    variance)."""
    J, I = n.shape
    total = np.zeros(J)
    count = np.zeros(J)
    for j in range(J):
        for i in range(I):
            if n[j, i] > 0:
                total[j] += y[j, i] / n[j, i]
                count[j] += 1.0
    m = np.zeros(I)
    sx = np.zeros(I)
    sy = np.zeros(I)
    for j in range(J):
        den = max(count[j] - 1.0, 1.0)
        for i in range(I):
            if n[j, i] > 0:
                rate = y[j, i] / n[j, i]
                m[i] += 1.0
                sx[i] += rate
                sy[i] += (total[j] - rate) / den
    for i in range(I):
        mi = max(m[i], 1.0)
        sx[i] /= mi
        sy[i] /= mi
    sxx = np.zeros(I)
    syy = np.zeros(I)
    sxy = np.zeros(I)
    for j in range(J):
        den = max(count[j] - 1.0, 1.0)
        for i in range(I):
            if n[j, i] > 0:
                rate = y[j, i] / n[j, i]
                x = rate - sx[i]
                z = (total[j] - rate) / den - sy[i]
                sxx[i] += x * x
                syy[i] += z * z
                sxy[i] += x * z
    for i in range(I):
        d = np.sqrt(sxx[i] * syy[i])
        out[i] = sxy[i] / d if (d > 1e-12 and m[i] >= 3) else np.nan


# ---------------------------------------------------------------------------- per-pattern moments (the null)


@njit(cache=True, nogil=True)
def pattern_key_windows(base, pattern, r, grid, cut, peak, first, last):
    """Each key's window on a uniform grid (G,), for keys given as (pattern, total): key e's log density at the
    draws' centre is base[pattern[e]] - r[e] grid (base: (P, G), nats); its window [first[e], last[e]) is the
    nodes from the first to the last within cut[pattern[e]] of its peak, which goes to peak[e]."""
    G = grid.shape[0]
    for e in range(pattern.shape[0]):
        p = pattern[e]
        re = r[e]
        mx = -np.inf
        for g in range(G):
            v = base[p, g] - re * grid[g]
            if v > mx:
                mx = v
        floor = mx - cut[p]
        lo = 0
        while base[p, lo] - re * grid[lo] < floor:
            lo += 1
        hi = G - 1
        while base[p, hi] - re * grid[hi] < floor:
            hi -= 1
        peak[e], first[e], last[e] = mx, lo, hi + 1


@njit(cache=True, nogil=True)
def pattern_key_moments(base, ratio, pattern, r, shift, first, last, grid, m1, m2):
    """Add each key's normalised first and second moments on its window at one ability draw to m1, m2 (E,):
    weights p_g = exp(base[pattern[e], g] - r[e] grid[g] - shift[e]) on a uniform grid (G,) of spacing h.

    One exponential per key: along the window p_{g+1} = p_g ratio[pattern, g] exp(-r h), with ratio (P, G - 1)
    = exp(base[:, g + 1] - base[:, g]) computed once per draw for every pattern (numpy's vector exp), so the
    ~60 nodes of a window cost multiplications only (numba's exp is scalar, ~8x numpy's here). The product
    carries ~1 ulp per node plus the round-off of each difference of base (|base| ~ 10^3 nats: ~1e-13 nats):
    a relative error of ~1e-11 at a window's far end, against mass below e^-36 there."""
    h = grid[1] - grid[0]
    for e in range(pattern.shape[0]):
        p = pattern[e]
        f = first[e]
        stop = last[e]
        q = np.exp(-r[e] * h)
        w = np.exp(base[p, f] - r[e] * grid[f] - shift[e])
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        for g in range(f, stop):
            x = grid[g]
            s0 += w
            s1 += w * x
            s2 += w * (x * x)
            if g + 1 < stop:
                w *= ratio[p, g] * q
        m1[e] += s1 / s0
        m2[e] += s2 / s0
