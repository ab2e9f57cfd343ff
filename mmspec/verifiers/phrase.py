"""Phrase-level joint acceptance (SJD-PV, Yu et al. 2026): METHODS.md §3.

=================== ============================================================ ================================
rule                relaxation                                                   exact special case
=================== ============================================================ ================================
``phrase``          a draft span matching a phrase-library entry is accepted     empty library -> ``speculative``
                    as one unit iff log u <= Σ_k (log p(v_k) - log q(v_k))
=================== ============================================================ ================================

Lossy inside library phrases only (tokens with p/q < 1 ride along on the phrase's joint ratio); single tokens and the
residual follow exact speculative sampling. A core function of explicit inputs and pre-drawn randomness
(:func:`phrase_core`) plus a per-row, per-position loop consuming the same randomness (:func:`reference_phrase`). The
randomness is drawn in the order of the exact rules (uniforms u [B, K] in float64, then the exponential-race noise
e [B, V]), so the empty-library case reproduces ``speculative`` verdict for verdict. Token chains only.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import torch

from ..checks import check_int, check_param
from ..types import Verdict
from .base import VERIFIERS, BenchCase, Verifier, first_rejection
from .exact import chain_inputs, reference_residual_sample, residual_weights, token_probs


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
    check_int("num_merges", num_merges, 0)
    check_int("min_count", min_count, 1)
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
        x, p, u, e = chain_inputs(proposal, scores, generator, "phrase")
        return phrase_core(x, p, proposal.probs, self.library, u, e)


def bench_inputs(batch: int, k: int, vocab: int, seed: int) -> dict:
    """Random drafts x, draft / target distributions q / p with a correlated target, uniforms u and noise e."""
    g = torch.Generator().manual_seed(seed)
    draft_logits = 4 * torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V]
    q = torch.softmax(draft_logits[:, :k], -1)  # [B, K, V]
    x = torch.multinomial(q.flatten(0, 1), 1, generator=g).view(batch, k)  # [B, K]
    logits = draft_logits + torch.randn(batch, k + 1, vocab, generator=g)  # [B, K+1, V] a correlated target
    p = torch.softmax(logits, -1)  # [B, K+1, V]
    u = torch.rand((batch, k), dtype=torch.float64, generator=g)  # [B, K]
    e = torch.empty((batch, vocab)).exponential_(generator=g)  # [B, V]
    return {"g": g, "x": x, "q": q, "logits": logits, "p": p, "u": u, "e": e}


def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """The vectorised core vs its reference loop on identical inputs and randomness (``mmspec bench verifiers``)."""
    d = bench_inputs(batch, k, vocab, seed)
    g, x, q, p, u, e = d["g"], d["x"], d["q"], d["p"], d["u"], d["e"]
    # a library that matches: a bigram and a trigram of every row's draft, plus unrelated phrases
    mined = [x[r, 0:2].tolist() for r in range(batch)] + [x[r, 3:6].tolist() for r in range(batch) if k >= 6]
    library = PhraseLibrary(mined + torch.randint(vocab, (64, 3), generator=g).tolist())
    return [BenchCase("phrase", lambda: phrase_core(x, p, q, library, u, e), lambda: reference_phrase(x, p, q, library, u, e))]
