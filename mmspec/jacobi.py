"""The Jacobi loop: speculative Jacobi decoding with the target's previous pass as the drafter (METHODS.md §4).

Same round as :mod:`mmspec.engine` — propose -> score -> verify -> commit — where the proposal is the *window*
kept from the previous pass: K draft tokens after the pending token x_t, each with the proposal distribution it
was drawn from (one-hot for freshly initialised slots). Read top to bottom in :meth:`JacobiEngine.generate`.

Generation runs for exactly ``num_tokens`` tokens (an image grid has h*w codes, no EOS); the window never runs
past the end. The verifier comes from the registry: the Jacobi rules (``sjd``, ``mc-sjd``, ``gumbel-sjd``) return
the next window themselves; any other chain verifier (``lantern``, ``gsd``, ``speculative``) is driven with SJD's
re-initialisation (:func:`~mmspec.verifiers.jacobi.resample_window`).

With ``drafter=`` the window comes from a drafter session each pass instead (per-row speculative decoding with a
small model: the sessions implement ``accept_rows``); verify with a draft verifier (``speculative``, ``lantern``).

Rows of a batch advance independently: each commits its own n + 1 tokens per pass (``ModelRunner.commit_rows``
leaves the rejected entries in the cache as masked holes and squeezes them out from time to time), so a batch
of images gets each image's own step compression. A row that has reached the end of the grid rides along
(nothing of it is committed) until the last row is done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from .drafters.base import DraftRequest, Drafter
from .models import logits_width, text_config_of
from .runner import ModelRunner
from .sampling import SamplingParams, process_logits, sample_tokens
from .types import GenerationOutput, Proposal, RoundStats, SpecStats, TargetScores
from .verifiers import check_verifier, make_verifier
from .verifiers.jacobi import initial_window, resample_window


@dataclass(frozen=True)
class JacobiConfig:
    num_tokens: int = 64  # exactly this many tokens are generated per row
    window: int = 16  # K: draft slots after the pending token
    verifier: str = "sjd"  # a registered chain verifier
    verifier_params: dict[str, Any] = field(default_factory=dict)
    init: str = "random"  # fresh slots: "random" (uniform) | "repeat" (copy the left neighbour: a spatial prior)
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        for name in ("num_tokens", "window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if self.init not in ("random", "repeat"):
            raise ValueError(f"init: expected 'random' or 'repeat' (how fresh window slots are filled), got {self.init!r}")
        check_verifier(self.verifier, ("token", "jacobi"), "the Jacobi loop")  # lists the valid names
        self.sampling  # validates temperature / top_k / top_p

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)


class JacobiEngine:
    """Speculative Jacobi decoding of a Hugging Face causal LM (or any model a :class:`ModelRunner` drives).

    >>> out = JacobiEngine(model, JacobiConfig(num_tokens=64, verifier="mc-sjd")).generate(prefix_ids)
    """

    def __init__(self, target, config: JacobiConfig | None = None, *, vocab_size: int | None = None,
                 drafter: Drafter | None = None):  # fmt: skip
        self.target = target.eval()
        self.config = config or JacobiConfig()
        self.vocab_size = vocab_size or min(text_config_of(target).vocab_size, logits_width(target))
        if drafter is not None:
            if not isinstance(drafter, Drafter):
                raise TypeError(f"drafter: expected an mmspec Drafter (e.g. ModelDrafter(model)) or None, got {type(drafter).__name__}")
            drafter.check_compatible(target, self.vocab_size)
        self.drafter = drafter

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 config: JacobiConfig | None = None, generator: torch.Generator | None = None,
                 noise_keys: torch.Tensor | None = None, **model_kwargs) -> GenerationOutput:  # fmt: skip
        from .engine import check_input_ids

        cfg = config or self.config
        check_input_ids(input_ids, attention_mask)
        device = next(self.target.parameters()).device
        input_ids = input_ids.to(device)
        b, big_t, big_k = input_ids.shape[0], cfg.num_tokens, cfg.window
        if generator is None and cfg.seed is not None:
            generator = torch.Generator(device=device).manual_seed(cfg.seed)
        keys = torch.arange(b, device=device) if noise_keys is None else torch.as_tensor(noise_keys, device=device)
        cls = check_verifier(cfg.verifier, ("token", "jacobi"), "the Jacobi loop")
        keeps_window = getattr(cls, "keeps_window", False)
        params = {"init": cfg.init, **cfg.verifier_params} if keeps_window else dict(cfg.verifier_params)
        verifier = make_verifier(cfg.verifier, **params)
        if self.drafter is not None and keeps_window:
            raise ValueError(f"verifier: {cfg.verifier!r} verifies Jacobi windows; with a drafter use a draft verifier "
                             "(speculative, lantern, gsd, ...)")  # fmt: skip
        stats = SpecStats()
        t_start = time.perf_counter()

        # Prefill: p for position 0; the first token is the verifier's own sample of it (Gumbel rules use their
        # fixed noise there, so the whole image is their sequential Gumbel-max sample).
        target = ModelRunner(self.target, self.vocab_size)
        logits_0 = target.prefill(input_ids, attention_mask, **model_kwargs)[:, None]  # [B, 1, V]
        if keeps_window:
            first = Proposal(input_ids.new_zeros(b, 0), meta={"pending_positions": torch.full((b,), -1, device=device),
                                                               "noise_keys": keys})  # fmt: skip
            x_t = verifier.verify(first, TargetScores(logits_0, process_logits(logits_0, cfg.sampling)), generator).next_tokens
        else:
            x_t = sample_tokens(logits_0[:, 0], cfg.sampling, generator)  # [B]
        t = torch.zeros(b, dtype=torch.long, device=device)  # [B] position of each row's pending token x_t
        row_forwards = torch.ones(b, dtype=torch.long, device=device)  # [B] target passes each row needed
        codes = torch.zeros(b, big_t + big_k + 2, dtype=torch.long, device=device)  # [B, T + slack] committed codes
        codes[:, 0] = x_t
        window, window_q = initial_window(cfg.init, x_t, big_k, self.vocab_size, generator)  # [B, K], [B, K, V]
        session = None
        if self.drafter is not None:  # drafts come from a drafter model instead of the previous pass
            t_draft = time.perf_counter()
            session = self.drafter.start(DraftRequest(
                input_ids=input_ids, attention_mask=torch.ones_like(input_ids) if attention_mask is None else attention_mask,
                model_kwargs=model_kwargs, sampling=cfg.sampling, vocab_size=self.vocab_size,
                need_probs=verifier.needs_probs and not cfg.sampling.greedy, target_runner=target))  # fmt: skip
            stats.draft_prefill_seconds = time.perf_counter() - t_draft
        stats.prefill_seconds = time.perf_counter() - t_start

        while bool((t < big_t - 1).any()):
            # propose: the window, as long as the row with the most room needs (never past the end of the grid)
            active = t < big_t - 1  # [B]
            row_forwards += active.long()
            room = (big_t - 1 - t).clamp_min(0)  # [B] drafts that still fit before the end
            k = min(big_k, int(room.max()))
            t0 = time.perf_counter()
            if session is None:
                d, q = window[:, :k], window_q[:, :k]  # [B, k], [B, k, V]
            else:
                drafted = session.propose(x_t, k, generator)
                d, q = drafted.tokens, drafted.probs  # [B, k], [B, k, V] | None
            slots = torch.arange(k + 1, device=device)  # [k+1]
            t1 = time.perf_counter()

            # score: one target pass over [x_t, d_1..d_k] gives p_0..p_k
            logits = target.extend(torch.cat([x_t[:, None], d], dim=1))  # [B, k+1, V]
            p = process_logits(logits, cfg.sampling)  # [B, k+1, V]

            # verify
            proposal = Proposal(d, q, meta={"positions": t[:, None] + 1 + slots[:k], "pending_positions": t,
                                            "noise_keys": keys})  # fmt: skip
            verdict = verifier.verify(proposal, TargetScores(logits, p), generator)
            n = torch.minimum(verdict.num_accepted, room)  # [B] accepted drafts that lie inside the grid

            # commit, per row: x_t and d_1..d_n enter the cache, S_n becomes the pending token (past the end: dropped)
            write = active[:, None] & (slots[None, :] <= n[:, None])  # [B, k+1] codes at t+1..t+n+1
            values = torch.cat([d, d[:, :1]], dim=1).scatter(1, n[:, None], verdict.next_tokens[:, None])  # [B, k+1]
            where = t[:, None] + 1 + slots  # [B, k+1] absolute positions t+1..t+k+1
            codes.scatter_(1, where, torch.where(write, values, codes.gather(1, where)))  # untouched where not written
            target.commit_rows(torch.where(active, 1 + n, 0))
            x_t = torch.where(active, verdict.next_tokens, x_t)
            t = torch.where(active, t + n + 1, t)

            # next window: the verifier's own (Jacobi rules: already shifted by each row's n) or SJD's
            # re-initialisation from this pass's p
            if session is not None:
                session.accept_rows(n)
            elif keeps_window:
                window, window_q = verdict.extras["next_tokens_window"], verdict.extras["next_probs_window"]
            else:
                window, window_q = resample_window(p, n, cfg.init, generator)
            committed = (torch.minimum(n + 1, room)[active]).double().mean().item()  # tokens per active row
            stats.rounds.append(RoundStats(k, verdict.num_accepted[active].tolist(), committed, 0, t1 - t0,
                                           time.perf_counter() - t1))  # fmt: skip

        tokens = codes[:, :big_t]  # [B, T]
        stats.target_forwards = target.forwards
        stats.draft_forwards = 0 if session is None else session.forwards
        stats.row_forwards = row_forwards.tolist()
        stats.new_tokens = tokens.shape[1]
        stats.total_seconds = time.perf_counter() - t_start
        return GenerationOutput(torch.cat([input_ids, tokens], dim=1), tokens, stats)
