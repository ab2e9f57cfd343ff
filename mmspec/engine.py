"""The propose -> score -> verify -> commit loop for every token model (any HF causal LM or image/video-text-to-text
model; image AR over VQ codes, Jacobi windows included). The only such loop in mmspec.

Read top to bottom in :meth:`SpeculativeEngine.generate`. Notation as in the papers: ``x_t`` the pending token
(committed, not yet scored by the target), ``d_1..d_K`` the draft, ``p`` / ``q`` target / draft distributions.

Batches: every row drafts K tokens and is verified independently; what each row keeps is a commit policy:

- ``rows="independent"``: every row commits its own ``n_b + 1`` tokens (accepted drafts + correction/bonus); the
  target's rejected entries stay in its cache as masked holes and the drafter session rolls back per row;
- ``rows="aligned"`` (lock-step): every row commits the same ``n + 1``, with ``n`` the smallest accepted length
  among unfinished rows; rows that accepted more keep their own accepted draft token at position n + 1 instead of the
  correction. Stopping a row's round early at a point chosen independently of its own token values keeps
  speculative sampling exact (it is a round with a shorter draft), and the caches stay rectangular (a crop).
  Token trees commit in lock-step.

Both go through the same code: one :class:`~mmspec.types.Commit` to the target runner and to the drafter session.
``SpecConfig(fixed_length=True)`` generates exactly ``max_new_tokens`` per row and ignores EOS (image codes): drafts
may then run up to the last position, and a bonus past it is dropped. Verifiers that sample the first token
themselves (Jacobi rules: Gumbel noise fixed per position) are asked for it.
"""

from __future__ import annotations

import time

import torch

from .config import SpecConfig
from .draft_length import POLICIES
from .drafters.base import DraftRequest, Drafter
from .layout import attention_layout
from .models import logits_width, text_config_of
from .runner import ModelRunner
from .sampling import process_logits, sample_tokens
from .tree import TreeSpec
from .types import Commit, GenerationOutput, Proposal, RoundStats, SpecStats, TargetScores
from .verifiers import make_verifier


def check_input_ids(input_ids, attention_mask=None, vocab_size: int | None = None, exempt_ids=()) -> None:
    """Validate a prompt batch: int64 ``[B, T]`` ids, a 0/1 left-padding mask of the same shape with a real token
    in every row, and (given ``vocab_size``) real ids in ``[0, vocab_size)`` apart from ``exempt_ids``."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype != torch.long:
        got = f"{type(input_ids).__name__} {tuple(input_ids.shape)} {input_ids.dtype}" if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__  # noqa: E501
        raise ValueError(f"input_ids: expected an int64 tensor of shape [batch, length], got {got}")
    if input_ids.shape[0] < 1 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids: expected a non-empty prompt, got shape {tuple(input_ids.shape)}")
    real = torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
            got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
            raise ValueError(f"attention_mask: expected shape {tuple(input_ids.shape)}, got {got}")
        if bool(((attention_mask != 0) & (attention_mask != 1)).any()):
            raise ValueError(f"attention_mask: expected 0/1 entries, got values {attention_mask.unique().tolist()}")
        if bool((attention_mask.sum(-1) == 0).any()):
            raise ValueError("attention_mask: every row needs at least one real (non-padding) token; got an empty row")
        gaps = (attention_mask[:, :-1] > attention_mask[:, 1:]).any(-1)  # [B] a real token followed by padding
        if bool(gaps.any()):
            rows = gaps.nonzero().flatten().tolist()
            raise ValueError(f"attention_mask: expected left padding (padding only before each prompt), got padding after "
                             f"real tokens in rows {rows}; set tokenizer.padding_side = 'left' (generation continues "
                             "from each row's last position)")  # fmt: skip
        real = attention_mask.bool()
    if vocab_size is not None:
        ids = input_ids[real & ~torch.isin(input_ids, torch.tensor(list(exempt_ids), dtype=torch.long, device=input_ids.device))]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
            bad = ids[(ids < 0) | (ids >= vocab_size)].unique()[:5].tolist()
            raise ValueError(f"input_ids: expected token ids in [0, {vocab_size}) (the target's embedding table), got {bad}")


class SpeculativeEngine:
    """Speculative generation with a target model, a drafter and a registered verifier.

    >>> engine = SpeculativeEngine(target, ModelDrafter(small), SpecConfig(num_draft_tokens=4))
    >>> out = engine.generate(input_ids, attention_mask)   # out.sequences, out.stats
    """

    def __init__(self, target, drafter: Drafter, config: SpecConfig | None = None, *, vocab_size: int | None = None,
                 placeholder_ids: tuple[int, ...] = (), pad_token_id: int | None = None):  # fmt: skip
        if not isinstance(drafter, Drafter):
            raise TypeError(f"drafter: expected an mmspec Drafter (e.g. ModelDrafter(model)), got {type(drafter).__name__}")
        attention_layout(target, "target")  # refuses models whose cache cannot be rolled back, before any generation
        self.target = target.eval()
        self.drafter = drafter
        self.config = config or SpecConfig()
        self.vocab_size = vocab_size or min(text_config_of(target).vocab_size, logits_width(target))
        self.placeholder_ids = tuple(placeholder_ids)
        tc = text_config_of(target)
        self.pad_token_id = pad_token_id if pad_token_id is not None else (tc.pad_token_id or 0)
        drafter.check_compatible(target, self.vocab_size)

    def _check(self, cfg: SpecConfig, verifier) -> TreeSpec | None:
        """Refuse a verifier/drafter/tree combination the loop cannot run, before any model call."""
        if verifier.domain == "jacobi" and not self.drafter.proposes_window:
            raise ValueError(f"verifier: {cfg.verifier_name!r} verifies Jacobi windows (the target's previous pass); use "
                             f"drafter=JacobiDrafter(), or a draft verifier (speculative, lantern, gsd, ...) with "
                             f"{type(self.drafter).__name__}")  # fmt: skip
        tree = TreeSpec(tuple(cfg.tree)) if cfg.tree is not None else None
        if tree is not None and not verifier.supports_trees:
            raise ValueError(f"tree: the {cfg.verifier_name!r} verifier checks token chains only; drop `tree` or use "
                             "a tree verifier (greedy, speculative, deterministic, multi-draft)")  # fmt: skip
        if tree is not None and max(tree.branching) > self.vocab_size:
            raise ValueError(f"tree: expected at most {self.vocab_size} children per node (the vocabulary size), got "
                             f"{tuple(tree.branching)}")  # fmt: skip
        return tree

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, *,
                 config: SpecConfig | None = None, generator: torch.Generator | None = None,
                 noise_keys: torch.Tensor | None = None, **model_kwargs) -> GenerationOutput:  # fmt: skip
        """Generate after the (left-padded) prompts ``input_ids [B, T]``; ``model_kwargs`` go to the target's prefill
        (pixels, grids, ...). ``noise_keys [B]``: per-row keys of position-keyed noise (Gumbel rules; default
        arange(B))."""
        cfg = config or self.config
        check_input_ids(input_ids, attention_mask, self.target.get_input_embeddings().num_embeddings, self.placeholder_ids)
        device = next(self.target.parameters()).device
        input_ids = input_ids.to(device)
        b = input_ids.shape[0]
        attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(device)
        if generator is None and cfg.seed is not None:
            generator = torch.Generator(device=device).manual_seed(cfg.seed)
        sampling, big_t = cfg.sampling, cfg.max_new_tokens
        verifier = make_verifier(cfg.verifier_name, **cfg.verifier_params)
        tree = self._check(cfg, verifier)
        policy = POLICIES.get(cfg.draft_length_policy)(cfg.num_draft_tokens, cfg.max_draft_tokens, **cfg.draft_length_params)
        eos = torch.tensor([] if cfg.fixed_length else cfg.eos_ids, device=device, dtype=torch.long)
        keys = torch.arange(b, device=device) if noise_keys is None else torch.as_tensor(noise_keys, device=device)
        per_row = cfg.rows == "independent"
        stats = SpecStats()
        t_start = time.perf_counter()

        # Prefill: the target scores the prompt and x_t is sampled (by the verifier's own rule when it has one);
        # the drafter builds its own state
        target = ModelRunner(self.target, self.vocab_size, keep_features=self.drafter.needs_target_features,
                             keep_attention=self.drafter.needs_target_attention)  # fmt: skip
        logits_0 = target.prefill(input_ids, attention_mask, **model_kwargs)  # [B, V]
        if verifier.samples_first_token:
            first = Proposal(input_ids.new_zeros(b, 0), pending_position=torch.full((b,), -1, device=device), noise_keys=keys)
            scores_0 = TargetScores(logits_0[:, None], process_logits(logits_0[:, None], sampling))
            x_t = verifier.verify(first, scores_0, generator).next_tokens  # [B]
        else:
            x_t = sample_tokens(logits_0, sampling, generator)  # [B]
        t_draft = time.perf_counter()
        session = self.drafter.start(DraftRequest(
            input_ids=input_ids, attention_mask=attention_mask, model_kwargs=model_kwargs,
            placeholder_ids=self.placeholder_ids, sampling=sampling, vocab_size=self.vocab_size,
            pad_token_id=self.pad_token_id, need_probs=verifier.needs_probs and not sampling.greedy,
            target_runner=target, num_draft_tokens=cfg.num_draft_tokens,
        ))  # fmt: skip
        stats.prefill_seconds = time.perf_counter() - t_start
        stats.draft_prefill_seconds = time.perf_counter() - t_draft
        compact = per_row and not self.drafter.indexes_target_cache  # squeeze the target's holes out now and then
        generated = [x_t[:, None]]  # per round: [B, K+1] emitted tokens, padding where a row emitted nothing
        emitted_mask = [torch.ones_like(x_t[:, None], dtype=torch.bool)]  # per round: [B, K+1] real entries
        n_new = torch.ones_like(x_t)  # [B] tokens generated per row
        finished = torch.isin(x_t, eos) | (n_new >= big_t)  # [B]: EOS emitted or max_new_tokens reached
        log = []  # per round: k, accepted [B], emitted [B], running [B], draft forwards, draft / verify / overhead seconds

        while True:
            # one host synchronisation per round: are all rows done, and how far is the slowest running row
            done, slowest = torch.stack([finished.all().long(), n_new.masked_fill(finished, big_t).min()]).tolist()
            if done:
                break
            # propose: K drafts after x_t, never more than still fit before max_new_tokens for the least advanced
            # running row (fixed length: drafts may fill the last position); rows further on overshoot, trimmed at the end
            t0 = time.perf_counter()
            room = big_t - slowest - (0 if cfg.fixed_length else 1)
            draft_forwards_before = session.forwards
            model_seconds_before = target.forward_seconds + session.forward_seconds
            if tree is not None and tree.depth <= room:
                proposal = session.propose_tree(x_t, tree, generator)
            else:
                proposal = session.propose(x_t, min(policy.next_k(), room), generator, policy.stop_below)
            proposal.pending_position, proposal.noise_keys = n_new - 1, keys
            d = proposal.tokens  # [B, K] (a tree: K nodes)
            k = proposal.k
            t1 = time.perf_counter()

            # score: one target forward over [x_t, d_1..d_K] gives p_1..p_{K+1} (a tree: p at x_t and every node)
            block_parents = None if not proposal.is_tree else [-1] + [q + 1 for q in proposal.parents]
            logits = target.extend(torch.cat([x_t[:, None], d], dim=1), block_parents, reuse=proposal.layer_reuse)  # [B, K+1, V]
            scores = TargetScores(logits, process_logits(logits, sampling) if verifier.needs_probs else None)

            # verify: accepted prefix length and correction/bonus token per row
            verdict = verifier.verify(proposal, scores, generator)
            accepted = verdict.num_accepted  # [B]

            # commit: row b keeps n_b drafts + one token (lock-step: the same n on every row); roll back the rest
            path = None
            if proposal.is_tree:
                path = verdict.path  # [B, depth] accepted nodes, root first
                d = d.gather(1, path.clamp_min(0))  # [B, depth] tokens along each row's path
            d_ext = torch.cat([d, verdict.next_tokens[:, None]], dim=1)  # [B, K+1]
            if per_row:
                n_b = accepted.masked_fill(finished, 0)  # [B]
                # every row keeping the same count: the commit is a crop, exactly as in lock-step
                lo, hi = torch.stack([n_b.min(), n_b.max()]).tolist()
                uniform = lo if lo == hi else None
            else:
                uniform = int(accepted.masked_fill(finished, d_ext.shape[1]).min())
                n_b = torch.full_like(accepted, uniform)  # [B]
            last = torch.where(accepted > n_b, d_ext.gather(1, n_b[:, None]).squeeze(1), verdict.next_tokens)  # [B]
            emitted = d_ext.scatter(1, n_b[:, None], last[:, None])  # [B, K+1]: d_1..d_n, then the row's new token
            if path is not None:
                target.commit(torch.cat([torch.zeros_like(path[:, :1]), path[:, :uniform] + 1], dim=1))  # x_t + path
            else:
                # x_t + accepted drafts (finished rows: their filler token, which keeps every cache in step with the
                # drafter sessions at no cost to the other rows)
                target.commit(1 + uniform if uniform is not None else 1 + n_b, compact=compact)
            session.accept(Commit(n_b, emitted, uniform, None if path is None else path[:, :uniform], verdict, scores))
            slot = torch.arange(d_ext.shape[1], device=device)  # [K+1]
            new = (slot <= n_b[:, None]) & ~finished[:, None] & (n_new[:, None] + slot < big_t)  # [B, K+1] real entries
            generated.append(emitted.masked_fill(~new, self.pad_token_id))
            emitted_mask.append(new)
            t2 = time.perf_counter()
            overhead = t2 - t0 - (target.forward_seconds + session.forward_seconds - model_seconds_before)
            log.append((k, accepted, new.sum(1), ~finished, session.forwards - draft_forwards_before, t1 - t0, t2 - t1,
                        overhead))  # fmt: skip
            if policy.adaptive:
                policy.update(k, uniform if uniform is not None else int(n_b.masked_fill(finished, k).min()))
            x_t = last.masked_fill(finished, self.pad_token_id)
            finished = finished | (torch.isin(emitted, eos) & new).any(-1)
            n_new = n_new + new.sum(1)
            finished = finished | (n_new >= big_t)

        # each row's tokens in order (rows emitted different counts per round), then padding
        tokens, real = torch.cat(generated, dim=1), torch.cat(emitted_mask, dim=1)  # [B, W]
        order = torch.sort((~real).long(), dim=1, stable=True).indices  # [B, W]
        row_tokens = real.sum(1)  # [B]
        width = int(row_tokens.max())
        tokens = tokens.gather(1, order).masked_fill(~real.gather(1, order), self.pad_token_id)[:, :width]
        new_tokens = trim_after_eos(tokens, eos, self.pad_token_id)
        _round_stats(stats, log)
        stats.row_tokens = row_tokens.tolist()
        stats.target_forwards = target.forwards
        stats.draft_forwards = session.forwards
        stats.new_tokens = new_tokens.shape[1]
        stats.total_seconds = time.perf_counter() - t_start
        return GenerationOutput(torch.cat([input_ids, new_tokens], dim=1), new_tokens, stats)


def _round_stats(stats: SpecStats, log: list) -> None:
    """Per-round statistics from the loop's device-side log, read back in one transfer at the end."""
    if not log:
        stats.row_forwards = []
        return
    accepted = torch.stack([entry[1] for entry in log])  # [R, B]
    counts = torch.stack([entry[2] for entry in log])  # [R, B] tokens each row committed
    running = torch.stack([entry[3] for entry in log])  # [R, B] rows still generating
    committed = (counts * running).sum(1).double() / running.sum(1).clamp_min(1)  # [R] per running row
    row_forwards = 1 + running.long().sum(0)  # [B] prefill + the rounds each row took part in
    accepted, committed, row_forwards = accepted.tolist(), committed.tolist(), row_forwards.tolist()
    stats.rounds = [RoundStats(k, acc, com, fwd, ds, vs, oh)
                    for (k, _, _, _, fwd, ds, vs, oh), acc, com in zip(log, accepted, committed)]  # fmt: skip
    stats.row_forwards = row_forwards


def trim_after_eos(tokens: torch.Tensor, eos: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """tokens [B, T]: everything after a row's first EOS becomes padding (as HF generate does)."""
    if eos.numel() == 0:
        return tokens
    is_eos = torch.isin(tokens, eos).long()
    after = (is_eos.cumsum(-1) - is_eos) > 0  # strictly after the first EOS
    tokens = tokens.masked_fill(after, pad_token_id)
    if bool(is_eos.any(-1).all()):  # every row ended: drop the all-padding tail
        tokens = tokens[:, : int((~after).sum(-1).max())]
    return tokens
