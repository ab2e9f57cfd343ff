"""Tolerance rules for token drafts (speech and text): SSD's β, top-R rank and likelihood margin: METHODS.md §3.

Lossy: every rule trades exactness for acceptance, says what it still bounds (``bounds``), and has an exact special
case that reproduces a lossless rule of :mod:`mmspec.verifiers.exact` verdict for verdict:

=================== ======================================================== ==================================
rule                relaxation                                               exact special case
=================== ======================================================== ==================================
``ssd``             accept iff u < min(1, p/q) + β                           β = 0 -> ``speculative``
``top-r``           accept iff the draft is among the target's R best        R = 1 -> ``greedy`` (up to ties)
``margin``          accept while log p(x) >= max log p - margin (+ gate)     margin = 0 -> ``greedy`` (ties)
=================== ======================================================== ==================================

Each vectorised rule is a core function of explicit random draws; ``reference_*`` functions compute the same verdicts
with plain Python loops over rows and positions (torch ops along the vocabulary only): the test oracles and the
``mmspec bench verifiers`` baseline.
"""

from __future__ import annotations

import torch

from ..checks import check_int, check_param
from ..types import Verdict
from .base import (VERIFIERS, BenchCase, Verifier, first_rejection, reference_chain, require_chain,
                   require_probs)
from .exact import bench_inputs, chain_inputs, reference_ratio_chain, residual_noise, residual_weights, token_probs


# ---------------------------------------------------------------------------------------------------------------
# SSD tolerance (speech)
# ---------------------------------------------------------------------------------------------------------------
def ssd_core(x, p, q, beta: float, u, e) -> Verdict:
    """x [B, K], p [B, K+1, V], q [B, K, V] | None, u [B, K] uniforms, e [B, V] Exp(1) noise for the residual."""
    p_x, q_x = token_probs(p, q, x)  # [B, K]
    ratio = torch.where(q_x > 0, p_x / q_x.clamp_min(1e-300), torch.ones_like(p_x)).clamp(max=1.0)  # [B, K]
    n = first_rejection(u <= ratio + beta)  # [B]
    weights = residual_weights(p, q, x, n)  # [B, V]
    return Verdict(n, (weights.float() / e).argmax(-1))


@VERIFIERS.register("ssd")
class SSDToleranceVerifier(Verifier):
    """Speech speculative decoding tolerance: accept x_i iff u_i < min(1, p_i(x_i)/q_i(x_i)) + β.

    On rejection the residual norm(max(0, p - q)) is sampled as in exact speculative sampling. β = 0 is exact.
    """

    lossless = False
    bounds = "per-token acceptance probability = min(1, p/q + β); β = 0 is exact speculative sampling"
    paper = "SSD (speculative decoding for speech/TTS), METHODS.md §3"

    def __init__(self, beta: float = 0.1):
        check_param("beta", beta, isinstance(beta, (int, float)) and beta >= 0, "a number >= 0")
        self.beta = float(beta)

    def verify(self, proposal, scores, generator=None) -> Verdict:
        x, p, u, e = chain_inputs(proposal, scores, generator, "ssd")
        return ssd_core(x, p, proposal.probs, self.beta, u, e)


def reference_ssd(x, p, q, beta, u, e) -> Verdict:
    def accept(px, qx, uu):
        return uu <= (min(1.0, px / qx) if qx > 0 else 1.0) + beta

    return reference_ratio_chain(x, p, q, u, e, accept)


# ---------------------------------------------------------------------------------------------------------------
# Top-R rank and likelihood margin (+ entropy gate)
# ---------------------------------------------------------------------------------------------------------------
def rank_of_draft(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Number of tokens with a strictly higher target logit than the draft: logits [B, K+1, V], x [B, K] -> [B, K]."""
    k = x.shape[1]
    l_x = logits[:, :k].gather(-1, x[..., None])  # [B, K, 1]
    return (logits[:, :k] > l_x).sum(-1)  # [B, K]


def correction(p: torch.Tensor, n: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """A sample from the target's processed distribution at each row's stop position n [B] -> [B]."""
    p_n = p[torch.arange(p.shape[0], device=p.device), n]  # [B, V]
    return (p_n.float() / e).argmax(-1)


def top_r_core(x, logits, p, r: int, e) -> Verdict:
    n = first_rejection(rank_of_draft(logits, x) < r)  # [B]
    return Verdict(n, correction(p, n, e))


@VERIFIERS.register("top-r")
class TopRVerifier(Verifier):
    """UGSD-style rank acceptance: accept x_i while it is among the target's R most probable tokens; at the first
    miss (or after the last draft) emit a sample from the target's processed distribution p (its argmax under
    greedy decoding, where p is one-hot). R = 1 accepts only argmax tokens: greedy verification (ties aside)."""

    lossless = False
    bounds = "every accepted token is among the target's top-R at its position; R = 1 is greedy match"
    paper = "UGSD (rank-relaxed acceptance), METHODS.md §3"

    def __init__(self, r: int = 3):
        check_int("r", r, 1)
        self.r = r

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "top-r")
        p = require_probs(scores, "top-r")
        return top_r_core(proposal.tokens, scores.logits, p, self.r, residual_noise(p, generator))


def entropy(q: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last axis: [..., V] -> [...]."""
    q = q.double()
    return -(q * q.clamp_min(1e-300).log()).sum(-1)


def margin_core(x, logits, p, q, margin: float, entropy_gate: float | None, e) -> Verdict:
    k = x.shape[1]
    lk = logits[:, :k].double()  # [B, K, V]; log p = logit - logsumexp, and the logsumexp cancels on both sides
    ok = lk.gather(-1, x[..., None]).squeeze(-1) >= lk.amax(-1) - margin  # [B, K]
    skipped = torch.zeros(x.shape[0], dtype=torch.bool, device=x.device)  # [B]
    if entropy_gate is not None:
        skipped = (entropy(q) < entropy_gate).all(-1)  # [B]: every draft confident -> no verification
        ok = ok | skipped[:, None]
    n = first_rejection(ok)  # [B]
    return Verdict(n, correction(p, n, e), extras={"skipped": skipped})


@VERIFIERS.register("margin")
class LikelihoodMarginVerifier(Verifier):
    """CTC-SSD-style likelihood threshold: accept x_i while log p(x_i) >= max_v log p(v) - margin (raw target
    log-probabilities). Optional entropy gate: rows whose every draft distribution has entropy below
    ``entropy_gate`` (nats) skip verification and accept all K (``extras["skipped"]`` [B])."""

    lossless = False
    bounds = "accepted tokens are within `margin` nats of the target's best; margin = 0 (no gate) is greedy match"
    paper = "CTC-based SSD (likelihood threshold, entropy gate), METHODS.md §3"

    def __init__(self, margin: float = 1.0, entropy_gate: float | None = None):
        check_param("margin", margin, isinstance(margin, (int, float)) and margin >= 0, "a number >= 0 (nats)")
        check_param("entropy_gate", entropy_gate, entropy_gate is None or (isinstance(entropy_gate, (int, float)) and entropy_gate > 0),
               "None or a number > 0 (nats)")  # fmt: skip
        self.margin, self.entropy_gate = float(margin), entropy_gate

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "margin")
        p = require_probs(scores, "margin")
        if self.entropy_gate is not None and proposal.probs is None:
            raise ValueError("proposal.probs: the entropy gate needs the drafter's distributions, got None")
        return margin_core(proposal.tokens, scores.logits, p, proposal.probs, self.margin, self.entropy_gate,
                           residual_noise(p, generator))  # fmt: skip


def reference_rank_rules(x, logits, p, e, accept_fn) -> Verdict:
    """Shared per-position reference for top-r / margin: accept_fn(row, i) -> bool."""
    return reference_chain(*x.shape, accept_fn, lambda r, n: int((p[r, n].float() / e[r]).argmax()))


def reference_top_r(x, logits, p, r, e) -> Verdict:
    def accept(row, i):
        return int((logits[row, i] > logits[row, i, x[row, i]]).sum()) < r

    return reference_rank_rules(x, logits, p, e, accept)


def reference_margin(x, logits, p, margin, e) -> Verdict:
    def accept(row, i):
        row_logits = logits[row, i].double()  # log p up to the row's logsumexp, which cancels
        return bool(row_logits[x[row, i]] >= row_logits.max() - margin)

    return reference_rank_rules(x, logits, p, e, accept)



def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """Vectorised rule vs per-position reference loop on identical random inputs (``mmspec bench verifiers``)."""
    d = bench_inputs(batch, k, vocab, seed)
    x, q, logits, p, u, e = d["x"], d["q"], d["logits"], d["p"], d["u"], d["e"]
    return [
        BenchCase("ssd", lambda: ssd_core(x, p, q, 0.1, u, e), lambda: reference_ssd(x, p, q, 0.1, u, e)),
        BenchCase("top-r", lambda: top_r_core(x, logits, p, 3, e), lambda: reference_top_r(x, logits, p, 3, e)),
        BenchCase("margin", lambda: margin_core(x, logits, p, q, 2.0, None, e), lambda: reference_margin(x, logits, p, 2.0, e)),
    ]  # fmt: skip
