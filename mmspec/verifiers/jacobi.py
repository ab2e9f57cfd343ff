"""Jacobi-family verification (SJD, MC-SJD, Gumbel-coupled SJD): METHODS.md §4.

Longer than 450 lines because the three rules are read side by side: each one's vectorised core, its per-position
reference loop and its registered verifier, plus the position-keyed Gumbel noise they share.

Speculative Jacobi decoding drafts with the target itself. A *window* of L = K + 1 slots is kept per row: slot 0
is the last committed token x_t (absolute position t) and slots 1..K hold drafts d_1..d_K for positions t+1..t+K,
each with the proposal distribution q_i it was drawn from (one-hot for freshly initialised slots). One target pass
over the window gives p_0..p_K, where p_j is the target's distribution for position t+j+1 given slots 0..j (so
p_{i-1} scores d_i and p_K is the bonus distribution). In mmspec's contract:

    proposal.tokens  [B, K]     d_1..d_K
    proposal.probs   [B, K, V]  q_1..q_K (None: every q_i is one-hot on d_i)
    proposal.pending_position [B] position t of x_t among the generated tokens (the drafts sit at t+1..t+K)
    proposal.noise_keys  [B] int64 per-row noise key (Gumbel rule only; default arange(B))
    scores.probs     [B, K+1, V] p_0..p_K (processed: temperature / top-k / top-p, the same as the drafts')

Every rule computes one new sample S_j per scored position t+j+1 (j = 0..K), an accepted prefix length n (0..K)
and commits d_1..d_n followed by ``next_tokens`` = S_n at position t+n+1 (the correction, or the bonus when n = K).

Window bookkeeping (the shift is done here, in :func:`mmspec.window.shift_window`; the window drafter uses
``Verdict.next_window`` as the next window as it is):

    after committing n + 1 tokens the new pending token is S_n at t' = t + n + 1, and the next window's drafts are
    at positions t'+1..t'+K:
      slot i = 1..K-n   carries over position t+n+1+i, which this pass scored: token S_{n+i}, proposal p_{n+i}
                        (the distribution it was drawn from in this pass; its prefix may have been wrong, which
                        is fine: a proposal only has to be the law the draft was drawn from);
      slot i = K-n+1..K fresh (n slots, none scored yet): one-hot proposal on a token chosen by ``init``:
                        "random" = uniform over the vocabulary, "repeat" = S_K, the token sampled for the farthest
                        scored position t+K+1 (the left neighbour of the first fresh slot: a spatial prior).
    Verdict.next_window = Window(tokens [B, K], probs [B, K, V]) (its drafts sit at t'+1..t'+K)

Near the end of the sequence the caller truncates: with T the last position to generate, the next window keeps
its first min(K, T - t' - 1) slots (never run the window past the end; the bonus position then is <= T).

Why fresh slots may be arbitrary: a draft d with one-hot q is accepted with probability p(d) and otherwise replaced
by a sample of p with d removed, which yields a sample of p whatever d is, as long as d does not depend on the
uniform used to test it. Carried-over drafts are samples of their stored proposal given everything the earlier
slots' verification depends on (the target is causal: acceptance of slots < i never looks at d_i), which is all
speculative sampling needs.

Each rule is a pure core function taking its pre-drawn randomness explicitly (:func:`sjd_rule`,
:func:`mc_sjd_rule`, :func:`gumbel_sjd_rule`), a straightforward per-row/per-position loop computing the same
thing from the same randomness (:func:`reference_sjd`, ...), and a registered :class:`Verifier` whose ``verify``
draws that randomness (from the generator, or from the fixed per-position Gumbel noise) and calls the core.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..checks import check_int, check_param, is_number
from ..types import Proposal, TargetScores, Verdict, Window
from ..window import FRESH_INIT, check_init, race, shift_window
from .base import VERIFIERS, BenchCase, Verifier, first_rejection, require_probs

_EMPTY = 1e-12  # a residual whose mass is below this is numerically empty: fall back to p (METHODS.md §1)


class JacobiStep(NamedTuple):
    """One Jacobi verification: what is committed and the next window (already shifted)."""

    num_accepted: torch.Tensor  # [B] int64 n: drafts d_1..d_n accepted
    next_tokens: torch.Tensor  # [B] int64 S_n: token committed at position t+n+1
    window_tokens: torch.Tensor  # [B, K] int64 next window's drafts
    window_probs: torch.Tensor  # [B, K, V] next window's stored proposals


# ----------------------------------------------------------------------------------------------------------------
# Shared pieces of the vectorised rules (each touches [B, L, V] as few times as it can)


def _accept_test(d: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Speculative-sampling test of every slot: u_i < min(1, p_{i-1}(d_i) / q_i(d_i)) -> bool [B, K].

    Written u_i * q_i(d_i) < p_{i-1}(d_i) (no division by q = 0), in float64; q None means one-hot (q_i(d_i) = 1)."""
    k = d.shape[1]
    p_d = p[:, :k].gather(-1, d[..., None]).squeeze(-1).double()  # [B, K] p_{i-1}(d_i)
    q_d = torch.ones_like(p_d) if q is None else q.gather(-1, d[..., None]).squeeze(-1).double()  # [B, K] q_i(d_i)
    return u * q_d < p_d  # [B, K]


def _guard(residual: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Fall back to p where the residual is numerically empty (never NaN, never uniform)."""
    empty = residual.sum(-1, keepdim=True) <= _EMPTY  # [..., 1]
    return torch.where(empty, p, residual)  # [..., V]


def _residual(p: torch.Tensor, d: torch.Tensor, q: torch.Tensor | None) -> torch.Tensor:
    """Guarded max(0, p - q) [..., V] for drafts d [...] with proposals q [..., V] (None: one-hot on d, i.e. p with
    d removed)."""
    if q is None:
        return _guard(p.scatter(-1, d[..., None], 0.0), p)  # [..., V]
    return _guard((p - q.to(p.dtype)).clamp_min(0), p)  # [..., V]


def _stop_sample(d, q, p, e, n) -> torch.Tensor:
    """S_n: a sample of norm(max(0, p_n - q_{n+1})) at each row's stop position n, or of p_K when n = K -> [B]."""
    b, k = d.shape
    rows = torch.arange(b, device=d.device)  # [B]
    p_n, e_n = p[rows, n], e[rows, n]  # [B, V], [B, V]
    if k == 0:
        return race(p_n, e_n)  # [B] the bonus
    slot = n.clamp_max(k - 1)  # [B] draft slot n+1 (any valid slot when n = K, masked below)
    has_draft = (n < k)[:, None]  # [B, 1]
    residual = _residual(p_n, d[rows, slot], None if q is None else q[rows, slot])  # [B, V]
    return race(torch.where(has_draft, residual, p_n), e_n)  # [B]


def _step(n: torch.Tensor, samples: torch.Tensor, p: torch.Tensor, fresh: torch.Tensor | None) -> JacobiStep:
    next_tokens = samples.gather(1, n[:, None]).squeeze(1)  # [B] S_n
    return JacobiStep(n, next_tokens, *shift_window(samples, p, n, fresh))


def _with_bonus(d: torch.Tensor, bonus: torch.Tensor) -> torch.Tensor:
    """d [B, K] and bonus [B] -> [B, K+1]."""
    return torch.cat([d, bonus[:, None]], dim=1)  # [B, K+1]


# ----------------------------------------------------------------------------------------------------------------
# The three rules, vectorised over rows, positions and the vocabulary


def sjd_rule(d, q, p, u, e, fresh=None, reuse: float | None = None) -> JacobiStep:
    """SJD (Teng et al. 2024). d [B, K] drafts, q [B, K, V] | None (one-hot), p [B, K+1, V], u [B, K] float64
    uniforms, e [B, K+1, V] Exp(1) noise, fresh [B, K] tokens for fresh slots or None ("repeat").

    Accept d_i iff u_i < min(1, p_{i-1}(d_i)/q_i(d_i)) up to the first rejection (n accepted); S_n is a sample of
    norm(max(0, p_n - q_{n+1})) (q_{K+1} = 0: the bonus is a sample of p_K); every later position j > n gets a
    fresh sample S_j of p_j (its re-initialisation, proposal p_j).

    ``reuse`` (SJD++-style high-confidence token reuse): a position j > n whose old draft d_{j+1} has
    p_j(d_{j+1}) >= reuse keeps that draft instead of a fresh sample, stored with a ONE-HOT proposal. It stays
    exact: a one-hot draft chosen independently of the next pass's uniform is accepted with probability p'(d) and
    otherwise replaced by a sample of p' without d, a sample of p' either way (a stale q would not be).
    """
    n = first_rejection(_accept_test(d, q, p, u))  # [B]
    j = torch.arange(p.shape[1], device=p.device)[None, :]  # [1, L]
    samples = torch.where(j < n[:, None], _with_bonus(d, n), race(p, e))  # [B, L] d before n, samples of p after
    samples = torch.where(j == n[:, None], _stop_sample(d, q, p, e, n)[:, None], samples)  # [B, L] S_n
    if reuse is None:
        return _step(n, samples, p, fresh)
    k = d.shape[1]
    p_d = p[:, :k].gather(-1, d[..., None]).squeeze(-1)  # [B, K] p_j(d_{j+1})
    keep = (j[:, :k] > n[:, None]) & (p_d >= reuse)  # [B, K] confident old drafts after the stop
    samples[:, :k] = torch.where(keep, d, samples[:, :k])
    stored = torch.where(keep[..., None], F.one_hot(d, p.shape[-1]).to(p.dtype), p[:, :k])  # [B, K, V]
    return _step(n, samples, torch.cat([stored, p[:, k:]], dim=1), fresh)


def mc_sjd_rule(d, q, p, u, e, fresh=None) -> JacobiStep:
    """MC-SJD (maximal coupling). Arguments as :func:`sjd_rule`.

    The accept/resample test is applied to every slot (no break): S_j = d_{j+1} if u_{j+1} < p_j(d)/q_{j+1}(d),
    else a sample of norm(max(0, p_j - q_{j+1})). Given d_{j+1} ~ q_{j+1}, S_j ~ p_j exactly and P(S_j = d_{j+1}) =
    1 - TV(p_j, q_{j+1}) (maximal coupling), so slots whose distribution barely moved keep their token and the
    iteration converges faster. Only the prefix up to the first rejection is committed; every carried slot stores
    the CURRENT p_j as its proposal, the law S_j was drawn from (storing the stale q_{j+1} breaks losslessness).
    """
    k = d.shape[1]
    accept = _accept_test(d, q, p, u)  # [B, K]
    n = first_rejection(accept)  # [B]
    resampled = race(_residual(p[:, :k], d, q), e[:, :k])  # [B, K] residual samples of every draft slot
    bonus = race(p[:, k], e[:, k])  # [B] S_K: a sample of p_K (no draft there)
    samples = _with_bonus(torch.where(accept, d, resampled), bonus)  # [B, L]
    return _step(n, samples, p, fresh)


def gumbel_sjd_rule(d, q, p, g, fresh=None) -> JacobiStep:
    """Gumbel-coupled SJD. d [B, K], q unused (accepted for a uniform signature), p [B, K+1, V], g [B, K+1, V]
    Gumbel noise of the scored positions, fresh as :func:`sjd_rule`.

    S_j = argmax_v(log p_j(v) + g_j(v)); accept d_i iff d_i == S_{i-1} up to the first mismatch; commit S_n.
    """
    samples = (p.float().log() + g.float()).argmax(-1)  # [B, L]
    n = first_rejection(d == samples[:, : d.shape[1]])  # [B]
    return _step(n, samples, p, fresh)


# ----------------------------------------------------------------------------------------------------------------
# Per-row, per-position reference loops (same randomness, same result; for tests and ``mmspec bench verifiers``)


def _reference_proposals(d: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor) -> torch.Tensor:
    """q [B, K, V] as given, or one-hot on the drafts when None; in p's dtype."""
    return F.one_hot(d, p.shape[-1]).to(p.dtype) if q is None else q.to(p.dtype)  # [B, K, V]


def _reference_window(samples: list, p_row: torch.Tensor, n: int, fresh_row: torch.Tensor | None):
    k = len(samples) - 1
    tokens, probs = [], []
    for i in range(1, k + 1):
        if n + i <= k:
            tokens.append(samples[n + i])
            probs.append(p_row[n + i])
        else:
            tok = samples[k] if fresh_row is None else int(fresh_row[i - 1])
            tokens.append(tok)
            probs.append(F.one_hot(torch.tensor(tok, device=p_row.device), p_row.shape[-1]).to(p_row.dtype))
    v = p_row.shape[-1]
    return torch.tensor(tokens, dtype=torch.int64, device=p_row.device), (torch.stack(probs) if probs else p_row.new_zeros(0, v))


def _reference_residual(p_j: torch.Tensor, q_j: torch.Tensor | None) -> torch.Tensor:
    if q_j is None:
        return p_j
    residual = (p_j - q_j).clamp_min(0)
    return p_j if float(residual.sum()) <= _EMPTY else residual


def _reference_sample(w: torch.Tensor, e: torch.Tensor) -> int:
    return int((w.float() / e.clamp_min(torch.finfo(torch.float32).tiny)).argmax())


def _reference_loop(d, q, p, fresh, row_fn, stored=None) -> JacobiStep:
    """Run ``row_fn(r, k, q_r) -> (n, samples)`` for every row and assemble the step row by row (``stored``: the
    proposals carried slots keep, filled in by ``row_fn``; default p)."""
    b, k = d.shape
    q = _reference_proposals(d, q, p)
    n_all, next_all, tokens_all, probs_all = [], [], [], []
    for r in range(b):
        n, samples = row_fn(r, k, q[r])
        tokens, probs = _reference_window(samples, (p if stored is None else stored)[r], n, None if fresh is None else fresh[r])
        n_all.append(n)
        next_all.append(samples[n])
        tokens_all.append(tokens)
        probs_all.append(probs)
    dev = d.device
    return JacobiStep(torch.tensor(n_all, dtype=torch.int64, device=dev),
                      torch.tensor(next_all, dtype=torch.int64, device=dev),
                      torch.stack(tokens_all) if b else d.new_zeros(0, k),
                      torch.stack(probs_all) if b else p.new_zeros(0, k, p.shape[-1]))  # fmt: skip


def _accepted(d_ri: int, q_ri: torch.Tensor, p_r: torch.Tensor, u_ri: torch.Tensor) -> bool:
    return bool(u_ri * q_ri[d_ri].double() < p_r[d_ri].double())


def reference_sjd(d, q, p, u, e, fresh=None, reuse: float | None = None) -> JacobiStep:
    """:func:`sjd_rule` as a plain loop over rows and window positions."""
    stored = p.clone()  # proposals the next window stores (one-hot where a confident draft is reused)

    def row(r, k, q_r):
        n = 0
        while n < k and _accepted(int(d[r, n]), q_r[n], p[r, n], u[r, n]):
            n += 1
        samples = [int(d[r, j]) for j in range(n)]
        samples.append(_reference_sample(_reference_residual(p[r, n], q_r[n] if n < k else None), e[r, n]))
        for j in range(n + 1, k + 1):
            if reuse is not None and j < k and float(p[r, j, int(d[r, j])]) >= reuse:
                samples.append(int(d[r, j]))
                stored[r, j] = F.one_hot(d[r, j], p.shape[-1]).to(p.dtype)
            else:
                samples.append(_reference_sample(p[r, j], e[r, j]))
        return n, samples

    return _reference_loop(d, q, p, fresh, row, stored)


def reference_mc_sjd(d, q, p, u, e, fresh=None) -> JacobiStep:
    """:func:`mc_sjd_rule` as a plain loop over rows and window positions."""

    def row(r, k, q_r):
        samples, n, rejected = [], 0, False
        for j in range(k):
            if _accepted(int(d[r, j]), q_r[j], p[r, j], u[r, j]):
                samples.append(int(d[r, j]))
            else:
                samples.append(_reference_sample(_reference_residual(p[r, j], q_r[j]), e[r, j]))
                rejected = True
            n += 0 if rejected else 1
        samples.append(_reference_sample(p[r, k], e[r, k]))
        return n, samples

    return _reference_loop(d, q, p, fresh, row)


def reference_gumbel_sjd(d, q, p, g, fresh=None) -> JacobiStep:
    """:func:`gumbel_sjd_rule` as a plain loop over rows and window positions."""

    def row(r, k, q_r):
        samples = [int((p[r, j].float().log() + g[r, j].float()).argmax()) for j in range(k + 1)]
        n = 0
        while n < k and int(d[r, n]) == samples[n]:
            n += 1
        return n, samples

    return _reference_loop(d, q, p, fresh, row)


# ----------------------------------------------------------------------------------------------------------------
# Gumbel noise fixed per (seed, row key, absolute position, vocabulary entry): a counter-based hash, no state

_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)  # splitmix64 constants as signed int64 (torch wraps on overflow)
_M2 = 0x94D049BB133111EB - (1 << 64)
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser: a bijective, well-mixing int64 -> int64 hash."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def gumbel_noise(seed: int, keys: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """Standard Gumbel noise g [B, L, V] (float32), a pure function of (seed, keys [B], positions [B, L], v).

    The same (seed, row key, absolute position) always gives the same vector, whatever the window or the call,
    and different ones are (pseudo-)independent.
    """
    keys = keys.to(torch.int64)  # [B]
    base = _mix64(_mix64(keys[:, None] * _GOLDEN + (seed ^ 0x5DEECE66D)) + positions.to(torch.int64))  # [B, L]
    v = (torch.arange(vocab, device=keys.device, dtype=torch.int64) + 1) * _GOLDEN  # [V]
    bits = _shr(_mix64(base[..., None] + v), 11)  # [B, L, V] 53 random bits
    u = (bits.double() + 0.5) * 2.0**-53  # [B, L, V] uniform in (0, 1), never 0 or 1
    return (-torch.log(-torch.log(u))).float()  # [B, L, V]


# ----------------------------------------------------------------------------------------------------------------
# Input handling shared by the three verifiers


def _inputs(proposal: Proposal, scores: TargetScores):
    """Validate and unpack: d [B, K], q [B, K, V] | None, p [B, K+1, V]."""
    if proposal.is_tree:
        raise ValueError("proposal.parents: Jacobi verifiers verify a window (a chain of drafts), got a token tree")
    d, q, p = proposal.tokens, proposal.probs, require_probs(scores, "jacobi")  # p_0..p_K
    b, k = d.shape
    if p.dim() != 3 or p.shape[:2] != (b, k + 1):
        raise ValueError(f"scores.probs: expected shape [B, K+1, V] = [{b}, {k + 1}, V], got {list(p.shape)}")
    if q is not None and q.shape != (b, k, p.shape[-1]):
        raise ValueError(f"proposal.probs: expected None or shape [B, K, V] = [{b}, {k}, {p.shape[-1]}], got {list(q.shape)}")
    return d, q, p


def _slot_positions(proposal: Proposal, b: int, k: int, device) -> torch.Tensor:
    """Positions of the scored slots (drafts, then the bonus) among the generated tokens: pending_position + 1 ..
    + K + 1 -> int64 [B, K+1] (no pending_position: the pending token sits at -1 in every row)."""
    step = torch.arange(1, k + 2, device=device)  # [L]
    if proposal.pending_position is None:
        return (step - 1).expand(b, k + 1)  # [B, L] drafts at 0..K-1, the bonus at K (the pending token at -1)
    pending = torch.as_tensor(proposal.pending_position, device=device).to(torch.int64).reshape(-1, 1)  # [B, 1]
    return (pending + step).expand(b, k + 1)  # [B, L]


class _JacobiVerifier(Verifier):
    """Common ``verify``: validate, draw the rule's randomness, run the core, shift positions, pack the verdict."""

    lossless = True
    needs_probs = True
    domain = "jacobi"
    samples_first_token = True  # the loop asks the rule for the first token too (Gumbel: its fixed noise there)

    def __init__(self, init: str = "random"):
        self.init = check_init(init)

    def _noise(self, proposal: Proposal, p: torch.Tensor, positions: torch.Tensor, generator) -> tuple:
        """The rule's randomness (SJD, MC-SJD: uniforms u [B, K] float64 and Exp(1) noise e [B, K+1, V])."""
        u = torch.rand(proposal.tokens.shape, dtype=torch.float64, device=p.device, generator=generator)
        return u, torch.empty(p.shape, dtype=torch.float32, device=p.device).exponential_(generator=generator)

    _rule: staticmethod  # each rule's core: (d, q, p, *noise, fresh) -> JacobiStep

    def verify(self, proposal: Proposal, scores: TargetScores, generator: torch.Generator | None = None) -> Verdict:
        d, q, p = _inputs(proposal, scores)  # [B, K], [B, K, V] | None, [B, K+1, V]
        b, k = d.shape
        positions = _slot_positions(proposal, b, k, d.device)  # [B, K+1]
        noise = self._noise(proposal, p, positions, generator)
        fresh = FRESH_INIT[self.init](b, k, p.shape[-1], d.device, generator)  # [B, K] | None
        step = self._rule(d, q, p, *noise, fresh)
        return Verdict(num_accepted=step.num_accepted, next_tokens=step.next_tokens,
                       next_window=Window(step.window_tokens, step.window_probs))  # fmt: skip


@VERIFIERS.register("sjd")
class SJDVerifier(_JacobiVerifier):
    """Speculative Jacobi Decoding: speculative sampling of each window draft against p_{i-1} up to the first
    rejection; the unaccepted positions are re-initialised with fresh samples of this pass's p (see
    :func:`sjd_rule` and the module docstring for the window bookkeeping). Parameters: ``init`` ("random" |
    "repeat"), how the fresh slots at the end of the next window are filled (always with one-hot q); ``reuse``
    (None or a probability in (0, 1]): SJD++-style reuse of high-confidence drafts after the first rejection
    instead of resampling them (kept with a one-hot proposal, so still exact)."""

    bounds = "exact: output law equals the target's (speculative sampling on every committed position)"
    paper = ("Teng et al. 2024, Accelerating Auto-regressive Text-to-Image Generation with Training-free Speculative "
             "Jacobi Decoding (arXiv:2410.01699); reuse: SJD++ (Teng et al. 2025, arXiv:2512.07503)")

    def __init__(self, init: str = "random", reuse: float | None = None):
        check_param("reuse", reuse, reuse is None or (is_number(reuse) and 0 < reuse <= 1),
                    "None or a probability in (0, 1] (the confidence above which a draft is kept)")  # fmt: skip
        super().__init__(init)
        self.reuse = reuse

    def _rule(self, d, q, p, u, e, fresh) -> JacobiStep:
        return sjd_rule(d, q, p, u, e, fresh, reuse=self.reuse)


@VERIFIERS.register("mc-sjd")
class MCSJDVerifier(_JacobiVerifier):
    """MC-SJD: the SJD test applied to every slot (maximal coupling of old draft and new sample), commit up to the
    first rejection, carried slots store the current p (see :func:`mc_sjd_rule`). Parameter: ``init`` as SJD."""

    bounds = "exact: output law equals the target's (each new sample is a maximal coupling with its old draft)"
    paper = ("So, Kook, Jang, Park 2025, MC-SJD: Maximal Coupling Speculative Jacobi Decoding for Autoregressive Visual "
             "Generation Acceleration (arXiv:2510.24211)")
    _rule = staticmethod(mc_sjd_rule)


@VERIFIERS.register("gumbel-sjd")
class GumbelSJDVerifier(_JacobiVerifier):
    """Gumbel-coupled SJD: every scored position a is sampled as argmax_v(log p(v) + g_a(v)) with Gumbel noise g_a
    fixed per (``seed``, row key, absolute position a) (:func:`gumbel_noise`; row keys from
    ``proposal.noise_keys``, default arange(B), positions from ``proposal.pending_position``); a draft is accepted
    iff it equals that sample, and the first mismatch's sample is committed.

    Why it is exact: let y be the sequence sampled *sequentially* with the same noise, y_a = argmax(log p(. | y_<a)
    + g_a). Since g_a is independent of g_<a, hence of y_<a, each y_a is a Gumbel-max sample of its conditional and
    y follows the AR joint exactly. Every token this rule commits equals y: an accepted d_a equals the sample of
    p(. | committed prefix) with g_a, which by induction is y_a, and the committed correction / bonus is that same
    sample at the first mismatch. Drafts (however initialised) only decide how many positions are committed per
    pass, never their values. So the output is the sequential Gumbel-max sample itself (token-identical for a given
    seed and row key), and a slot whose p did not change between passes reproduces the same token, which is what
    makes the Jacobi iteration converge. The noise must be fixed per ABSOLUTE position, so it shifts with the
    window by the commit count; use a distinct (seed, row key) per generation or rows/requests will coincide.
    Exact matching agrees less often than maximal coupling (P(argmaxes coincide) >= (1 - TV)/(1 + TV) vs 1 - TV,
    Daliri et al.) but buys drafter invariance: the output depends on the seed only, never on the drafts.

    Parameters: ``seed`` (int >= 0) of the noise; ``init`` as SJD (drafts only; the generator is used for nothing
    else)."""

    bounds = "exact: token-identical to sequential Gumbel-max sampling of the target with the same noise"
    paper = ("So et al. 2025, MC-SJD (arXiv:2510.24211), Gumbel coupling; Daliri et al. 2024, Coupling without "
             "Communication and Drafter-Invariant Speculative Decoding (arXiv:2408.07978)")
    _rule = staticmethod(gumbel_sjd_rule)

    def __init__(self, seed: int = 0, init: str = "random"):
        check_int("seed", seed, 0, note=" (the Gumbel noise seed)")
        super().__init__(init)
        self.seed = seed

    def _noise(self, proposal, p, positions, generator):
        b = p.shape[0]
        keys = proposal.noise_keys
        keys = torch.arange(b, device=p.device) if keys is None else torch.as_tensor(keys, device=p.device).expand(b)  # [B]
        return (gumbel_noise(self.seed, keys, positions, p.shape[-1]),)  # ([B, K+1, V],)


# ----------------------------------------------------------------------------------------------------------------
# Benchmark cases for ``mmspec bench verifiers``


def _bench_inputs(batch: int, k: int, vocab: int, seed: int) -> dict:
    """Random window inputs where drafts often agree with the target (so the rules do real work)."""
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V]
    p = torch.softmax(logits, -1)  # [B, K+1, V]
    q = torch.softmax(logits[:, :k] + torch.randn(batch, k, vocab, generator=g), -1)  # [B, K, V] close to p
    d = torch.multinomial(q.flatten(0, 1), 1, generator=g).view(batch, k)  # [B, K]
    u = torch.rand(batch, k, dtype=torch.float64, generator=g)  # [B, K]
    e = torch.empty(batch, k + 1, vocab).exponential_(generator=g)  # [B, K+1, V]
    fresh = torch.randint(vocab, (batch, k), generator=g)  # [B, K]
    gn = gumbel_noise(seed, torch.arange(batch), torch.arange(k + 1).expand(batch, k + 1), vocab)  # [B, K+1, V]
    d_gumbel = (q.log() + gn[:, :k]).argmax(-1)  # [B, K] Gumbel drafts of q with the same noise: often accepted
    return {"d": d, "q": q, "p": p, "u": u, "e": e, "fresh": fresh, "g": gn, "d_gumbel": d_gumbel}


def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """One :class:`BenchCase` per Jacobi rule: the vectorised core vs its reference loop on the same inputs."""
    x = _bench_inputs(batch, k, vocab, seed)
    sampled = (x["d"], x["q"], x["p"], x["u"], x["e"], x["fresh"])
    gumbel = (x["d_gumbel"], x["q"], x["p"], x["g"], x["fresh"])
    return [
        BenchCase("sjd", lambda: sjd_rule(*sampled), lambda: reference_sjd(*sampled)),
        BenchCase("mc-sjd", lambda: mc_sjd_rule(*sampled), lambda: reference_mc_sjd(*sampled)),
        BenchCase("gumbel-sjd", lambda: gumbel_sjd_rule(*gumbel), lambda: reference_gumbel_sjd(*gumbel)),
    ]

