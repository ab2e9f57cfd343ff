"""Span-level relaxed (lossy) verification of token chains: METHODS.md §3, last three bullets.

=================== ============================================================ ================================
rule                relaxation                                                   exact special case
=================== ============================================================ ================================
``phrase``          a draft span matching a phrase-library entry is accepted     empty library -> ``speculative``
                    as one unit iff log u <= Σ_k (log p(v_k) - log q(v_k))
``edit-distance``   accept all K draft tokens iff Levenshtein(draft, target      tau = 0 -> ``greedy``
                    argmax region) <= tau, else greedy prefix matching
``confidence-skip`` draft tokens with drafter confidence q_i(x_i) >= threshold   threshold > 1 -> ``speculative``
                    are accepted without consulting the target
=================== ============================================================ ================================

Each rule is a core function of explicit inputs and pre-drawn randomness (``phrase_core``, ``edit_distance_core``,
``confidence_skip_core``) plus a plain per-row, per-position Python loop consuming the same randomness
(``reference_phrase``, ``reference_edit_distance``, ``reference_confidence_skip``): test oracles and the baseline
of ``mmspec bench verifiers`` (:func:`bench_cases`). The randomness is drawn in the order of
:func:`mmspec.verifiers.exact._residual_rule` (uniforms u [B, K] in float64, then the exponential-race noise
e [B, V] of :func:`mmspec.sampling.sample`), so the exact special cases reproduce the exact verifiers verdict for
verdict with the same generator.

All three rules are defined on token chains; a token tree is refused with a clear error.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import torch

from ..types import Proposal, Verdict
from .base import VERIFIERS, BenchCase, Verifier, check_param, first_rejection, require_chain, require_probs
from .exact import draft_uniforms, reference_residual_sample, residual_noise, residual_weights, token_probs


# ---------------------------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------------------------

def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _log(x: float) -> float:
    """math.log with log(0) = -inf (probabilities only)."""
    return math.log(x) if x > 0 else -math.inf


# ---------------------------------------------------------------------------------------------------------------
# Phrase library (SJD-PV)
# ---------------------------------------------------------------------------------------------------------------
_PRIMES = (268435399, 268435337)  # two primes < 2^28: Horner steps h * base + t stay far below 2^63
_BASES = ((131071, 65599), (1000003, 8191), (524287, 92821), (3145739, 786433))  # retried on a key collision


def phrase_keys(windows: torch.Tensor, bases: tuple[int, int]) -> torch.Tensor:
    """Double polynomial hash of token windows [..., L] -> int64 keys [...] (h1 * P2 + h2, below 2^56).

    Horner's rule over the L window columns (a loop over the phrase length, not over positions)."""
    (p1, p2), (b1, b2) = _PRIMES, bases
    h1 = torch.zeros(windows.shape[:-1], dtype=torch.int64, device=windows.device)  # [...]
    h2 = torch.zeros_like(h1)  # [...]
    for j in range(windows.shape[-1]):
        t = windows[..., j].to(torch.int64) % p1  # [...]
        h1 = (h1 * b1 + t) % p1
        h2 = (h2 * b2 + t) % p2
    return h1 * p2 + h2


class PhraseLibrary:
    """A set of phrases (token-id tuples of length >= 2), stored for vectorised matching.

    Per phrase length L: ``keys`` int64 [n_L] sorted double-hash keys and ``table`` [n_L, L] the phrases in key
    order. A draft window matches when ``searchsorted`` finds its key *and* the stored phrase equals the window
    token for token, so hash collisions between a window and a phrase can never cause a false match; bases are
    re-drawn at construction until the keys of same-length phrases are distinct, so none can be missed either.
    """

    def __init__(self, phrases: Iterable[Sequence[int]] = ()):
        seen: dict[tuple[int, ...], None] = {}
        expected = "token-id sequences of length >= 2 with ids >= 0"
        for phrase in phrases:
            try:
                tokens = tuple(int(t) for t in phrase)
            except (TypeError, ValueError):
                raise ValueError(f"phrases: expected {expected}, got {phrase!r}") from None
            check_param("phrases", phrase, len(tokens) >= 2 and min(tokens) >= 0, expected)
            seen[tokens] = None
        self.phrases: tuple[tuple[int, ...], ...] = tuple(seen)  # deduplicated, in insertion order
        self.bases, self._tables = self._build()
        self._on_device: dict[torch.device, dict[int, tuple[torch.Tensor, torch.Tensor]]] = {}

    def _build(self):
        by_length: dict[int, list[tuple[int, ...]]] = {}
        for phrase in self.phrases:
            by_length.setdefault(len(phrase), []).append(phrase)
        for bases in _BASES:
            tables = {}
            for length, group in sorted(by_length.items()):
                table = torch.tensor(group, dtype=torch.int64)  # [n_L, L]
                keys = phrase_keys(table, bases)  # [n_L]
                if torch.unique(keys).numel() < keys.numel():
                    break  # two phrases share a key: try the next bases
                keys, order = torch.sort(keys)
                tables[length] = (keys, table[order])
            else:
                return bases, tables
        raise RuntimeError("PhraseLibrary: hash collision with every base pair; this should be astronomically rare")

    def __len__(self) -> int:
        return len(self.phrases)

    def __iter__(self):
        return iter(self.phrases)

    def __contains__(self, phrase) -> bool:
        return tuple(int(t) for t in phrase) in set(self.phrases)

    def __repr__(self) -> str:
        lengths = sorted(self._tables)
        return f"PhraseLibrary({len(self)} phrases, lengths {lengths})"

    @property
    def lengths(self) -> list[int]:
        return sorted(self._tables)

    def tables(self, device: torch.device) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """{L: (keys [n_L], table [n_L, L])} on ``device`` (cached per device)."""
        device = torch.device(device)
        if device not in self._on_device:
            self._on_device[device] = {n: (k.to(device), t.to(device)) for n, (k, t) in self._tables.items()}
        return self._on_device[device]

    def longest_match(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, K] -> int64 [B, K]: length of the longest library phrase starting at each position and lying
        inside the draft (0 where none does). One vectorised pass per distinct phrase length."""
        b, k = tokens.shape
        span = torch.zeros((b, k), dtype=torch.int64, device=tokens.device)  # [B, K]
        for length, (keys, table) in self.tables(tokens.device).items():
            if length > k:
                continue
            windows = tokens.unfold(1, length, 1)  # [B, W, L], W = K - L + 1
            window_keys = phrase_keys(windows, self.bases)  # [B, W]
            idx = torch.searchsorted(keys, window_keys).clamp_max(keys.numel() - 1)  # [B, W]
            hit = (keys[idx] == window_keys) & (table[idx] == windows).all(-1)  # [B, W]
            hit_len = torch.nn.functional.pad(hit.to(torch.int64) * length, (0, length - 1))  # [B, K]
            span = torch.maximum(span, hit_len)
        return span


def build_phrase_library(sequences: Iterable[Sequence[int]], num_merges: int, min_count: int = 2) -> PhraseLibrary:
    """BPE-style phrase mining (SJD-PV): start from single-token symbols, count adjacent symbol pairs over all
    sequences, merge the most frequent pair everywhere (non-overlapping, left to right), repeat ``num_merges`` times
    or until the best pair occurs fewer than ``min_count`` times. Ties go to the pair seen first in the corpus.
    The phrases are the merged symbols (all of >= 2 tokens), so ``len(library) <= num_merges``.

    An offline builder in plain Python: O(num_merges x corpus length).
    """
    check_param("num_merges", num_merges, _is_int(num_merges) and num_merges >= 0, "an int >= 0")
    check_param("min_count", min_count, _is_int(min_count) and min_count >= 1, "an int >= 1")
    corpus: list[list[tuple[int, ...]]] = []
    for seq in sequences:
        tokens = [int(t) for t in (seq.tolist() if isinstance(seq, torch.Tensor) else seq)]
        corpus.append([(t,) for t in tokens])
    phrases: list[tuple[int, ...]] = []
    for _ in range(num_merges):
        counts = Counter(pair for symbols in corpus for pair in zip(symbols, symbols[1:]))
        if not counts:
            break
        pair, count = max(counts.items(), key=lambda kv: kv[1])  # first maximal pair in corpus order
        if count < min_count:
            break
        corpus = [_merge_pair(symbols, pair) for symbols in corpus]
        phrases.append(pair[0] + pair[1])
    return PhraseLibrary(phrases)


def _merge_pair(symbols: list[tuple[int, ...]], pair) -> list[tuple[int, ...]]:
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def greedy_unit_starts(span: torch.Tensor) -> torch.Tensor:
    """Greedy left-to-right segmentation by pointer doubling, without a loop over positions.

    span [B, K] (longest phrase length at each position, 0 = none) -> unit starts s [B, K+1] int64:
    s_0 = 0, s_{m+1} = next(s_m) with next(i) = i + max(1, span_i) and next(K) = K, so s_m is the start of unit m
    and equals K once the draft is used up. ceil(log2(K+1)) steps: s_{m + 2^t} = J^{2^t}(s_m), J^{2^{t+1}} = J^{2^t} o
    J^{2^t}.
    """
    b, k = span.shape
    pos = torch.arange(k, device=span.device)  # [K]
    jump = torch.cat([pos + span.clamp_min(1), torch.full((b, 1), k, dtype=torch.int64, device=span.device)], 1)  # [B, K+1]
    starts = torch.zeros((b, 1), dtype=torch.int64, device=span.device)  # [B, 1] s_0
    while starts.shape[1] < k + 1:
        starts = torch.cat([starts, jump.gather(1, starts)], 1)  # [B, 2^(t+1)]
        jump = jump.gather(1, jump)  # [B, K+1]
    return starts[:, : k + 1]


def phrase_core(x, p, q, library: PhraseLibrary, u, e) -> Verdict:
    """Phrase-level joint acceptance (SJD-PV) on a chain.

    x [B, K] draft tokens, p [B, K+1, V], q [B, K, V] | None (one-hot: log q = 0), u [B, K] float64 uniforms
    (unit m uses u at its first position), e [B, V] Exp(1) noise for the residual.

    The draft is cut left to right into units: the longest library phrase starting at the current position, else
    one token. A phrase v_1..v_L is accepted as a whole iff log u <= log R_p = Σ_k (log p(v_k) - log q(v_k))
    (evaluated as log u + Σ log q <= Σ log p, so q = 0 or p = 0 never gives NaN); a single token iff u q <= p,
    the exact rule. The verdict accepts the units before the first rejected one and samples norm(max(0, p - q))
    at that unit's first position (the bonus from p_K if every unit passes).
    extras["phrase_tokens"] [B]: accepted tokens that were accepted inside multi-token phrases.
    """
    b, k = x.shape
    p_x, q_x = token_probs(p, q, x)  # [B, K] float64
    starts = greedy_unit_starts(library.longest_match(x))  # [B, K+1]; s_m, = K past the last unit
    unit_len = starts[:, 1:] - starts[:, :-1]  # [B, K]; 0 for the padding units past the end
    is_start = torch.zeros((b, k + 1), dtype=torch.bool, device=x.device).scatter(1, starts, True)[:, :k]  # [B, K]
    unit_of = is_start.to(torch.int64).cumsum(1) - 1  # [B, K] unit index of each position
    zeros = torch.zeros_like(p_x)  # [B, K]
    sum_log_p = zeros.scatter_add(1, unit_of, p_x.log())  # [B, K] Σ log p over each unit
    sum_log_q = zeros.scatter_add(1, unit_of, q_x.log())  # [B, K] Σ log q over each unit
    first = starts[:, :k].clamp_max(max(k - 1, 0))  # [B, K] first position of each unit (clamped for padding)
    u_m = u.gather(1, first)  # [B, K] one uniform per unit
    single = u_m * q_x.gather(1, first) <= p_x.gather(1, first)  # [B, K] exact rule u <= p/q
    joint = u_m.log() + sum_log_q <= sum_log_p  # [B, K] log u <= log R_p
    accept = torch.where(unit_len >= 2, joint, single) | (unit_len == 0)  # [B, K] per unit
    n = starts.gather(1, first_rejection(accept)[:, None]).squeeze(1)  # [B] first position of the rejected unit
    in_phrase = unit_len.gather(1, unit_of) >= 2  # [B, K]
    accepted = torch.arange(k, device=x.device) < n[:, None]  # [B, K]
    extras = {"phrase_tokens": (in_phrase & accepted).sum(1)}
    return Verdict(n, (residual_weights(p, q, x, n).float() / e).argmax(-1), extras=extras)


def reference_phrase(x, p, q, library: PhraseLibrary, u, e) -> Verdict:
    """:func:`phrase_core` with plain per-row, per-position loops (same inputs, same randomness)."""
    phrases = set(library.phrases)
    lengths = sorted({len(ph) for ph in phrases}, reverse=True)
    b, k = x.shape
    n_out, tok_out, phrase_out = [], [], []
    for r in range(b):
        row = [int(t) for t in x[r]]
        i, n, in_phrases = 0, k, 0
        while i < k:
            size = next((n_ for n_ in lengths if i + n_ <= k and tuple(row[i : i + n_]) in phrases), 1)
            px = [float(p[r, j, row[j]]) for j in range(i, i + size)]
            qx = [1.0 if q is None else float(q[r, j, row[j]]) for j in range(i, i + size)]
            uu = float(u[r, i])
            if size == 1:
                ok = uu * qx[0] <= px[0]
            else:
                slp, slq = 0.0, 0.0
                for a, c in zip(px, qx):
                    slp += _log(a)
                    slq += _log(c)
                ok = _log(uu) + slq <= slp
            if not ok:
                n = i
                break
            in_phrases += size if size >= 2 else 0
            i += size
        n_out.append(n)
        phrase_out.append(in_phrases)
        tok_out.append(reference_residual_sample(p[r], None if q is None else q[r], x[r], n, e[r]))
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out), extras={"phrase_tokens": torch.tensor(phrase_out)})


@VERIFIERS.register("phrase")
class PhraseVerifier(Verifier):
    """Phrase-level joint acceptance (SJD-PV): a draft span that matches a phrase-library entry (longest match,
    greedy left to right) is accepted as one unit iff log u <= log R_p = Σ_k (log p(v_k) - log q(v_k)), so one
    low-ratio token inside a high-ratio phrase no longer truncates the block; every other token follows exact
    speculative sampling, and the correction is the exact residual at the rejected unit's first position.

    ``library``: a :class:`PhraseLibrary` (see :func:`build_phrase_library`), an iterable of token-id sequences,
    or None (empty: exactly ``speculative``). Deterministic drafts (q None) use one-hot q, log q = 0.
    """

    lossless = False
    bounds = ("lossy inside library phrases only (a phrase passes on its joint ratio Π p/q, so tokens with p/q < 1 "
              "ride along); single tokens and the residual follow exact speculative sampling: empty library = exact")  # fmt: skip
    paper = "SJD-PV (Yu et al. 2026, arXiv:2603.06666); BPE merges (Sennrich et al. 2016)"

    def __init__(self, library: PhraseLibrary | Iterable[Sequence[int]] | None = None):
        if library is None:
            library = PhraseLibrary()
        elif not isinstance(library, PhraseLibrary):
            try:
                library = PhraseLibrary(library)
            except (TypeError, ValueError) as err:
                raise ValueError(f"library: expected a PhraseLibrary, an iterable of token-id sequences of length "
                                 f">= 2, or None, got {library!r} ({err})") from None  # fmt: skip
        self.library = library

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "phrase")
        p, x = require_probs(scores, "phrase"), proposal.tokens
        u = draft_uniforms(x, generator)  # [B, K]
        e = residual_noise(p, generator)  # [B, V]
        return phrase_core(x, p, proposal.probs, self.library, u, e)


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
        check_param("tau", tau, _is_int(tau) and tau >= 0, "an int >= 0 (allowed edit operations)")
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
        ok = isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and threshold > 0
        check_param("threshold", threshold, ok, "a number > 0 (drafter confidence at which to skip; > 1 = never skip)")
        self.threshold = float(threshold)

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "confidence-skip")
        p, x = require_probs(scores, "confidence-skip"), proposal.tokens
        confidence = draft_confidence(proposal)  # [B, K]
        u = draft_uniforms(x, generator)  # [B, K]
        e = residual_noise(p, generator)  # [B, V]
        return confidence_skip_core(x, p, proposal.probs, confidence, self.threshold, u, e)


# ---------------------------------------------------------------------------------------------------------------
# mmspec bench verifiers
# ---------------------------------------------------------------------------------------------------------------
def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """One :class:`BenchCase` per rule: vectorised core vs reference loop on identical inputs and randomness."""
    g = torch.Generator().manual_seed(seed)
    draft_logits = 4 * torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V]
    q = torch.softmax(draft_logits[:, :k], -1)  # [B, K, V]
    x = torch.multinomial(q.flatten(0, 1), 1, generator=g).view(batch, k)  # [B, K]
    logits = draft_logits + torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V] a correlated target
    p = torch.softmax(logits, -1)  # [B, K+1, V]
    u = torch.rand((batch, k), dtype=torch.float64, generator=g)  # [B, K]
    e = torch.empty((batch, vocab)).exponential_(generator=g)  # [B, V]
    # a library that matches: a bigram and a trigram of every row's draft, plus unrelated phrases
    mined = [x[r, 0:2].tolist() for r in range(batch)] + [x[r, 3:6].tolist() for r in range(batch) if k >= 6]
    library = PhraseLibrary(mined + torch.randint(vocab, (64, 3), generator=g).tolist())
    # edit distance: the target's argmax with one or two substitutions per row
    near = logits[:, :k].argmax(-1).clone()  # [B, K]
    cols = torch.randint(max(k, 1), (batch, 2), generator=g)  # [B, 2]
    near = near.scatter(1, cols, torch.randint(vocab, (batch, 2), generator=g)) if k else near
    conf = q.gather(-1, x[..., None]).squeeze(-1)  # [B, K]
    threshold = float(conf.median()) if k else 0.5
    return [
        BenchCase("phrase", lambda: phrase_core(x, p, q, library, u, e), lambda: reference_phrase(x, p, q, library, u, e)),
        BenchCase("edit-distance", lambda: edit_distance_core(near, logits, 2), lambda: reference_edit_distance(near, logits, 2)),
        BenchCase("confidence-skip", lambda: confidence_skip_core(x, p, q, conf, threshold, u, e),
                  lambda: reference_confidence_skip(x, p, q, conf, threshold, u, e)),
    ]  # fmt: skip
