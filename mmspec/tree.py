"""Static token trees: layout, ancestor masks and depth positions.

A tree of draft tokens is stored flat in BFS order with ``parents[i]`` the index of node i's parent, or -1 when
its parent is the pending token x_t (the root). ``TreeSpec((3, 2, 1))`` is x_t with 3 children, each with 2
children, each with 1 child: 3 + 6 + 6 = 15 nodes, depth 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class TreeSpec:
    branching: tuple[int, ...]  # children per node at each depth

    def __post_init__(self):
        b = self.branching
        if not isinstance(b, tuple) or not b or any(not isinstance(x, int) or x < 1 for x in b):
            raise ValueError(f"tree: expected a non-empty tuple of ints >= 1 (children per depth), got {b!r}")

    @property
    def depth(self) -> int:
        return len(self.branching)

    @cached_property
    def parents(self) -> tuple[int, ...]:
        parents, level = [], [-1]
        for width in self.branching:
            nxt = []
            for p in level:
                for _ in range(width):
                    nxt.append(len(parents))
                    parents.append(p)
            level = nxt
        return tuple(parents)

    @cached_property
    def levels(self) -> tuple[tuple[int, ...], ...]:
        """Node indices per depth (depth 1 first)."""
        depth = depths(self.parents)
        return tuple(tuple(i for i, d in enumerate(depth) if d == lvl) for lvl in range(self.depth))

    @property
    def size(self) -> int:
        return len(self.parents)


def depths(parents) -> list[int]:
    """0-based depth of every node (children of the root have depth 0)."""
    out: list[int] = []
    for p in parents:
        out.append(0 if p < 0 else out[p] + 1)
    return out


def ancestor_matrix(parents, device=None) -> torch.Tensor:
    """[N, N] bool: entry (i, j) is True when j is i or an ancestor of i (what node i may attend to)."""
    n = len(parents)
    anc = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            anc[i] |= anc[p]
    return anc.to(device)


def child_table(parents, device=None) -> torch.Tensor:
    """[N+1, max_children] int64: row 0 the root's children, row i+1 node i's children; -1 pads."""
    kids: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        kids[p + 1].append(i)
    width = max(1, max(len(k) for k in kids))
    table = torch.full((len(kids), width), -1, dtype=torch.long)
    for r, k in enumerate(kids):
        table[r, : len(k)] = torch.tensor(k, dtype=torch.long)
    return table.to(device)


def path_to(node: torch.Tensor, parents, max_len: int) -> torch.Tensor:
    """node [B] (-1 = root) -> [B, max_len] node indices from depth 0 down to ``node`` (left-aligned, -1 pads)."""
    par = torch.tensor(list(parents) + [-1], dtype=torch.long, device=node.device)  # index -1 -> -1
    depth = torch.tensor(depths(parents) + [-1], dtype=torch.long, device=node.device)
    out = torch.full((node.shape[0], max_len), -1, dtype=torch.long, device=node.device)
    cur = node.clone()
    for _ in range(max_len):  # walk up; at most the tree depth
        d = depth[cur]  # [B]
        ok = cur >= 0
        out[ok, d[ok]] = cur[ok]
        cur = torch.where(ok, par[cur], cur)
    return out
