"""Relaxed (lossy) acceptance rules for token drafts: METHODS.md §3.

Every rule here trades exactness for acceptance, says what it still bounds (``bounds``), and has an exact
special case that reproduces a lossless rule of :mod:`mmspec.verifiers.exact` verdict for verdict:

=================== ======================================================== ==================================
rule                relaxation                                               exact special case
=================== ======================================================== ==================================
``ssd``             accept iff u < min(1, p/q) + β                           β = 0 -> ``speculative``
``top-r``           accept iff the draft is among the target's R best        R = 1 -> ``greedy`` (up to ties)
``margin``          accept while log p(x) >= max log p - margin (+ gate)     margin = 0 -> ``greedy`` (ties)
``action-tolerance`` accept iff |x - argmax p| <= r bins (KERV hooks)        r = 0 -> ``greedy``
``lantern``         relaxed target p~ moves neighbour mass onto x (TV <= δ)  δ = 0 or k = 0 -> ``speculative``
``gsd``             accept w.p. min(1, Σ_G p / Σ_G q) over a token group G  G = {x} -> ``speculative``
=================== ======================================================== ==================================

Each vectorised rule is a core function of explicit random draws; ``reference_*`` functions compute the same
verdicts with plain Python loops over rows and positions (torch ops along the vocabulary only): the test oracles
and the ``mmspec bench verifiers`` baseline.
"""

from __future__ import annotations


import torch

from ..types import Verdict
from .base import VERIFIERS, BenchCase, Verifier, check_param, first_rejection, require_chain, require_probs
from .exact import bench_inputs, draft_uniforms, reference_ratio_chain, reference_residual_sample, residual_noise, residual_weights, token_probs





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
        require_chain(proposal, "ssd")
        p, x = require_probs(scores, "ssd"), proposal.tokens
        u = draft_uniforms(x, generator)  # [B, K]
        e = residual_noise(p, generator)  # [B, V]
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
        check_param("r", r, isinstance(r, int) and not isinstance(r, bool) and r >= 1, "an int >= 1")
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
    b, k = x.shape
    n_out, tok_out = [], []
    for r in range(b):
        n = next((i for i in range(k) if not accept_fn(r, i)), k)
        n_out.append(n)
        tok_out.append(int((p[r, n].float() / e[r]).argmax()))
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out))


def reference_top_r(x, logits, p, r, e) -> Verdict:
    def accept(row, i):
        return int((logits[row, i] > logits[row, i, x[row, i]]).sum()) < r

    return reference_rank_rules(x, logits, p, e, accept)


def reference_margin(x, logits, p, margin, e) -> Verdict:
    def accept(row, i):
        row_logits = logits[row, i].double()  # log p up to the row's logsumexp, which cancels
        return bool(row_logits[x[row, i]] >= row_logits.max() - margin)

    return reference_rank_rules(x, logits, p, e, accept)


# ---------------------------------------------------------------------------------------------------------------
# Action-bin tolerance (Spec-VLA) with KERV hooks
# ---------------------------------------------------------------------------------------------------------------
def action_tolerance_core(x, logits, r: torch.Tensor, is_action: torch.Tensor | None) -> Verdict:
    """x [B, K]; r [B] per-row tolerance in bins; is_action [B, K] bool (None = all action tokens)."""
    k = x.shape[1]
    best = logits.argmax(-1)  # [B, K+1]
    close = (x - best[:, :k]).abs() <= r[:, None]  # [B, K]: token distance = bin distance for action tokens
    if is_action is not None:
        close = torch.where(is_action, close, x == best[:, :k])  # other tokens must match exactly
    n = first_rejection(close)  # [B]
    return Verdict(n, best.gather(1, n[:, None]).squeeze(1))


@VERIFIERS.register("action-tolerance")
class ActionToleranceVerifier(Verifier):
    """Spec-VLA relaxed acceptance for action tokens: accept x_i iff |x_i - argmax p_i| <= r (bins; OpenVLA action
    tokens map monotonically to bins, so token distance is bin distance); the correction is the target's argmax.

    Hooks for KERV: a per-row tolerance in ``proposal.meta["tolerance"]`` ([B] ints, e.g. from
    :func:`adaptive_tolerance`) overrides ``r``; ``proposal.meta["is_action"]`` ([B, K] bool) marks which positions
    are action tokens (others must match exactly). On a rejection the caller may fill the remaining action
    dimensions from :class:`KalmanActionFilter` instead of re-running the target. r = 0 is greedy match.
    """

    lossless = False
    needs_probs = False
    bounds = "every accepted action token is within r bins of the target's argmax; r = 0 is greedy match"
    paper = "Spec-VLA; KERV (Kalman fallback, kinematic tolerance), METHODS.md §3"

    def __init__(self, r: int = 1):
        check_param("r", r, isinstance(r, int) and not isinstance(r, bool) and r >= 0, "an int >= 0 (bins)")
        self.r = r

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "action-tolerance")
        x = proposal.tokens
        r = proposal.meta.get("tolerance")
        r = torch.full((x.shape[0],), self.r, device=x.device) if r is None else torch.as_tensor(r, device=x.device)
        if r.shape != (x.shape[0],) or bool((r < 0).any()):
            raise ValueError(f"proposal.meta['tolerance']: expected [B={x.shape[0]}] ints >= 0, got {r.tolist()}")
        return action_tolerance_core(x, scores.logits, r.long(), proposal.meta.get("is_action"))


def reference_action_tolerance(x, logits, r, is_action) -> Verdict:
    b, k = x.shape
    n_out, tok_out = [], []
    for row in range(b):
        n = k
        for i in range(k):
            best = int(logits[row, i].argmax())
            action = True if is_action is None else bool(is_action[row, i])
            ok = abs(int(x[row, i]) - best) <= int(r[row]) if action else int(x[row, i]) == best
            if not ok:
                n = i
                break
        n_out.append(n)
        tok_out.append(int(logits[row, n].argmax()))
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out))


def adaptive_tolerance(recent: torch.Tensor, r_min: int = 0, r_max: int = 3, scale: float = 1.0) -> torch.Tensor:
    """KERV-style kinematic tolerance: recent actions [B, T, D] in bin units (T >= 3) -> r [B] int64.

    Smooth motion (small mean |second difference|, i.e. acceleration, across dimensions) earns the loosest
    tolerance ``r_max``; jerky motion tightens it towards ``r_min``: r = clamp(round(r_max - scale * accel)).
    """
    if recent.dim() != 3 or recent.shape[1] < 3:
        raise ValueError(f"recent: expected [B, T >= 3, D] recent actions, got shape {tuple(recent.shape)}")
    accel = recent.double().diff(n=2, dim=1).abs().mean(dim=(1, 2))  # [B]
    return (r_max - scale * accel).round().clamp(r_min, r_max).long()


class KalmanActionFilter:
    """Per-dimension constant-velocity Kalman filter over recent actions (KERV's fallback predictor).

    State per (row, dimension): [position, velocity]. ``update(actions [B, D])`` folds in an observation;
    ``predict() -> [B, D]`` is the next action's expected value. Plain tensors, batched, any device.
    """

    def __init__(self, batch: int, dims: int, process_noise: float = 1e-2, obs_noise: float = 1e-1,
                 device=None, dtype=torch.float64):  # fmt: skip
        check_param("process_noise", process_noise, process_noise > 0, "a number > 0")
        check_param("obs_noise", obs_noise, obs_noise > 0, "a number > 0")
        self.x = torch.zeros(batch, dims, 2, device=device, dtype=dtype)  # [B, D, 2] (position, velocity)
        self.P = torch.eye(2, device=device, dtype=dtype).expand(batch, dims, 2, 2) * 1e3  # [B, D, 2, 2]
        self.F = torch.tensor([[1.0, 1.0], [0.0, 1.0]], device=device, dtype=dtype)  # constant velocity
        self.Q = torch.eye(2, device=device, dtype=dtype) * process_noise
        self.R = obs_noise
        self.seen = 0

    def predict(self) -> torch.Tensor:
        return (self.x @ self.F.T)[..., 0]  # [B, D]

    def update(self, actions: torch.Tensor) -> None:
        x = self.x @ self.F.T  # [B, D, 2] predicted state
        P = self.F @ self.P @ self.F.T + self.Q  # [B, D, 2, 2]
        s = P[..., 0, 0] + self.R  # [B, D] innovation variance (we observe the position)
        gain = P[..., :, 0] / s[..., None]  # [B, D, 2]
        resid = actions.to(x.dtype) - x[..., 0]  # [B, D]
        self.x = x + gain * resid[..., None]
        self.P = P - gain[..., :, None] * P[..., 0:1, :]  # (I - K H) P with H = [1, 0]
        self.seen += 1


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
        require_chain(proposal, "lantern")
        p, x = require_probs(scores, "lantern"), proposal.tokens
        if self.neighbours.shape[0] < p.shape[-1]:
            raise ValueError(f"neighbours: expected a row per vocabulary entry ({p.shape[-1]}), got {self.neighbours.shape[0]}")
        u = draft_uniforms(x, generator)
        e = residual_noise(p, generator)
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
    G = tokens within ±``window`` ranks of x in the target's ranking, filtered by |p(y) - p(x)| < ``prob_tol`` and
    (given a codebook) embedding distance < ``dist_threshold`` (see :func:`calibrate_distance_threshold`). On
    rejection the exact residual norm(max(0, p - q)) is sampled. window = 0 (G = {x}) is exact sampling. Note the
    grouped ratio is not uniformly more permissive than p(x)/q(x): a group where q has more mass than p lowers it."""

    lossless = False
    bounds = "acceptance uses the mass of a group of near-equivalent tokens; G = {x} (window = 0) is exact"
    paper = "Grouped Speculative Decoding (GSD, So et al. 2025), METHODS.md §3"

    def __init__(self, window: int = 7, prob_tol: float = 0.15, embeddings: torch.Tensor | None = None,
                 dist_threshold: float | None = None):  # fmt: skip
        check_param("window", window, isinstance(window, int) and not isinstance(window, bool) and window >= 0, "an int >= 0")
        check_param("prob_tol", prob_tol, isinstance(prob_tol, (int, float)) and prob_tol > 0, "a number > 0")
        if embeddings is not None and dist_threshold is None:
            dist_threshold = calibrate_distance_threshold(embeddings)
        self.window, self.prob_tol, self.embeddings, self.dist_threshold = window, float(prob_tol), embeddings, dist_threshold

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "gsd")
        p, x = require_probs(scores, "gsd"), proposal.tokens
        emb = None if self.embeddings is None else self.embeddings.to(x.device).float()
        u = draft_uniforms(x, generator)
        e = residual_noise(p, generator)
        return gsd_core(x, p, proposal.probs, self.window, self.prob_tol, emb, self.dist_threshold, u, e)


def reference_gsd(x, p, q, window, prob_tol, embeddings, dist_threshold, u, e) -> Verdict:
    b, k = x.shape
    n_out, tok_out = [], []
    for row in range(b):
        n = k
        for i in range(k):
            xi = int(x[row, i])
            probs = p[row, i]
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
            if not float(u[row, i]) * mass_q <= mass_p:
                n = i
                break
        n_out.append(n)
        tok_out.append(reference_residual_sample(p[row], None if q is None else q[row], x[row], n, e[row]))
    return Verdict(torch.tensor(n_out), torch.tensor(tok_out))


# ---------------------------------------------------------------------------------------------------------------
# Microbenchmark cases
# ---------------------------------------------------------------------------------------------------------------
def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """Vectorised rule vs per-position reference loop on identical random inputs (``mmspec bench verifiers``)."""
    d = bench_inputs(batch, k, vocab, seed)
    x, q, logits, p, u, e = d["x"], d["q"], d["logits"], d["p"], d["u"], d["e"]
    codebook = torch.randn(vocab, 8, generator=torch.Generator().manual_seed(seed))
    neighbours = build_neighbour_table(codebook, 16)
    r = torch.full((batch,), 2)
    return [
        BenchCase("ssd", lambda: ssd_core(x, p, q, 0.1, u, e), lambda: reference_ssd(x, p, q, 0.1, u, e)),
        BenchCase("top-r", lambda: top_r_core(x, logits, p, 3, e), lambda: reference_top_r(x, logits, p, 3, e)),
        BenchCase("margin", lambda: margin_core(x, logits, p, q, 2.0, None, e), lambda: reference_margin(x, logits, p, 2.0, e)),
        BenchCase("action-tolerance", lambda: action_tolerance_core(x, logits, r, None),
                  lambda: reference_action_tolerance(x, logits, r, None)),
        BenchCase("lantern (delta)", lambda: lantern_core(x, p, q, neighbours, 0.1, None, u, e),
                  lambda: reference_lantern(x, p, q, neighbours, 0.1, None, u, e)),
        BenchCase("gsd", lambda: gsd_core(x, p, q, 7, 0.15, None, None, u, e),
                  lambda: reference_gsd(x, p, q, 7, 0.15, None, None, u, e)),
    ]  # fmt: skip
