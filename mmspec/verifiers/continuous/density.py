"""Density-ratio acceptance for continuous tokens (CSPD): METHODS.md §5."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..base import VERIFIERS, first_rejection
from .base import (
    core_vs_reference, F64, ContinuousVerdict, BatchedDensity, GaussianDensity, GaussianMixtureDensity, DensityProposal, DensityScores, ContinuousVerifier, _check_int, _check_density_pair, _expect_shape,
)  # fmt: skip


# 2. Density-ratio acceptance for continuous tokens (CSPD).
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class _Stops:
    """Where each row's chain stops and the densities there (shared by the core and the residual sampler)."""

    n: torch.Tensor  # [B] int64 accepted drafts
    need: torch.Tensor  # [B] bool: a new sample is drawn at position n (a rejection, or the bonus position)
    bonus: torch.Tensor  # [B] bool: n == K and the target has a bonus position (q = 0 there)
    log_ratio: torch.Tensor  # [B, K] float64 log p(x) − log q(x)
    p_stop: BatchedDensity  # batch [B, 1]: p at position n
    q_stop: BatchedDensity  # batch [B, 1]: q at position min(n, K−1) (ignored where bonus)

    def rows(self, index: torch.Tensor) -> _Stops:
        return _Stops(self.n[index], self.need[index], self.bonus[index], self.log_ratio[index],
                      self.p_stop.rows(index), self.q_stop.rows(index))  # fmt: skip


def _draft_stops(proposal: DensityProposal, scores: DensityScores, uniforms: torch.Tensor) -> _Stops:
    x = proposal.samples  # [B, K, D]
    b, k, _ = x.shape
    _expect_shape("uniforms", uniforms, (b, k), f"[B, K] = {[b, k]}")
    p, q = scores.density, proposal.density
    has_bonus = p.batch_shape[1] == k + 1
    log_ratio = p.positions(slice(0, k)).log_prob(x) - q.log_prob(x)  # [B, K]
    n = first_rejection(torch.log1p(-uniforms.to(F64)) <= log_ratio)  # [B]
    bonus = (n == k) & has_bonus  # [B]
    need = (n < k) | bonus  # [B]
    return _Stops(n, need, bonus, log_ratio, p.take(n.clamp_max(p.batch_shape[1] - 1)), q.take(n.clamp_max(k - 1)))


def _residual_accept(stops: _Stops, candidates: torch.Tensor, candidate_uniforms: torch.Tensor) -> torch.Tensor:
    """Rejection sampling of norm(max(0, p − q)) from p: candidate y ~ p is kept iff u < max(0, 1 − q(y)/p(y)).

    candidates [B, N, D] drawn from p at each row's stop position, candidate_uniforms [B, N] -> keep [B, N] bool.
    At the bonus position q = 0, so every candidate is kept (the first one is a plain sample of p_{K+1}).
    """
    points = candidates.transpose(0, 1)[:, :, None]  # [N, B, 1, D]
    log_p = stops.p_stop.log_prob(points)[..., 0].T  # [B, N]
    log_q = stops.q_stop.log_prob(points)[..., 0].T.masked_fill(stops.bonus[:, None], -math.inf)  # [B, N]
    keep_prob = (-torch.expm1(log_q - log_p)).clamp_min(0)  # max(0, 1 − q/p) [B, N]
    return candidate_uniforms.to(F64) < keep_prob


def density_ratio(proposal: DensityProposal, scores: DensityScores, uniforms: torch.Tensor, candidates: torch.Tensor,
                  candidate_uniforms: torch.Tensor) -> ContinuousVerdict:  # fmt: skip
    """CSPD density-ratio acceptance along K continuous drafts, with the residual sampled by rejection from p.

    Accept x_i ~ q_i iff ``log(1 − u_i) <= log p_i(x_i) − log q_i(x_i)`` (probability min(1, p/q)); stop at the
    first rejection n and replace x_n by a sample of norm(max(0, p_n − q_n)): the first candidate y_j ~ p_n with
    ``v_j < max(0, 1 − q_n(y_j)/p_n(y_j))``. If all K drafts are accepted and the target has a bonus position
    K+1, next_states is a sample of p_{K+1} (the first candidate); without one it is x_K.

    Pre-drawn randomness: uniforms [B, K] float64; candidates [B, N, D] (N >= 1) drawn from p at each row's stop
    position (as :meth:`DensityRatioVerifier.draw` does; entries of rows that need none are ignored, and a
    candidate uniform of 1.0 marks padding that is never kept); candidate_uniforms [B, N] float64. If no
    candidate passes, the last one is returned unconditionally (an
    unconditioned sample of p: the documented fallback) and the row is flagged in ``residual_exhausted``.

    extras: ``accept_prob`` [B, K] min(1, p/q) per draft, ``new_state`` [B] bool (next_states is a residual or bonus
    sample), ``residual_exhausted`` [B] bool, ``residual_draws`` [B] int64 candidates consumed (0 if none needed).
    """
    _check_density_pair(proposal, scores)
    x = proposal.samples  # [B, K, D]
    b, k, _ = x.shape
    _expect_shape("candidates", candidates, (b, None, x.shape[2]), f"[B, N, D] = {[b, 'N', x.shape[2]]}")
    n_cand = candidates.shape[1]
    if n_cand < 1:
        raise ValueError("candidates: expected at least one residual candidate per row (N >= 1), got N = 0")
    _expect_shape("candidate_uniforms", candidate_uniforms, (b, n_cand), f"[B, N] = {[b, n_cand]}")
    stops = _draft_stops(proposal, scores, uniforms)
    keep = _residual_accept(stops, candidates, candidate_uniforms)  # [B, N]
    first = first_rejection(~keep)  # [B] index of the first kept candidate (N if none)
    exhausted = stops.need & (first == n_cand)  # [B]
    index = first.clamp_max(n_cand - 1)  # [B]
    rows = torch.arange(b, device=x.device)
    residual = candidates[rows, index].to(x.dtype)  # [B, D]
    next_states = torch.where(stops.need[:, None], residual, x[:, -1])  # [B, D]
    extras = {
        "accept_prob": stops.log_ratio.clamp_max(0).exp(),
        "new_state": stops.need,
        "residual_exhausted": exhausted,
        "residual_draws": torch.where(stops.need, index + 1, torch.zeros_like(index)),
    }
    return ContinuousVerdict(stops.n, next_states, extras)


def _at(density: BatchedDensity, row: int, pos: int) -> BatchedDensity:
    return density.rows(slice(row, row + 1)).positions(slice(pos, pos + 1))


def reference_density_ratio(proposal: DensityProposal, scores: DensityScores, uniforms: torch.Tensor,
                            candidates: torch.Tensor, candidate_uniforms: torch.Tensor) -> ContinuousVerdict:  # fmt: skip
    """Per-row, per-position loop of :func:`density_ratio` (same randomness, same result)."""
    _check_density_pair(proposal, scores)
    x = proposal.samples
    b, k, _ = x.shape
    has_bonus = scores.density.batch_shape[1] == k + 1
    counts, states, exhausted = [], [], []
    for row in range(b):
        n = k
        for i in range(k):
            xi = x[row : row + 1, i : i + 1]  # [1, 1, D]
            log_p = float(_at(scores.density, row, i).log_prob(xi))
            log_q = float(_at(proposal.density, row, i).log_prob(xi))
            if not math.log1p(-float(uniforms[row, i])) <= log_p - log_q:
                n = i
                break
        counts.append(n)
        if n == k and not has_bonus:
            states.append(x[row, k - 1])
            exhausted.append(False)
            continue
        p_n = _at(scores.density, row, n)
        q_n = _at(proposal.density, row, n) if n < k else None
        chosen = None
        for j in range(candidates.shape[1]):
            y = candidates[row : row + 1, j : j + 1]  # [1, 1, D]
            log_p = float(p_n.log_prob(y))
            keep_prob = 1.0 if q_n is None else max(0.0, -math.expm1(float(q_n.log_prob(y)) - log_p))
            if float(candidate_uniforms[row, j]) < keep_prob:
                chosen = j
                break
        exhausted.append(chosen is None)
        states.append(candidates[row, candidates.shape[1] - 1 if chosen is None else chosen].to(x.dtype))
    device = x.device
    num_accepted = torch.tensor(counts, dtype=torch.int64, device=device)
    extras = {"residual_exhausted": torch.tensor(exhausted, dtype=torch.bool, device=device)}
    return ContinuousVerdict(num_accepted, torch.stack(states), extras)


@VERIFIERS.register("density-ratio")
class DensityRatioVerifier(ContinuousVerifier):
    """CSPD density-ratio acceptance of K continuous drafts with a rejection-sampled residual.

    Parameters: ``max_rounds`` (default 256) rounds of ``candidates_per_round`` (default 4) candidates from p
    for the residual, N = their product in all; rows still without one after N draws get an unconditioned p
    sample (flagged in ``extras["residual_exhausted"]``), which moves the output law by at most TV <= 1/(e(N−1))
    per call (the worst case over p, q; typically far less), or, with ``strict=True``, raise RuntimeError.
    The expected number of candidates for a row that needs one is 1/TV(p, q).
    """

    lossless = True
    bounds = "exact (output law = p) unless the residual sampler exhausts its N draws: flagged p fallback, TV <= 1/(e(N-1))"
    paper = "CSPD: Wang et al. 2024, Continuous Speculative Decoding for Autoregressive Image Generation"

    def __init__(self, max_rounds: int = 256, candidates_per_round: int = 4, strict: bool = False):
        _check_int("density-ratio", "max_rounds", max_rounds, 1)
        _check_int("density-ratio", "candidates_per_round", candidates_per_round, 1)
        if not isinstance(strict, bool):
            raise TypeError(f"density-ratio: strict must be a bool, got {strict!r} ({type(strict).__name__})")
        self.max_rounds, self.candidates_per_round, self.strict = max_rounds, candidates_per_round, strict

    def check(self, proposal, scores):
        _check_density_pair(proposal, scores)
        proposal.density.validate("DensityProposal.density")
        scores.density.validate("DensityScores.density")

    def draw(self, proposal, scores, generator=None):
        """Draft uniforms, then rounds of ``candidates_per_round`` residual candidates from p at the stop position
        of every row that still needs one, until each has a kept candidate or ``max_rounds`` is reached (only
        this loop runs in Python). Rows that need no more are padded with zeros and uniforms of 1.0 (never kept),
        so the core sees [B, N] with N = rounds used × candidates_per_round."""
        x = proposal.samples
        b, k, d = x.shape
        c = self.candidates_per_round
        uniforms = torch.rand((b, k), dtype=F64, device=x.device, generator=generator)
        stops = _draft_stops(proposal, scores, uniforms)
        active = stops.need.clone()  # [B] rows still without a kept candidate
        candidates, candidate_uniforms = [], []
        for _ in range(self.max_rounds):
            cand = torch.zeros((b, c, d), dtype=x.dtype, device=x.device)  # [B, C, D]
            cand_u = torch.ones((b, c), dtype=F64, device=x.device)  # [B, C]
            index = active.nonzero().flatten()  # [R]
            if index.numel():
                sub = stops.rows(index)
                draws = sub.p_stop.sample(generator, (c,))[:, :, 0].transpose(0, 1).to(x.dtype)  # [R, C, D]
                draws_u = torch.rand((index.numel(), c), dtype=F64, device=x.device, generator=generator)
                cand[index], cand_u[index] = draws, draws_u
                active[index[_residual_accept(sub, draws, draws_u).any(1)]] = False
            candidates.append(cand)
            candidate_uniforms.append(cand_u)
            if not bool(active.any()):
                break
        return {"uniforms": uniforms, "candidates": torch.cat(candidates, 1),
                "candidate_uniforms": torch.cat(candidate_uniforms, 1)}  # fmt: skip

    def core(self, proposal, scores, uniforms, candidates, candidate_uniforms):
        verdict = density_ratio(proposal, scores, uniforms, candidates, candidate_uniforms)
        if self.strict and bool(verdict.extras["residual_exhausted"].any()):
            rows = verdict.extras["residual_exhausted"].nonzero().flatten().tolist()
            raise RuntimeError(f"density-ratio: residual rejection sampling found no sample within "
                               f"{candidates.shape[1]} candidates for rows {rows} (p and q nearly equal there); raise "
                               f"max_rounds/candidates_per_round or use strict=False (flagged fallback to p)")  # fmt: skip
        return verdict

    def reference(self, proposal, scores, uniforms, candidates, candidate_uniforms):
        return reference_density_ratio(proposal, scores, uniforms, candidates, candidate_uniforms)


# ----------------------------------------------------------------------------------------------------------------
# 3. SpeCa-style forecast gating (lossy, deterministic).


def _bench_density(batch, k, dim, g):
    mean = torch.randn(batch, k + 1, dim, generator=g)
    q = GaussianDensity(mean[:, :k], 1.0)
    offsets = torch.randn(batch, k + 1, 2, dim, generator=g) / math.sqrt(dim)  # two components near q's mean
    p = GaussianMixtureDensity(torch.rand(batch, k + 1, 2, generator=g) + 0.1, mean[:, :, None] + offsets,
                               torch.ones(batch, k + 1, 2))  # fmt: skip
    return DensityProposal(q.sample(g), q), DensityScores(p)


bench_cases = functools.partial(core_vs_reference, "density-ratio", _bench_density)  # (batch, k, dim, seed) -> [BenchCase]
