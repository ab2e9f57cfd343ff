"""Drafter-target alignment (METHODS.md §2): the training recipes the zoo uses for drafters and heads.

- :func:`kl_to_teacher`: logit distillation, KL(p_target || q_drafter) per position (forward KL: the drafter is
  pushed to cover the target's mass, which is what raises the acceptance rate sum_x min(p, q)).
- :func:`feature_regression`: hidden-state distillation (smooth L1 to the target's features).
- :func:`target_outputs`: the target's features, input embeddings and logits for a batch (frozen, one pass).
- :func:`distill_drafter`: train an independent drafter (small VLM or text-only LM) on a mix of the data's labels and
  the target's distributions at the answer positions.
- :func:`distill_compressed_drafter`: train a drafter together with a learned visual compressor (a Q-Former-style
  :class:`~mmspec.drafting.query_adaptor.QueryAdaptor`) on compressed views, against labels and the target.
- :func:`distill_eagle_head`: train an :class:`~mmspec.drafting.eagle_head.EagleHead` on the target's own features and
  distributions (feature regression + logit distillation, with feature noise as in EAGLE).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

import torch

from ..models import FeatureTap
from .loops import card_entry, fit


def kl_to_teacher(student_logits: torch.Tensor, teacher_logits: torch.Tensor, mask: torch.Tensor | None = None,
                  temperature: float = 1.0) -> torch.Tensor:  # fmt: skip
    """Mean over (masked) positions of KL(softmax(teacher / T) || softmax(student / T)); logits [..., V], mask [...]."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student_logits: expected the teacher's shape {tuple(teacher_logits.shape)}, got {tuple(student_logits.shape)}")
    log_q = torch.log_softmax(student_logits.float() / temperature, -1)
    log_p = torch.log_softmax(teacher_logits.float() / temperature, -1)
    return _masked_mean((log_p.exp() * (log_p - log_q)).sum(-1), mask)  # KL per position [...]


def feature_regression(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Smooth L1 between predicted and target features [..., H], averaged over (masked) positions."""
    return _masked_mean(torch.nn.functional.smooth_l1_loss(pred.float(), target.float(), reduction="none").mean(-1), mask)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values [...]`` over the positions where ``mask [...]`` is set (all positions without a mask)."""
    if mask is None:
        return values.mean()
    return (values * mask.float()).sum() / mask.float().sum().clamp_min(1)


@dataclass
class TargetOutputs:
    features: torch.Tensor  # [B, T, H] final-norm hidden states (what the LM head reads)
    embeds: torch.Tensor  # [B, T, H] the decoder's input embeddings (visual features merged in)
    logits: torch.Tensor  # [B, T, V]

    @property
    def prompt_embeds(self) -> torch.Tensor:  # the name a ModelRunner uses (TARGET_VIEWS reads either)
        return self.embeds


@torch.no_grad()
def target_outputs(target, batch: dict) -> TargetOutputs:
    """One frozen forward of ``target`` on a training batch (``labels`` ignored)."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with FeatureTap(target) as tap:
        logits = target(**inputs).logits
    return TargetOutputs(tap.features, tap.embeds, logits)


def _answer_rows(labels: torch.Tensor) -> torch.Tensor:
    """[B, T] True where position t predicts a label (labels shifted: position t predicts token t + 1)."""
    return labels[:, 1:] != -100


def distill_drafter(student, target, batches: Callable[[random.Random], tuple[dict, dict]], *, steps: int, lr: float,
                    seed: int, alpha: float = 0.5, desc: str = "distill drafter") -> list[float]:  # fmt: skip
    """Train ``student`` with ``alpha * CE(labels) + (1 - alpha) * KL(target || student)`` at the answer positions.

    ``batches(rng) -> (student_batch, target_batch)``: the same examples as the student sees them (e.g. without the
    video, for a text-only drafter) and as the target does; both carry ``labels`` over the same answer tokens.
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha: expected a weight in [0, 1], got {alpha!r}")
    target.eval()

    def loss_fn(rng):
        s_batch, t_batch = batches(rng)
        teacher = target_outputs(target, t_batch).logits[:, :-1][_answer_rows(t_batch["labels"])]  # [A, V]
        out = student(**s_batch)
        student_logits = out.logits[:, :-1][_answer_rows(s_batch["labels"])]  # [A, V], same answer tokens in order
        width = min(teacher.shape[-1], student_logits.shape[-1])
        kl = kl_to_teacher(student_logits[:, :width], teacher[:, :width])
        return alpha * out.loss + (1 - alpha) * kl

    student.train()
    losses = fit(loss_fn, student.parameters(), steps=steps, lr=lr, seed=seed, desc=desc)
    student.eval()
    return losses


def eagle_loss(head, target, batch: dict, noise: float = 0.0, logit_weight: float = 0.1,
               generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
    """EAGLE objective on one batch: the head reads (f_i + noise, embed(x_{i+1})) and predicts f_{i+1}; loss =
    smooth-L1(f^_{i+1}, f_{i+1}) + logit_weight * KL(p_target || q_head) through the target's LM head."""
    out = target_outputs(target, batch)
    mask = batch["attention_mask"]
    pair_mask = mask[:, 1:] * mask[:, :-1]  # [B, T-1] both ends real
    feats_in = out.features[:, :-1]
    if noise:  # EAGLE's uniform feature noise: at inference the head reads its own, imperfect features
        u = torch.rand(feats_in.shape, generator=generator, device=feats_in.device)
        feats_in = feats_in + noise * (2 * u - 1) * feats_in.abs().mean()
    pos = (pair_mask.long().cumsum(-1) - 1).clamp_min(0)
    pred = head(out.embeds[:, 1:], feats_in, pair_mask, pos)  # [B, T-1, H] predicts f_1..f_{T-1}
    loss = feature_regression(pred, out.features[:, 1:], pair_mask)
    if logit_weight:
        logits = target.get_output_embeddings()(pred)
        loss = loss + logit_weight * kl_to_teacher(logits, out.logits[:, 1:], pair_mask)
    return loss


def distill_eagle_head(head, target, batches: Callable[[random.Random], dict], *, steps: int, lr: float, seed: int,
                       noise: float = 0.1, logit_weight: float = 0.1, desc: str = "distill eagle head") -> list[float]:  # fmt: skip
    """Train ``head`` on ``target``'s own features and outputs; ``batches(rng)`` gives model inputs (labels unused).
    The target (and its embeddings / LM head, which the head shares) stays frozen."""
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)

    def loss_fn(rng):
        return eagle_loss(head, target, batches(rng), noise=noise, logit_weight=logit_weight, generator=gen)

    head.train()
    losses = fit(loss_fn, head.parameters(), steps=steps, lr=lr, seed=seed, desc=desc)
    head.eval()
    return losses


def train_eagle_head(target, batches: Callable[[random.Random], dict], out_dir, *, intermediate_size: int, steps: int,
                     lr: float, seed: int) -> dict:  # fmt: skip
    """An EAGLE head on ``target`` (:mod:`mmspec.drafters.eagle`) distilled on its own features (``batches(rng)``:
    model inputs, labels dropped), saved in float16 to ``out_dir``; returns its zoo card entry."""
    from ..drafting.eagle_head import EagleHead

    torch.manual_seed(seed)
    head = EagleHead.for_target(target, intermediate_size=intermediate_size)
    losses = distill_eagle_head(head, target, lambda rng: {k: v for k, v in batches(rng).items() if k != "labels"},
                                steps=steps, lr=lr, seed=seed)  # fmt: skip
    head.half().save_pretrained(out_dir)  # float16 on disk, like the models
    return card_entry(head, losses, steps, lr)


def compressed_forward(drafter, compressor, batch: dict, placeholder_ids,
                       visual_source: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The drafter's training forward on a compressed view of ``batch``: its prompt embeddings with the visual span
    replaced by ``compressor`` (3-D positions carried along for M-RoPE drafters) -> (logits [B, T', V],
    labels [B, T']). The compressor reads the drafter's own visual tokens, or ``visual_source [B, T, E]`` (the
    target's view, e.g. its final-norm hidden states): then the drafter embeds only the text (no vision tower),
    as :class:`~mmspec.drafters.CompressedVLMDrafter` does with a target source."""
    from ..drafters.compressed import compress_prompt, text_embeddings
    from ..models import prompt_embeddings
    from ..runner import ModelRunner

    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    kwargs = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask", "labels")}
    runner = ModelRunner(drafter)
    positions = runner.prompt_positions(ids, mask, kwargs)  # [B, T] or [3, B, T]
    if visual_source is None:
        embeds = prompt_embeddings(drafter, ids, mask, positions, kwargs)  # [B, T, D], differentiable
    else:
        embeds = text_embeddings(drafter, ids)  # [B, T, D]

    def compress(visual, _mask, carry):
        return compressor(visual, carry=carry) if carry is not None else compressor(visual)

    if runner.mrope:
        out = compress_prompt(embeds, ids, mask, placeholder_ids, compress, positions.permute(1, 2, 0), labels=labels,
                              visual_source=visual_source)  # fmt: skip
        pos = out.positions.permute(2, 0, 1)
    else:
        out = compress_prompt(embeds, ids, mask, placeholder_ids, lambda v, m, c: compress(v, m, None), labels=labels,
                              visual_source=visual_source)  # fmt: skip
        pos = (out.mask.cumsum(-1) - 1).clamp_min(0)
    logits = drafter(inputs_embeds=out.embeds, attention_mask=out.mask, position_ids=pos).logits
    return logits, out.labels


def distill_compressed_drafter(drafter, compressor, target, batches: Callable[[random.Random], dict], *, steps: int,
                               lr: float, seed: int, placeholder_ids, alpha: float = 0.5, train_drafter: bool = True,
                               source: str = "drafter", full_view_weight: float = 0.0,
                               desc: str = "distill compressed drafter") -> list[float]:  # fmt: skip
    """Train a learned ``compressor`` (and, with ``train_drafter``, its ``drafter``) on compressed views:
    ``alpha * CE(labels) + (1 - alpha) * KL(target || drafter)`` at the answer positions. ``batches(rng)`` gives one
    batch both models read. With ``train_drafter=False`` the drafter stays frozen: the adaptor learns to speak the
    drafter's visual language, and one drafter serves both full and compressed views. ``source``: the visual tokens
    the compressor reads, the drafter's own (``"drafter"``) or the target's (``"target-features"``: its final-norm
    hidden states, ``"target-embeds"``: its LM input embeddings), as ``CompressedVLMDrafter(source=...)``.

    ``full_view_weight`` (with ``train_drafter``): also train the drafter on its own full view of the same batch, with
    this weight on the same objective, so that one drafter serves both views (full and compressed) and stays
    comparable with itself."""
    from ..drafters.compressed import TARGET_VIEWS

    if source != "drafter" and source not in TARGET_VIEWS:
        raise ValueError(f"source: expected 'drafter' or one of {TARGET_VIEWS.names()}, got {source!r}")
    if full_view_weight < 0 or (full_view_weight and not train_drafter):
        raise ValueError(f"full_view_weight: expected >= 0, and 0 unless train_drafter, got {full_view_weight!r} "
                         f"(train_drafter={train_drafter})")  # fmt: skip
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    params = list(compressor.parameters()) + (list(drafter.parameters()) if train_drafter else [])

    def loss_fn(rng):
        batch = batches(rng)
        with torch.no_grad():
            out = target_outputs(target, batch)
        teacher = out.logits[:, :-1][_answer_rows(batch["labels"])]  # [A, V]
        view = None if source == "drafter" else TARGET_VIEWS.get(source)(out)  # [B, T, E]
        logits, labels = compressed_forward(drafter, compressor, batch, placeholder_ids, visual_source=view)
        student = logits[:, :-1][_answer_rows(labels)]  # [A, V]
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        width = min(teacher.shape[-1], student.shape[-1])
        loss = alpha * ce + (1 - alpha) * kl_to_teacher(student[:, :width], teacher[:, :width])
        if full_view_weight:  # the same drafter on its own, uncompressed view of the batch
            full = drafter(**batch)
            student = full.logits[:, :-1][_answer_rows(batch["labels"])]  # [A, V]
            kl = kl_to_teacher(student[:, :width], teacher[:, :width])
            loss = loss + full_view_weight * (alpha * full.loss + (1 - alpha) * kl)
        return loss

    drafter.train(train_drafter)
    compressor.train()
    losses = fit(loss_fn, params, steps=steps, lr=lr, seed=seed, desc=desc)
    drafter.eval()
    compressor.eval()
    return losses
