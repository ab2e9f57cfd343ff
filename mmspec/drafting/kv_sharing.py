"""KV sharing between draft and verification passes of one model (METHODS.md §2, shared-backbone self-speculation).

- :func:`layer_visual_scores`: per layer, how much the prompt's last text tokens attend to each visual token,
  computed from the target's own prefill cache (one eager forward over those few rows, no second prefill).
- :func:`sparse_kv_index`: per layer, the cache positions a sparse draft keeps: every non-visual entry plus the
  top-``keep`` visual entries (STD, sparse-to-dense decoding).

Early-exit drafting shares KV the other way round (:meth:`mmspec.runner.ModelRunner.prefill_from` with
``num_layers``): the draft starts from the target's first-n-layer prefill entries.
"""

from __future__ import annotations

import torch

from ..checks import check_int
from ..cache import new_cache
from ..models import eager_attention, with_cache


def visual_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor, placeholder_ids) -> torch.Tensor:
    """[B, T] True at visual placeholder positions (image/video tokens) of real (non-padding) tokens."""
    visual = torch.zeros_like(input_ids, dtype=torch.bool)
    for pid in placeholder_ids:
        visual |= input_ids == pid
    return visual & attention_mask.bool()


@torch.no_grad()
def layer_visual_scores(runner, input_ids, attention_mask, visual: torch.Tensor, model_kwargs: dict,
                        rows: int = 8) -> torch.Tensor:  # fmt: skip
    """Attention of the prompt's last ``rows`` tokens (text after the visual span) to each visual token, averaged
    over heads and those rows, per layer -> [L, B, N] (N visual tokens per row).

    ``runner``: the target's ModelRunner right after its prefill of ``input_ids``. The last ``rows`` prompt tokens
    are re-run on a view of its cache without them, with eager attention (SDPA returns no weights); the target's
    cache itself is not modified.
    """
    b, t = input_ids.shape
    counts = visual.sum(-1)
    if int(counts.min()) != int(counts.max()) or int(counts.min()) == 0:
        raise ValueError(f"input_ids: expected the same number of visual tokens (> 0) in every row, got {counts.tolist()}")
    after = t - 1 - int(visual.long().cumsum(-1).argmax(-1).max())  # text tokens after the last visual token
    rows = max(1, min(rows, after))
    if runner.pending or runner.length != t:
        raise ValueError("runner: expected the target's runner right after its prefill of this prompt")
    view = new_cache()
    for i, layer in enumerate(runner.cache.layers):
        view.update(layer.keys[:, :, : t - rows], layer.values[:, :, : t - rows], i)
    positions = runner.prompt_positions(input_ids, attention_mask, model_kwargs)[..., t - rows :]
    with eager_attention(runner.model):
        out = runner.model(input_ids=input_ids[:, t - rows :], attention_mask=attention_mask, position_ids=positions,
                           use_cache=True, output_attentions=True, logits_to_keep=1, **with_cache(runner.model, view))  # fmt: skip
    n = int(counts[0])
    scores = [a.float().mean(dim=(1, 2))[visual].view(b, n) for a in out.attentions]  # each [B, N]
    return torch.stack(scores)  # [L, B, N]


def sparse_kv_index(visual: torch.Tensor, scores: torch.Tensor, keep: int) -> list[torch.Tensor]:
    """Per layer, the cache positions a sparse draft attends to: all non-visual positions (in order) followed by the
    layer's top-``keep`` visual positions (in order). visual [B, T], scores [L, B, N] -> L tensors [B, T - N + keep].

    Padding sits among the non-visual positions, at the same slots in every layer, so one attention mask serves all.
    """
    b, t = visual.shape
    n = scores.shape[-1]
    check_int("keep", keep, 1, n, " (visual tokens per row)")
    pos = torch.arange(t, device=visual.device).expand(b, t)
    text_pos = pos[~visual].view(b, t - n)  # [B, T - N]
    vis_pos = pos[visual].view(b, n)  # [B, N]
    out = []
    for layer_scores in scores:  # [B, N]
        top = layer_scores.topk(keep, dim=-1).indices.sort(-1).values  # [B, keep]
        out.append(torch.cat([text_pos, vis_pos.gather(1, top)], dim=1))
    return out
