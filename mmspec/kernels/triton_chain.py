"""The Triton sources of :mod:`.chain`'s kernels, undecorated: :func:`.chain.compiled_kernels` jits them for the GPU or
for Triton's CPU interpreter (which patches ``tl`` in this module's namespace). Imported only when a kernel runs."""

import triton.language as tl


def greedy_chain_kernel(x_ptr, am_ptr, n_ptr, next_ptr, K, BLOCK_K: tl.constexpr):
    b = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)  # [BLOCK_K] draft positions
    live = offs < K
    x = tl.load(x_ptr + b * K + offs, mask=live, other=0)
    a = tl.load(am_ptr + b * (K + 1) + offs, mask=live, other=0)
    n = tl.min(tl.where(live & (x != a), offs, K), axis=0)  # first rejection (K: none)
    tl.store(n_ptr + b, n.to(tl.int64))
    tl.store(next_ptr + b, tl.load(am_ptr + b * (K + 1) + n))


def speculative_chain_kernel(x_ptr, p_ptr, q_ptr, u_ptr, e_ptr, n_ptr, next_ptr, K, V, EMPTY_MASS,
                             HAS_Q: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)  # [BLOCK_K]
    live = offs < K
    x = tl.load(x_ptr + b * K + offs, mask=live, other=0)
    p_x = tl.load(p_ptr + (b * (K + 1) + offs) * V + x, mask=live, other=0.0).to(tl.float64)
    if HAS_Q:
        q_x = tl.load(q_ptr + (b * K + offs) * V + x, mask=live, other=1.0).to(tl.float64)
    else:
        q_x = tl.full([BLOCK_K], 1.0, tl.float64)
    u = tl.load(u_ptr + b * K + offs, mask=live, other=2.0)
    n = tl.min(tl.where(live & (u * q_x > p_x), offs, K), axis=0)  # first rejection (K: all accepted)
    drafted = n < K
    at = tl.minimum(n, K - 1)
    x_at = tl.load(x_ptr + b * K + at, mask=drafted & (K > 0), other=-1)  # the rejected draft (-1: none)
    p_row = p_ptr + (b * (K + 1) + n) * V
    q_row = q_ptr + (b * K + at) * V
    # pass 1: the residual's mass (a numerically empty residual falls back to p_n)
    mass = tl.zeros([BLOCK_V], tl.float32)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        ok = cols < V
        p_n = tl.load(p_row + cols, mask=ok, other=0.0)
        if HAS_Q:
            q_n = tl.load(q_row + cols, mask=ok & drafted, other=0.0)
        else:
            q_n = tl.where(cols == x_at, 1.0, 0.0)
        mass += tl.maximum(p_n - q_n, 0.0)
    empty = tl.sum(mass, axis=0) <= EMPTY_MASS
    # pass 2: the exponential race argmax(w / e), first maximum on ties
    best = tl.full([], -1.0, tl.float32)
    best_idx = tl.full([], 0, tl.int64)
    for v0 in range(0, V, BLOCK_V):
        cols = v0 + tl.arange(0, BLOCK_V)
        ok = cols < V
        p_n = tl.load(p_row + cols, mask=ok, other=0.0)
        if HAS_Q:
            q_n = tl.load(q_row + cols, mask=ok & drafted, other=0.0)
        else:
            q_n = tl.where(cols == x_at, 1.0, 0.0)
        w = tl.where(empty, p_n, tl.maximum(p_n - q_n, 0.0))
        e = tl.load(e_ptr + b * V + cols, mask=ok, other=1.0)
        score = tl.where(ok, w / e, -1.0)
        block_best = tl.max(score, axis=0)
        block_idx = tl.argmax(score, axis=0, tie_break_left=True).to(tl.int64) + v0
        better = block_best > best
        best_idx = tl.where(better, block_idx, best_idx)
        best = tl.where(better, block_best, best)
    tl.store(n_ptr + b, n.to(tl.int64))
    tl.store(next_ptr + b, best_idx)
