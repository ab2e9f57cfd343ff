"""Chain verification, the core every exact token verifier runs (METHODS.md §1): a torch reference and a Triton kernel
for each op, computing the same thing from the same inputs.

- :func:`greedy_chain_ref`: accept the longest prefix with x_i == argmax p_i; the target's argmax at the stop;
- :func:`speculative_chain_ref`: accept x_i iff u_i * q_i(x_i) <= p_i(x_i) (float64, up to the first rejection), then
  sample the recovered token from the residual norm(max(0, p_n - q_n)) (q None: one-hot q, i.e. p without the
  rejected draft; at n = K the bonus from p_K) by an exponential race argmax(w / e), no normalisation.

All randomness (u [B, K] float64, e [B, V] float32 Exp(1)) is drawn by the caller, outside the kernel, as vLLM's
rejection sampler does, so kernel and reference can be compared exactly. The kernels run one program per row: the
acceptance walk over K, then two passes over the vocabulary in blocks (the residual's mass, which falls back to p_n
when numerically empty, then the race's argmax, the first maximum on ties as torch's).
"""

from __future__ import annotations

import torch

EMPTY = 1e-12  # a residual with less mass than this is numerically empty: sample p_n instead (never NaN, never uniform)


def first_rejection(accept: torch.Tensor) -> torch.Tensor:
    """accept [B, K] bool -> number of leading Trues per row, int64 [B] (0..K)."""
    return accept.to(torch.int64).cumprod(-1).sum(-1)


# ---------------------------------------------------------------------------------------------------------------
# torch references


def greedy_chain_ref(x: torch.Tensor, target_argmax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, K] drafts, target_argmax [B, K+1] -> (accepted n [B], the target's token at position n [B])."""
    n = first_rejection(x == target_argmax[:, : x.shape[1]])  # [B]
    return n, target_argmax.gather(1, n[:, None]).squeeze(1)


def token_probs(p: torch.Tensor, q: torch.Tensor | None, x: torch.Tensor):
    """p(x_i), q(x_i) in float64 at each draft position -> ([B, K], [B, K]); q None = one-hot q (q(x) = 1)."""
    k = x.shape[1]
    p_x = p[:, :k].gather(-1, x[..., None]).squeeze(-1).double()  # [B, K]
    q_x = torch.ones_like(p_x) if q is None else q.gather(-1, x[..., None]).squeeze(-1).double()  # [B, K]
    return p_x, q_x


def residual_weights(p: torch.Tensor, q: torch.Tensor | None, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """max(0, p_n - q_n) at each row's stop position n [B] -> unnormalised weights [B, V].

    q None = one-hot at the draft (p with x removed). At n = K (all accepted) q = 0: the bonus is drawn from p_K.
    A numerically empty residual falls back to p_n (never uniform, never NaN).
    """
    rows = torch.arange(x.shape[0], device=x.device)
    p_n = p[rows, n]  # [B, V]
    drafted = (n < x.shape[1])[:, None]  # [B, 1]; False at the bonus position
    at = n.clamp(max=max(x.shape[1] - 1, 0))  # [B] (only read where drafted)
    if x.shape[1] == 0:
        q_n = torch.zeros_like(p_n)
    elif q is None:
        q_n = torch.nn.functional.one_hot(x[rows, at], p.shape[-1]).to(p.dtype) * drafted  # [B, V]
    else:
        q_n = q[rows, at].to(p.dtype) * drafted  # [B, V]
    residual = (p_n - q_n).clamp_min(0)  # [B, V]
    return torch.where(residual.sum(-1, keepdim=True) <= EMPTY, p_n, residual)


def speculative_chain_ref(x, p, q, u, e) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, K]; p [B, K+1, V]; q [B, K, V] or None; u [B, K] float64 uniforms; e [B, V] Exp(1) noise ->
    (accepted n [B], recovered / bonus token [B])."""
    p_x, q_x = token_probs(p, q, x)  # [B, K]
    n = first_rejection(u * q_x <= p_x)  # [B]; u <= p/q without dividing by q = 0
    return n, (residual_weights(p, q, x, n).float() / e).argmax(-1)


# ---------------------------------------------------------------------------------------------------------------
# Triton kernels (built on first use; under TRITON_INTERPRET=1 they run on CPU tensors)


_COMPILED: dict[bool, tuple] = {}


def compiled_kernels() -> tuple:
    """(greedy_chain_kernel, speculative_chain_kernel) jitted for the GPU, or for Triton's CPU interpreter when the
    process runs with ``TRITON_INTERPRET=1`` (which must be set before triton is first imported: the tests' conftest
    sets it on machines without CUDA)."""
    import triton

    from . import triton_chain

    interpret = bool(triton.knobs.runtime.interpret)
    if interpret not in _COMPILED:
        _COMPILED[interpret] = (triton.jit(triton_chain.greedy_chain_kernel), triton.jit(triton_chain.speculative_chain_kernel))
    return _COMPILED[interpret]


def _block(n: int) -> int:
    return max(16, 1 << max(0, int(n) - 1).bit_length())


def greedy_chain_triton(x: torch.Tensor, target_argmax: torch.Tensor):
    """:func:`greedy_chain_ref` as a Triton kernel (int64 inputs)."""
    greedy, _ = compiled_kernels()
    b, k = x.shape
    n = torch.empty(b, dtype=torch.int64, device=x.device)
    nxt = torch.empty(b, dtype=torch.int64, device=x.device)
    greedy[(b,)](x.contiguous(), target_argmax.contiguous(), n, nxt, k, BLOCK_K=_block(k))
    return n, nxt


def speculative_chain_triton(x, p, q, u, e, block_v: int = 1024):
    """:func:`speculative_chain_ref` as a Triton kernel (float32 p / q / e, float64 u, int64 x)."""
    _, speculative = compiled_kernels()
    b, k = x.shape
    v = p.shape[-1]
    n = torch.empty(b, dtype=torch.int64, device=x.device)
    nxt = torch.empty(b, dtype=torch.int64, device=x.device)
    q_arg = p if q is None else q.contiguous()  # a placeholder pointer when there is no q (never read)
    speculative[(b,)](x.contiguous(), p.contiguous(), q_arg, u.contiguous(), e.contiguous(), n, nxt, k, v, EMPTY,
                      HAS_Q=q is not None, BLOCK_K=_block(k), BLOCK_V=min(block_v, _block(v)))  # fmt: skip
    return n, nxt
