"""Codebook-neighbourhood rules for visual AR tokens: LANTERN (latent neighbours) and GSD (grouped acceptance): METHODS.md §3.

Lossy: every rule trades exactness for acceptance, says what it still bounds (``bounds``), and has an exact special
case that reproduces a lossless rule of :mod:`mmspec.verifiers.exact` verdict for verdict:

=================== ======================================================== ==================================
rule                relaxation                                               exact special case
=================== ======================================================== ==================================
``lantern``         relaxed target p~ moves neighbour mass onto x (TV <= δ)  δ = 0 or k = 0 -> ``speculative``
``gsd``             accept w.p. min(1, Σ_G p / Σ_G q) over a token group G  G = {x} -> ``speculative``
=================== ======================================================== ==================================

Each vectorised rule is a core function of explicit random draws; ``reference_*`` functions compute the same verdicts
with plain Python loops over rows and positions (torch ops along the vocabulary only): the test oracles and the
``mmspec bench verifiers`` baseline.
"""

from __future__ import annotations

import torch

from ..checks import check_int, check_param
from ..types import Verdict
from .base import (VERIFIERS, BenchCase, Verifier, first_rejection, reference_chain)
from .exact import bench_inputs, chain_inputs, reference_residual_sample, residual_weights, token_probs


# ---------------------------------------------------------------------------------------------------------------
# LANTERN latent-neighbourhood relaxation (visual AR)
# ---------------------------------------------------------------------------------------------------------------
def build_neighbour_table(embeddings: torch.Tensor, k: int, normalize: bool = True, chunk: int = 2048) -> torch.Tensor:
    """Nearest neighbours of every codebook entry: embeddings [V, D] -> int64 [V, k], nearest first, self excluded.

    Use the embeddings the quantiser actually looks up (LlamaGen L2-normalises its codebook: ``normalize=True``).
    Computed in chunks of rows so a 16k x 16k distance matrix never materialises at once.
    """
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings: expected a [V, D] codebook matrix, got shape {tuple(embeddings.shape)}")
    v = embeddings.shape[0]
    check_param("k", k, isinstance(k, int) and 0 <= k <= min(1000, v - 1), f"an int in [0, {min(1000, v - 1)}]")
    e = embeddings.float()
    if normalize:
        e = torch.nn.functional.normalize(e, dim=-1)
    out = []
    for start in range(0, v, chunk):
        d = torch.cdist(e[start : start + chunk], e)  # [c, V]
        d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")  # not its own neighbour
        out.append(torch.topk(d, k, dim=-1, largest=False).indices)  # [c, k]
    return torch.cat(out).long()


def lantern_relaxation(x, p, neighbours, delta: float, lam: float | None):
    """Per draft position: how much neighbour mass moves onto x.

    x [B, K]; p [B, K+1, V]; neighbours [V, k]. Returns (nb [B, K, k] neighbour ids, m [B, K] how many of them are
    absorbed, c_m [B, K] their total target mass). δ-mode: m = max{j : c_j <= δ}; λ-mode: m = max{j : c_j <=
    (λ - 1) p(x)}.
    """
    k = x.shape[1]
    nb = neighbours[x]  # [B, K, k]
    c = p[:, :k].gather(-1, nb).double().cumsum(-1)  # [B, K, k] c_j = sum_{i<=j} p(n_i)
    p_x = p[:, :k].gather(-1, x[..., None]).double()  # [B, K, 1]
    budget = (lam - 1.0) * p_x if lam is not None else torch.full_like(p_x, delta)  # [B, K, 1]
    m = (c <= budget).sum(-1)  # [B, K] (c is non-decreasing)
    c0 = torch.zeros(c.shape[:-1] + (1,), dtype=c.dtype, device=c.device)  # c_0 = 0 (also when k = 0)
    c_m = torch.cat([c0, c], -1).gather(-1, m[..., None]).squeeze(-1)  # [B, K]
    return nb, m, c_m


def lantern_core(x, p, q, neighbours, delta, lam, u, e) -> Verdict:
    if x.shape[1] == 0:  # no drafts: the bonus is a sample of p_0
        return Verdict(x.new_zeros(x.shape[0]), (p[:, 0].float() / e).argmax(-1), extras={"tv": p.new_zeros(x.shape[0], 0)})
    p_x, q_x = token_probs(p, q, x)  # [B, K]
    nb, m, c_m = lantern_relaxation(x, p, neighbours, delta, lam)
    n = first_rejection(u * q_x <= p_x + c_m)  # [B]: u <= p~(x)/q(x), p~(x) = p(x) + c_m
    # relaxed target at the stop position: absorbed neighbours -> 0, their mass -> x (bonus position: p itself)
    b, k = x.shape
    rows = torch.arange(b, device=x.device)
    stop = n.clamp(max=k - 1)  # [B] (for n = K the relaxation is not applied)
    p_rel = p.clone()  # [B, K+1, V]
    absorbed = torch.arange(nb.shape[-1], device=x.device) < m[rows, stop][:, None]  # [B, k]
    at_stop = (n < k)[:, None] & absorbed  # [B, k]
    row_p = p_rel[rows, stop]  # [B, V]
    row_p = row_p.scatter(-1, nb[rows, stop], torch.where(at_stop, 0.0, row_p.gather(-1, nb[rows, stop])))
    gain = torch.where(n < k, c_m[rows, stop], torch.zeros_like(c_m[:, 0])).to(p.dtype)  # [B]
    row_p = row_p.scatter_add(-1, x[rows, stop][:, None], gain[:, None])
    p_rel[rows, stop] = row_p
    return Verdict(n, (residual_weights(p_rel, q, x, n).float() / e).argmax(-1), extras={"tv": c_m})


@VERIFIERS.register("lantern")
class LanternVerifier(Verifier):
    """LANTERN relaxed speculative sampling for visual AR models.

    For draft x with codebook neighbours n_1..n_k (nearest first; ``neighbours`` from :func:`build_neighbour_table`),
    c_j = Σ_{i<=j} p(n_i) and m = max{j : c_j <= δ} (λ-mode, LANTERN++: c_j <= (λ - 1) p(x)). The relaxed target
    moves the mass of n_1..n_m onto x: p~(x) = p(x) + c_m, p~(n_i) = 0 for i <= m, so TV(p, p~) = c_m <= δ (λ-mode:
    p~(x) <= λ p(x)). Accept iff u <= p~(x)/q(x); on rejection sample norm(max(0, p~ - q)) — the principled
    residual (LANTERN's reference code resamples with the unrelaxed p there; we do not). δ = 0 or k = 0 is exact.
    ``extras["tv"]`` [B, K] reports c_m per position.
    """

    lossless = False
    bounds = "TV(p, p~) <= δ at every position (λ-mode: p~(x) <= λ p(x)); δ = 0 or k = 0 is exact sampling"
    paper = "LANTERN (Jang et al. 2024); LANTERN++ (λ-mode), METHODS.md §3"

    def __init__(self, neighbours: torch.Tensor, delta: float = 0.1, lam: float | None = None):
        if not isinstance(neighbours, torch.Tensor) or neighbours.dim() != 2:
            raise ValueError("neighbours: expected an int64 [V, k] table from build_neighbour_table(codebook, k), "
                             f"got {type(neighbours).__name__} {getattr(neighbours, 'shape', '')}")  # fmt: skip
        check_param("delta", delta, isinstance(delta, (int, float)) and 0 <= delta <= 1, "a number in [0, 1]")
        check_param("lam", lam, lam is None or (isinstance(lam, (int, float)) and lam >= 1), "None or a number >= 1")
        self.neighbours, self.delta, self.lam = neighbours.long(), float(delta), lam

    def verify(self, proposal, scores, generator=None) -> Verdict:
        x, p, u, e = chain_inputs(proposal, scores, generator, "lantern")
        if self.neighbours.shape[0] < p.shape[-1]:
            raise ValueError(f"neighbours: expected a row per vocabulary entry ({p.shape[-1]}), got {self.neighbours.shape[0]}")
        return lantern_core(x, p, proposal.probs, self.neighbours.to(x.device), self.delta, self.lam, u, e)


def reference_lantern(x, p, q, neighbours, delta, lam, u, e) -> Verdict:
    b, k = x.shape
    n_out, tok_out = [], []
    for row in range(b):
        n, p_stop = k, p[row, k].clone()
        for i in range(k):
            xi = int(x[row, i])
            px = float(p[row, i, xi])
            qx = 1.0 if q is None else float(q[row, i, xi])
            budget = (lam - 1.0) * px if lam is not None else delta
            c, m = 0.0, 0
            for j, nbr in enumerate(neighbours[xi].tolist()):  # walk the neighbours nearest first
                c_next = c + float(p[row, i, nbr])
                if c_next > budget:
                    break
                c, m = c_next, j + 1
            if not float(u[row, i]) * qx <= px + c:
                n = i
                p_stop = p[row, i].clone()
                p_stop[neighbours[xi, :m]] = 0.0
                p_stop[xi] += c
                break
        n_out.append(n)
        p_rel = p[row].clone()
        p_rel[n] = p_stop
        tok_out.append(reference_residual_sample(p_rel, None if q is None else q[row], x[row], n, e[row]))
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out))


# ---------------------------------------------------------------------------------------------------------------
# GSD grouped acceptance
# ---------------------------------------------------------------------------------------------------------------
def calibrate_distance_threshold(embeddings: torch.Tensor, quantile: float = 0.05, pairs: int = 20000, seed: int = 0) -> float:
    """A per-model embedding-distance threshold for GSD: the ``quantile`` of distances between random code pairs."""
    g = torch.Generator().manual_seed(seed)
    v = embeddings.shape[0]
    a, b = torch.randint(v, (pairs,), generator=g), torch.randint(v, (pairs,), generator=g)
    e = embeddings.float().cpu()
    return float(torch.quantile((e[a] - e[b]).norm(dim=-1), quantile))


def gsd_group(x, p, window: int, prob_tol: float, embeddings, dist_threshold) -> tuple[torch.Tensor, torch.Tensor]:
    """The group G(x) per draft position: tokens within ±window ranks of x in p's ranking, with
    |p(y) - p(x)| < prob_tol and (if embeddings are given) ||e_y - e_x|| < dist_threshold; x always included.

    Returns (members [B, K, 2w+1] token ids, valid [B, K, 2w+1] bool). One batched sort, no Python loops.
    """
    k = x.shape[1]
    pk = p[:, :k]  # [B, K, V]
    order = pk.argsort(dim=-1, descending=True, stable=True)  # [B, K, V] the one sort
    p_x_all = pk.gather(-1, x[..., None])  # [B, K, 1]
    ids = torch.arange(pk.shape[-1], device=x.device)
    rank = ((pk > p_x_all) | ((pk == p_x_all) & (ids < x[..., None]))).sum(-1, keepdim=True)  # [B, K, 1] stable rank
    offsets = torch.arange(-window, window + 1, device=x.device)  # [2w+1]
    idx = rank + offsets  # [B, K, 2w+1]
    inside = (idx >= 0) & (idx < pk.shape[-1])
    members = order.gather(-1, idx.clamp(0, pk.shape[-1] - 1))  # [B, K, 2w+1]
    valid = inside & ((pk.gather(-1, members) - p_x_all).abs() < prob_tol)
    if embeddings is not None:
        dist = (embeddings[members] - embeddings[x][..., None, :]).norm(dim=-1)  # [B, K, 2w+1]
        valid = valid & (dist < dist_threshold)
    valid = valid | (members == x[..., None])  # x itself is always in its group
    return members, valid


def gsd_core(x, p, q, window, prob_tol, embeddings, dist_threshold, u, e) -> Verdict:
    k = x.shape[1]
    members, valid = gsd_group(x, p, window, prob_tol, embeddings, dist_threshold)
    mass_p = (p[:, :k].gather(-1, members).double() * valid).sum(-1)  # [B, K] Σ_G p
    if q is None:
        mass_q = torch.ones_like(mass_p)  # one-hot q: Σ_G q = 1 (x is in G)
    else:
        mass_q = (q.gather(-1, members).double() * valid).sum(-1)  # [B, K] Σ_G q
    n = first_rejection(u * mass_q <= mass_p)  # [B]: accept w.p. min(1, Σ_G p / Σ_G q)
    return Verdict(n, (residual_weights(p, q, x, n).float() / e).argmax(-1))


@VERIFIERS.register("gsd")
class GroupedSpeculativeVerifier(Verifier):
    """GSD grouped acceptance for visual AR: accept x with probability min(1, Σ_{y∈G} p(y) / Σ_{y∈G} q(y)) where
    G = tokens within ±``ranks`` ranks of x in the target's ranking, filtered by |p(y) - p(x)| < ``prob_tol`` and
    (given a codebook) embedding distance < ``dist_threshold`` (see :func:`calibrate_distance_threshold`). On
    rejection the exact residual norm(max(0, p - q)) is sampled. ranks = 0 (G = {x}) is exact sampling. Note the
    grouped ratio is not uniformly more permissive than p(x)/q(x): a group where q has more mass than p lowers it."""

    lossless = False
    bounds = "acceptance uses the mass of a group of near-equivalent tokens; G = {x} (ranks = 0) is exact"
    paper = "Grouped Speculative Decoding (GSD, So et al. 2025), METHODS.md §3"

    def __init__(self, ranks: int = 7, prob_tol: float = 0.15, embeddings: torch.Tensor | None = None,
                 dist_threshold: float | None = None):  # fmt: skip
        check_int("ranks", ranks, 0)
        check_param("prob_tol", prob_tol, isinstance(prob_tol, (int, float)) and prob_tol > 0, "a number > 0")
        if embeddings is not None and dist_threshold is None:
            dist_threshold = calibrate_distance_threshold(embeddings)
        self.ranks, self.prob_tol, self.embeddings, self.dist_threshold = ranks, float(prob_tol), embeddings, dist_threshold

    def verify(self, proposal, scores, generator=None) -> Verdict:
        x, p, u, e = chain_inputs(proposal, scores, generator, "gsd")
        emb = None if self.embeddings is None else self.embeddings.to(x.device).float()
        return gsd_core(x, p, proposal.probs, self.ranks, self.prob_tol, emb, self.dist_threshold, u, e)


def reference_gsd(x, p, q, window, prob_tol, embeddings, dist_threshold, u, e) -> Verdict:
    def accept(row, i):
        xi, probs = int(x[row, i]), p[row, i]
        order = probs.argsort(descending=True, stable=True)  # one sort per position
        rank = int((order == xi).nonzero())
        mass_p = mass_q = 0.0
        for y in order[max(0, rank - window) : rank + window + 1].tolist():
            ok = abs(float(probs[y]) - float(probs[xi])) < prob_tol
            if embeddings is not None:
                ok = ok and float((embeddings[y] - embeddings[xi]).norm()) < dist_threshold
            if ok or y == xi:
                mass_p += float(probs[y])
                mass_q += (1.0 if y == xi else 0.0) if q is None else float(q[row, i, y])
        return float(u[row, i]) * mass_q <= mass_p

    return reference_chain(*x.shape, accept, lambda row, n: reference_residual_sample(
        p[row], None if q is None else q[row], x[row], n, e[row]))  # fmt: skip



def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """Vectorised rule vs per-position reference loop on identical random inputs (``mmspec bench verifiers``)."""
    d = bench_inputs(batch, k, vocab, seed)
    x, q, p, u, e = d["x"], d["q"], d["p"], d["u"], d["e"]
    codebook = torch.randn(vocab, 8, generator=torch.Generator().manual_seed(seed))
    neighbours = build_neighbour_table(codebook, 16)
    return [
        BenchCase("lantern (delta)", lambda: lantern_core(x, p, q, neighbours, 0.1, None, u, e),
                  lambda: reference_lantern(x, p, q, neighbours, 0.1, None, u, e)),
        BenchCase("gsd", lambda: gsd_core(x, p, q, 7, 0.15, None, None, u, e),
                  lambda: reference_gsd(x, p, q, 7, 0.15, None, None, u, e)),
    ]  # fmt: skip
