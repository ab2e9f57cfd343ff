"""Compute kernels against their torch references: on CPU through Triton's interpreter (TRITON_INTERPRET=1, fp32, small
shapes), on CUDA when present (``gpu`` marker), the same verdicts from the same pre-drawn randomness; plus the
dispatcher, and a distribution test of the kernel's sampling with a broken variant that fails it."""

from __future__ import annotations

import os

import pytest
import torch

from mmspec.kernels import (HAS_TRITON, greedy_chain, greedy_chain_ref, greedy_chain_triton, speculative_chain,
                            speculative_chain_ref, speculative_chain_triton)  # fmt: skip

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
interpreter = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="Triton's CPU interpreter is off: run with TRITON_INTERPRET=1 (tests/conftest.py "
                                        "sets it when there is no CUDA device)")  # fmt: skip


def _inputs(b, k, v, seed, with_q=True, agree=0.7, device="cpu"):
    """Drafts that the target often accepts: p close to q, drafts drawn from q."""
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(b, k + 1, v, generator=g)
    p = torch.softmax(logits, -1)  # [B, K+1, V]
    q = torch.softmax(logits[:, :k] + torch.randn(b, k, v, generator=g) / agree, -1)  # [B, K, V]
    x = torch.multinomial(q.reshape(-1, v), 1, generator=g).view(b, k) if k else torch.zeros(b, 0, dtype=torch.long)
    u = torch.rand(b, k, dtype=torch.float64, generator=g)
    e = torch.empty(b, v).exponential_(generator=g)
    t = {"x": x, "p": p, "q": q if with_q else None, "u": u, "e": e}
    return {n: (None if a is None else a.to(device)) for n, a in t.items()}


SHAPES = [(4, 5, 37), (3, 1, 16), (2, 0, 9), (5, 8, 130)]  # incl. K = 0 and a vocabulary spanning several blocks


@pytest.mark.parametrize("b,k,v", SHAPES)
@interpreter
def test_greedy_kernel_equals_reference_in_the_interpreter(b, k, v):
    g = torch.Generator().manual_seed(b * 100 + k)
    argmax = torch.randint(v, (b, k + 1), generator=g)
    x = torch.where(torch.rand(b, k, generator=g) < 0.7, argmax[:, :k], torch.randint(v, (b, k), generator=g))
    n, nxt = greedy_chain_triton(x, argmax)
    n_ref, nxt_ref = greedy_chain_ref(x, argmax)
    assert torch.equal(n, n_ref) and torch.equal(nxt, nxt_ref)


@interpreter
@pytest.mark.parametrize("with_q", [True, False], ids=["q", "one-hot q"])
@pytest.mark.parametrize("b,k,v", SHAPES)
def test_speculative_kernel_equals_reference_in_the_interpreter(b, k, v, with_q):
    for seed in range(3):
        t = _inputs(b, k, v, seed, with_q)
        n, nxt = speculative_chain_triton(**t, block_v=32)  # several vocabulary blocks
        n_ref, nxt_ref = speculative_chain_ref(**t)
        assert torch.equal(n, n_ref), (seed, n, n_ref)
        assert torch.equal(nxt, nxt_ref), (seed, nxt, nxt_ref)


@interpreter
def test_empty_residual_falls_back_to_p_in_the_kernel():
    """q = p exactly and a rejected draft: max(0, p - q) is empty, so the recovered token is sampled from p."""
    t = _inputs(3, 2, 20, 0)
    t["q"] = t["p"][:, :2].clone()
    t["u"] = torch.full((3, 2), 1.5, dtype=torch.float64)  # out of range on purpose: force the rejection q = p makes impossible
    n, nxt = speculative_chain_triton(**t)
    n_ref, nxt_ref = speculative_chain_ref(**t)
    assert torch.equal(n, torch.zeros(3, dtype=torch.long)) and torch.equal(n, n_ref) and torch.equal(nxt, nxt_ref)


def _first_token_law(fn, draws=1500):
    """Empirical law of the token emitted at position 1 by one verification of a 1-draft chain, against the exact
    target p_0: (chi-square p-value)."""
    from scipy import stats

    v = 6
    g = torch.Generator().manual_seed(0)
    p0 = torch.softmax(torch.randn(v, generator=g), -1)
    q0 = torch.softmax(torch.randn(v, generator=g), -1)
    b = draws
    x = torch.multinomial(q0, b, replacement=True, generator=g)[:, None]  # [B, 1] drafts from q
    p = torch.stack([p0, torch.full((v,), 1.0 / v)])[None].expand(b, 2, v).contiguous()
    q = q0[None, None].expand(b, 1, v).contiguous()
    u = torch.rand(b, 1, dtype=torch.float64, generator=g)
    e = torch.empty(b, v).exponential_(generator=g)
    n, nxt = fn(x, p, q, u, e)
    first = torch.where(n == 1, x[:, 0], nxt)  # the token committed at the draft's position
    counts = torch.bincount(first, minlength=v).double()
    return stats.chisquare(counts.numpy(), (p0.double() * b).numpy()).pvalue


@interpreter
def _correction_from_p(x, p, q, u, e):
    """A broken rule: the kernel's acceptance, but the correction sampled from p instead of the residual."""
    n, _ = speculative_chain_triton(x, p, q, u, e)
    return n, (p[torch.arange(x.shape[0]), n] / e).argmax(-1)


def test_kernel_samples_the_target_law_and_a_broken_variant_does_not():
    ok = _first_token_law(lambda *a: speculative_chain_triton(*a))
    broken = _first_token_law(_correction_from_p)
    assert ok > 1e-3, ok
    assert broken < 1e-6, broken


def test_dispatch_uses_the_reference_on_cpu():
    t = _inputs(4, 3, 25, 1)
    assert all(torch.equal(a, b) for a, b in zip(speculative_chain(**t), speculative_chain_ref(**t)))
    argmax = t["p"].argmax(-1)
    assert all(torch.equal(a, b) for a, b in zip(greedy_chain(t["x"], argmax), greedy_chain_ref(t["x"], argmax)))


@pytest.mark.gpu
@pytest.mark.parametrize("with_q", [True, False], ids=["q", "one-hot q"])
def test_kernels_equal_references_on_cuda(with_q):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for b, k, v in SHAPES + [(32, 8, 32000)]:
        t = _inputs(b, k, v, 0, with_q, device="cuda")
        assert all(torch.equal(a, c) for a, c in zip(speculative_chain_triton(**t), speculative_chain_ref(**t)))
        argmax = t["p"].argmax(-1)
        assert all(torch.equal(a, c) for a, c in zip(greedy_chain_triton(t["x"], argmax), greedy_chain_ref(t["x"], argmax)))
