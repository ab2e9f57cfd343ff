"""Exact verification of token trees (METHODS.md §1, "Tree verification").

Greedy: the deepest node whose whole root path matches the target's argmax, found for all rows at once with the
ancestor matrix. Sampling: multi-draft recursive rejection (SpecInfer): at each node the children are tried in
order against the current residual r (starting at p); child c is accepted with probability min(1, r(c)/q_c(c)),
and after a rejection r <- norm(max(0, r - q_c)). Deterministic children (q None) use q_c = one-hot(c): accept with
r(c) and remove c from r (sampling without replacement). If every child fails, sample from r.
"""

from __future__ import annotations

import torch

from ..sampling import sample
from ..tree import ancestor_matrix, child_table, depths, path_to
from ..types import Proposal, TargetScores, Verdict
from .base import require_probs


def verify_tree_greedy(proposal: Proposal, scores: TargetScores) -> Verdict:
    tokens, parents = proposal.tokens, proposal.parents  # [B, N]
    device = tokens.device
    argmax = scores.logits.argmax(-1)  # [B, N+1]
    parent_pos = torch.tensor(parents, device=device) + 1  # [N] position of each node's parent in the scores
    match = (tokens == argmax[:, parent_pos]).float()  # [B, N]
    anc = ancestor_matrix(parents, device).float()  # [N, N]
    depth = torch.tensor(depths(parents), device=device, dtype=torch.float32) + 1  # [N] path lengths
    ok = (match @ anc.T) == depth  # [B, N]: the whole root path of node i matches
    score = torch.where(ok, depth, torch.zeros_like(depth))  # [B, N]
    n = score.amax(-1).long() if tokens.shape[1] else torch.zeros(tokens.shape[0], dtype=torch.long, device=device)
    node = torch.where(n > 0, score.argmax(-1), torch.full_like(n, -1))  # [B] deepest matched node, -1 = root
    next_tokens = argmax.gather(1, (node + 1)[:, None]).squeeze(1)
    return Verdict(num_accepted=n, next_tokens=next_tokens, path=path_to(node, parents, len(set(depths(parents))) or 1))


def verify_tree_sampling(proposal: Proposal, scores: TargetScores, generator=None) -> Verdict:
    tokens, parents, q = proposal.tokens, proposal.parents, proposal.probs  # [B, N], -, [B, N, V] | None
    p = require_probs(scores, "tree sampling")  # [B, N+1, V]
    b, device = tokens.shape[0], tokens.device
    rows = torch.arange(b, device=device)
    kids = child_table(parents, device)  # [N+1, C]
    max_depth = max(depths(parents)) + 1
    node = torch.full((b,), -1, dtype=torch.long, device=device)  # current accepted node per row (-1 = x_t)
    active = torch.ones(b, dtype=torch.bool, device=device)  # still descending
    n = torch.zeros(b, dtype=torch.long, device=device)
    residual = p[:, 0].double()  # [B, V] r at the current node
    for _ in range(max_depth):  # loop over depth and siblings; batch and vocabulary stay vectorised
        children = kids[node + 1]  # [B, C]
        chosen = torch.full_like(node, -1)
        for j in range(children.shape[1]):
            c = children[:, j]
            trying = active & (chosen < 0) & (c >= 0)
            c_safe = c.clamp_min(0)
            x = tokens[rows, c_safe]  # [B]
            q_c = torch.nn.functional.one_hot(x, p.shape[-1]).double() if q is None else q[rows, c_safe].double()
            r = residual / residual.sum(-1, keepdim=True).clamp_min(1e-300)
            u = torch.rand(b, dtype=torch.float64, device=device, generator=generator)
            accept = trying & (u * q_c[rows, x] <= r[rows, x])
            chosen = torch.where(accept, c, chosen)
            failed = trying & ~accept
            new_r = (r - q_c).clamp_min(0)
            new_r = torch.where(new_r.sum(-1, keepdim=True) <= 1e-12, r, new_r)  # guard: never an empty residual
            residual = torch.where(failed[:, None], new_r, residual)
        moved = active & (chosen >= 0)
        node = torch.where(moved, chosen, node)
        n = n + moved.long()
        residual = torch.where(moved[:, None], p[rows, node + 1].double(), residual)
        active = moved
    next_tokens = sample(residual, generator)  # correction (r after failed siblings) or bonus (p at the leaf)
    return Verdict(num_accepted=n, next_tokens=next_tokens, path=path_to(node, parents, max_depth))
