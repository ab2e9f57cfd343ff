"""Span-level relaxed (lossy) verification of token chains: METHODS.md §3, edit-distance matching and confidence
skipping (phrase-level acceptance is in :mod:`.phrase`).

=================== ============================================================ ================================
rule                relaxation                                                   exact special case
=================== ============================================================ ================================
``edit-distance``   accept all K draft tokens iff Levenshtein(draft, target      tau = 0 -> ``greedy``
                    argmax region) <= tau, else greedy prefix matching
``confidence-skip`` draft tokens with drafter confidence q_i(x_i) >= threshold   threshold > 1 -> ``speculative``
                    are accepted without consulting the target
=================== ============================================================ ================================

Each rule is a core function of explicit inputs and pre-drawn randomness (``edit_distance_core``,
``confidence_skip_core``) plus a plain per-row, per-position Python loop consuming the same randomness
(``reference_edit_distance``, ``reference_confidence_skip``): test oracles and the baseline of ``mmspec bench
verifiers`` (:func:`bench_cases`). The randomness is drawn in the order of the exact rules, so the exact special cases
reproduce the exact verifiers verdict for verdict with the same generator. Token chains only.
"""

from __future__ import annotations

import torch

from ..checks import check_int, check_param, is_number
from ..types import Proposal, Verdict
from .base import VERIFIERS, BenchCase, Verifier, first_rejection, require_chain
from .exact import chain_inputs, reference_residual_sample, residual_weights, token_probs
from .phrase import bench_inputs


# ---------------------------------------------------------------------------------------------------------------
# Edit-distance τ-matching (HSD)
# ---------------------------------------------------------------------------------------------------------------
def levenshtein(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batched Levenshtein distance: a [B, K], b [B, M] int tokens -> int64 [B].

    The DP D[i, j] = min(D[i-1, j] + 1, D[i-1, j-1] + [a_i != b_j], D[i, j-1] + 1) runs a Python loop over the K
    rows of a (K vectorised steps, each over the batch and all M columns). Inside a row, the insertion chain
    D[i, j] = min_{j' <= j} (T[j'] + j - j'), T = the first two terms (T[0] = i), is one cummin:
    D[i, j] - j = cummin_j (T[j] - j).
    """
    bsz, k = a.shape
    m = b.shape[1]
    cols = torch.arange(m + 1, device=a.device)  # [M+1]
    prev = cols.expand(bsz, m + 1)  # [B, M+1] D[0, j] = j
    for i in range(1, k + 1):
        substitute = prev[:, :-1] + (a[:, i - 1 : i] != b).to(torch.int64)  # [B, M] D[i-1, j-1] + cost
        delete = prev[:, 1:] + 1  # [B, M] D[i-1, j] + 1
        t = torch.cat([torch.full((bsz, 1), i, dtype=torch.int64, device=a.device), torch.minimum(substitute, delete)], 1)
        prev = (t - cols).cummin(1).values + cols  # [B, M+1] D[i, :]
    return prev[:, m]


def edit_distance_core(x, logits, tau: int) -> Verdict:
    """HSD τ-matching on a chain: x [B, K], logits [B, K+1, V] (teacher-forced on the draft), tau >= 0.

    The target's region y_1..y_K is its argmax at the K draft positions. If Levenshtein(x, y) <= tau all K draft
    tokens are accepted and the next token is the argmax at position K; otherwise greedy prefix matching: accept
    the longest prefix with x_i == y_i and emit y at the first mismatch. No randomness.
    extras: "distance" [B] int64, "relaxed" [B] bool (accepted by τ beyond what greedy matching accepts).
    """
    b, k = x.shape
    y = logits.argmax(-1)  # [B, K+1]
    distance = levenshtein(x, y[:, :k])  # [B]
    greedy_n = first_rejection(x == y[:, :k])  # [B]
    within = distance <= tau  # [B]
    n = torch.where(within, torch.full_like(greedy_n, k), greedy_n)  # [B]
    return Verdict(n, y.gather(1, n[:, None]).squeeze(1), extras={"distance": distance, "relaxed": within & (greedy_n < k)})


def _reference_levenshtein(a: list[int], b: list[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, ai in enumerate(a, 1):
        cur = [i]
        for j, bj in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ai != bj)))
        prev = cur
    return prev[-1]


def reference_edit_distance(x, logits, tau: int) -> Verdict:
    """:func:`edit_distance_core` with plain per-row loops (textbook DP, greedy scan)."""
    b, k = x.shape
    n_out, tok_out, dist_out, relaxed_out = [], [], [], []
    for r in range(b):
        draft = [int(t) for t in x[r]]
        target = [int(logits[r, i].argmax()) for i in range(k + 1)]
        dist = _reference_levenshtein(draft, target[:k])
        greedy_n = next((i for i in range(k) if draft[i] != target[i]), k)
        n = k if dist <= tau else greedy_n
        n_out.append(n)
        tok_out.append(target[n])
        dist_out.append(dist)
        relaxed_out.append(dist <= tau and greedy_n < k)
    extras = {"distance": torch.tensor(dist_out), "relaxed": torch.tensor(relaxed_out, dtype=torch.bool)}
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out), extras=extras)


@VERIFIERS.register("edit-distance")
class EditDistanceVerifier(Verifier):
    """Edit-distance τ-matching (HSD, document parsing): accept the whole drafted region when its Levenshtein
    distance to the target's region (the target's argmax at each draft position, teacher-forced on the draft) is
    <= tau; otherwise fall back to greedy prefix matching. ``tau``: allowed edits (int >= 0; 0 = ``greedy``)."""

    lossless = False
    needs_probs = False
    bounds = ("lossy: a committed K-token region is within tau Levenshtein edits of the target's argmax region; "
              "beyond tau it is exact greedy matching (tau = 0: token-identical to greedy decoding)")  # fmt: skip
    paper = "HSD (Liao et al. 2026, arXiv:2602.12957), τ-matching"

    def __init__(self, tau: int = 1):
        check_int("tau", tau, 0, note=" (allowed edit operations)")
        self.tau = tau

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "edit-distance")
        return edit_distance_core(proposal.tokens, scores.logits, self.tau)


# ---------------------------------------------------------------------------------------------------------------
# Confidence-based verification skipping (VVS)
# ---------------------------------------------------------------------------------------------------------------
def confidence_skip_core(x, p, q, confidence, threshold: float, u, e) -> Verdict:
    """VVS-style skipping on a chain: x [B, K], p [B, K+1, V], q [B, K, V] | None (one-hot), confidence [B, K]
    (the drafter's q_i(x_i), or supplied), u [B, K] float64, e [B, V] Exp(1) noise.

    Position i is skipped (accepted without the target) iff confidence_i >= threshold; otherwise accepted iff
    u_i q_i(x_i) <= p_i(x_i). Accept up to the first position that is neither; sample norm(max(0, p - q)) there
    (the bonus from p_K if all K pass).
    extras: "skipped" [B] int64 skipped positions among the accepted ones, "skip_rate" [B] float32 = skipped /
    accepted (0 when nothing is accepted).
    """
    k = x.shape[1]
    p_x, q_x = token_probs(p, q, x)  # [B, K] float64
    skip = confidence.double() >= threshold  # [B, K]
    n = first_rejection(skip | (u * q_x <= p_x))  # [B]
    accepted = torch.arange(k, device=x.device) < n[:, None]  # [B, K]
    skipped = (skip & accepted).sum(1)  # [B]
    extras = {"skipped": skipped, "skip_rate": skipped.float() / n.clamp_min(1).float()}
    return Verdict(n, (residual_weights(p, q, x, n).float() / e).argmax(-1), extras=extras)


def reference_confidence_skip(x, p, q, confidence, threshold: float, u, e) -> Verdict:
    """:func:`confidence_skip_core` with plain per-row, per-position loops."""
    b, k = x.shape
    n_out, tok_out, skip_out = [], [], []
    for r in range(b):
        n, skipped = k, 0
        for i in range(k):
            t = int(x[r, i])
            if float(confidence[r, i]) >= threshold:
                skipped += 1
                continue
            qx = 1.0 if q is None else float(q[r, i, t])
            if not float(u[r, i]) * qx <= float(p[r, i, t]):
                n = i
                break
        n_out.append(n)
        skip_out.append(skipped)
        tok_out.append(reference_residual_sample(p[r], None if q is None else q[r], x[r], n, e[r]))
    skip_rate = torch.tensor([s / max(n, 1) for s, n in zip(skip_out, n_out)], dtype=torch.float32)
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out), extras={"skipped": torch.tensor(skip_out), "skip_rate": skip_rate})


def draft_confidence(proposal: Proposal) -> torch.Tensor:
    """The drafter's confidence in each draft token [B, K]: q_i(x_i), or proposal.meta["confidence"] when q is None."""
    x = proposal.tokens  # [B, K]
    if proposal.probs is not None:
        return proposal.probs.gather(-1, x[..., None]).squeeze(-1)  # [B, K]
    conf = proposal.meta.get("confidence")
    if conf is None:
        raise ValueError("proposal.meta['confidence']: the 'confidence-skip' verifier needs the drafter's confidence "
                         "[B, K] when the proposal has no probs (q None), got nothing")  # fmt: skip
    if not isinstance(conf, torch.Tensor) or tuple(conf.shape) != tuple(x.shape):
        got = tuple(conf.shape) if isinstance(conf, torch.Tensor) else type(conf).__name__
        raise ValueError(f"proposal.meta['confidence']: expected a tensor of shape {tuple(x.shape)} [B, K], got {got}")
    return conf


@VERIFIERS.register("confidence-skip")
class ConfidenceSkipVerifier(Verifier):
    """Confidence-based verification skipping (VVS): draft tokens whose drafter confidence q_i(x_i) reaches
    ``threshold`` are accepted without consulting the target; the others follow exact speculative sampling, up to
    the first rejected one, where the exact residual norm(max(0, p - q)) is sampled. Reports
    ``extras["skipped"]`` and ``extras["skip_rate"]``. With q None the confidences come from
    ``proposal.meta["confidence"]`` [B, K]. ``threshold`` > 1 never skips (exactly ``speculative``).

    Here the target's scores exist for every position (one verification pass); an engine can use the skip
    decision to avoid verifying confident prefixes, which is where VVS saves target compute.
    """

    lossless = False
    bounds = ("lossy on skipped tokens only: tokens with drafter confidence >= threshold are committed unverified "
              "(no bound there; reported as skip_rate); all other tokens are exact speculative sampling")  # fmt: skip
    paper = "VVS (Dong et al. 2025, arXiv:2511.13587)"

    def __init__(self, threshold: float = 0.9):
        check_param("threshold", threshold, is_number(threshold) and threshold > 0,
                    "a number > 0 (drafter confidence at which to skip; > 1 = never skip)")  # fmt: skip
        self.threshold = float(threshold)

    def verify(self, proposal, scores, generator=None) -> Verdict:
        x, p, u, e = chain_inputs(proposal, scores, generator, "confidence-skip")
        return confidence_skip_core(x, p, proposal.probs, draft_confidence(proposal), self.threshold, u, e)


# ---------------------------------------------------------------------------------------------------------------
# mmspec bench verifiers


def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """One :class:`BenchCase` per rule: vectorised core vs reference loop on identical inputs and randomness."""
    d = bench_inputs(batch, k, vocab, seed)
    g, x, q, logits, p, u, e = d["g"], d["x"], d["q"], d["logits"], d["p"], d["u"], d["e"]
    # edit distance: the target's argmax with one or two substitutions per row
    near = logits[:, :k].argmax(-1).clone()  # [B, K]
    cols = torch.randint(max(k, 1), (batch, 2), generator=g)  # [B, 2]
    near = near.scatter(1, cols, torch.randint(vocab, (batch, 2), generator=g)) if k else near
    conf = q.gather(-1, x[..., None]).squeeze(-1)  # [B, K]
    threshold = float(conf.median()) if k else 0.5
    return [
        BenchCase("edit-distance", lambda: edit_distance_core(near, logits, 2), lambda: reference_edit_distance(near, logits, 2)),
        BenchCase("confidence-skip", lambda: confidence_skip_core(x, p, q, conf, threshold, u, e),
                  lambda: reference_confidence_skip(x, p, q, conf, threshold, u, e)),
    ]  # fmt: skip
