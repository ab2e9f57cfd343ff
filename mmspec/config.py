"""SpecConfig: every knob of a speculative generation, validated on construction with clear errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .checks import check_int, check_param, is_int
from .sampling import SamplingParams
from .tree import TreeSpec


ROW_COMMITS = ("aligned", "independent")  # how a batch's rows commit each round (SpecConfig.rows)


@dataclass(frozen=True)
class SpecConfig:
    num_draft_tokens: int = 4  # K: draft length (the starting length for adaptive policies)
    verifier: str | None = None  # registered verifier name; None = "greedy" or "speculative" by temperature
    verifier_params: dict[str, Any] = field(default_factory=dict)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 32
    draft_length_policy: str = "constant"  # see mmspec.draft_length.POLICIES
    draft_length_params: dict[str, Any] = field(default_factory=dict)
    max_draft_tokens: int = 16  # cap for adaptive policies
    tree: tuple[int, ...] | None = None  # token tree: children per depth, e.g. (3, 2, 1); None = a chain
    eos_token_id: int | list[int] | None = None
    seed: int | None = None
    # batches: "independent" commits each row's own accepted drafts + 1, so one row's early rejection no longer holds
    # back the others; "aligned" (lock-step) commits the same n + 1 on every row (n = the smallest accepted length).
    # None: independent for chains, aligned for token trees (they commit in lock-step)
    rows: str | None = None
    # exactly max_new_tokens per row, EOS ignored (image codes): drafts may fill the last position, a bonus past it
    # is dropped
    fixed_length: bool = False

    def __post_init__(self):
        k = self.num_draft_tokens
        check_int("num_draft_tokens", k, 1)
        check_int("max_new_tokens", self.max_new_tokens, 1)
        check_int("max_draft_tokens", self.max_draft_tokens, k, note=" (num_draft_tokens)")
        self.sampling  # validates temperature / top_k / top_p
        check_param("seed", self.seed, self.seed is None or (is_int(self.seed) and self.seed >= 0), "an int >= 0 or None")
        from .verifiers import check_verifier, make_verifier  # (verifiers import the sampling module, not config)

        check_verifier(self.verifier_name, ("token", "jacobi"), "the token engine")
        make_verifier(self.verifier_name, **self.verifier_params)  # validates the parameters now, not mid-loop
        eos = self.eos_ids
        check_param("eos_token_id", self.eos_token_id, all(is_int(e) and e >= 0 for e in eos),
                    "a token id (int >= 0), a list of them, or None")  # fmt: skip
        if self.rows is None:
            object.__setattr__(self, "rows", "aligned" if self.tree is not None else "independent")
        if self.rows not in ROW_COMMITS:
            raise ValueError(f"rows: expected one of {list(ROW_COMMITS)}, got {self.rows!r}")
        if self.rows == "independent" and self.tree is not None:
            raise ValueError("rows: 'independent' commits token chains per row; drop `tree` or use rows='aligned'")
        if self.tree is not None:
            TreeSpec(tuple(self.tree))  # validates the shape

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)

    @property
    def verifier_name(self) -> str:
        if self.verifier is not None:
            return self.verifier
        return "greedy" if self.sampling.greedy else "speculative"

    @property
    def eos_ids(self) -> list[int]:
        if self.eos_token_id is None:
            return []
        return [self.eos_token_id] if isinstance(self.eos_token_id, int) else list(self.eos_token_id)
