"""Early-exit self-speculation (LayerSkip / Draft & Verify style): the target's first ``n`` decoder layers, its
final norm and its LM head draft; the full target verifies. No second model: the drafter is the target's own
weights. The draft keeps its own KV cache for those n layers (the target's cache is never touched by drafts), but
it starts from a copy of the target's prefill KV for those layers: no second prefill and, for a VLM, no second
pass of the vision tower. When no target runner is given, it prefills itself.

Works with any decoder that keeps its layers in ``layers`` and ends in ``norm`` (Llama, Qwen, Mistral, Gemma, Phi
families), standing alone or as the language model of a VLM, M-RoPE decoders (Qwen2-VL) included: the draft is the
model's own forward with the later layers left out (:func:`first_layers`), so embeddings, per-layer-type masks and
rotary embeddings, the final norm, the LM head and logit soft-capping are the model's own.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from ..models import decoder_of, output_logits, with_cache
from ..runner import ModelRunner
from ..types import LayerReuse, Proposal
from .base import DRAFTERS, DraftRequest, Drafter
from .model import ModelDraftSession


@contextmanager
def first_layers(model, num_layers: int, kept: torch.nn.ModuleList | None = None):
    """Run ``model`` with only its first ``num_layers`` decoder layers for the duration of the block (restored on exit,
    also on error). The model's own forward does the rest — embeddings (scaled or multimodal), per-layer-type masks and
    rotary embeddings, final norm, LM head and logit soft-capping — so the draft is exactly the target's first layers.
    ``kept``: a prebuilt ``ModuleList`` of those layers (saves rebuilding it every call)."""
    decoder = decoder_of(model)
    layers = decoder.layers
    decoder.layers = kept if kept is not None else torch.nn.ModuleList(list(layers)[:num_layers])
    try:
        yield decoder
    finally:
        decoder.layers = layers


class EarlyExitRunner(ModelRunner):
    """A runner whose forwards run the model through its first ``num_layers`` layers (then its final norm and head).

    ``tentative_hidden [B, pending, H]``: the hidden states those layers produced for every tentative token so far —
    what layer n of the full model receives, for verification that reuses them (:class:`LayerReuse`).
    """

    def __init__(self, model, vocab_size, num_layers: int):
        super().__init__(model, vocab_size)
        self.num_layers = num_layers
        self.layout = self.layout.truncated(num_layers)
        self.tentative_hidden: torch.Tensor | None = None
        self._kept = torch.nn.ModuleList(list(decoder_of(model).layers)[:num_layers])  # the same modules, not copies

    def _forward(self, input_ids, attention_mask, position_ids, logits_to_keep=0, **model_kwargs):
        captured = {}

        def grab(_module, args):  # the final norm's input: the last kept layer's output
            captured["hidden"] = args[0]

        with first_layers(self.model, self.num_layers, self._kept) as decoder:
            handle = decoder.norm.register_forward_pre_hook(grab)
            try:
                if model_kwargs:  # a multimodal prefill: the whole model (vision tower, merged embeddings)
                    logits = super()._forward(input_ids, attention_mask, position_ids, logits_to_keep=logits_to_keep,
                                              **model_kwargs)  # fmt: skip
                else:  # text steps: the decoder stack alone (a VLM wrapper adds nothing to them), then the head
                    h = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                use_cache=True, **with_cache(decoder, self.cache)).last_hidden_state  # fmt: skip
                    logits = output_logits(self.model, h[:, -logits_to_keep:] if logits_to_keep else h)
            finally:
                handle.remove()
        h = captured["hidden"]  # [B, L, H]
        earlier = self.pending - h.shape[1]
        self.tentative_hidden = h if earlier <= 0 else torch.cat([self.tentative_hidden, h], dim=1)
        return logits


class EarlyExitDraftSession(ModelDraftSession):
    def __init__(self, model, request: DraftRequest, num_layers: int):
        self.runner = EarlyExitRunner(model, request.vocab_size, num_layers)
        self.sampling, self.need_probs = request.sampling, request.need_probs
        if request.target_runner is not None and request.target_runner.model is model:
            self.runner.prefill_from(request.target_runner, num_layers)  # reuse the target's first n layers of KV
        else:
            self.runner.prefill(request.input_ids, request.attention_mask, **request.model_kwargs)
        self.carry = request.input_ids.new_zeros((request.input_ids.shape[0], 0))
        self._feed, self._k = self.carry, 0


class SharedEarlyExitSession(ModelDraftSession):
    """Early exit on the target's own cache: drafts write layers < n of the target's KV directly; the verification
    pass then runs only layers n.. on the hidden states the draft computed (LayerSkip-style self-speculation).

    Per round: feed x_t, d_1..d_K through layers < n (K drafts, plus one pass for d_K's own KV and hidden state); the
    target verifies with :class:`~mmspec.types.LayerReuse`; its commit crops every layer, shared ones included.
    """

    def __init__(self, model, request: DraftRequest, num_layers: int):
        target = request.target_runner
        if target is None or target.model is not model:
            raise ValueError("EarlyExitDrafter(share_kv=True): needs the engine's target runner (it drafts in its cache)")
        self.target, self.num_layers = target, num_layers
        self.sampling, self.need_probs = request.sampling, request.need_probs
        self.runner = EarlyExitRunner(model, request.vocab_size, num_layers)
        self.runner.cache = target.cache  # shared: layers < n are written by the draft, read by verification
        self.carry = request.input_ids.new_zeros((request.input_ids.shape[0], 0))  # always empty: x_t is fed each round
        self._feed, self._k = self.carry, 0
        self._sync()

    def _sync(self) -> None:
        """Mirror the target runner's committed state (the cache itself is the target's)."""
        t, r = self.target, self.runner
        r.mask, r.padded, r.next_pos = t.mask.clone(), t.padded, t.next_pos.clone()
        r.pending, r.parents, r.depth = 0, [], []

    def propose(self, pending, k, generator=None, stop_below=None) -> Proposal:
        proposal = super().propose(pending, k, generator, stop_below)  # feeds x_t, d_1..d_{K-1}; carry stays empty
        if proposal.k == 0:
            return proposal
        self.runner.extend(proposal.tokens[:, -1:])  # d_K's lower-layer KV and hidden state, for verification
        proposal.layer_reuse = LayerReuse(self.num_layers, self.runner.tentative_hidden)  # [B, K+1, H]
        return proposal

    def propose_tree(self, pending, tree, generator=None) -> Proposal:
        raise ValueError("tree: early exit with share_kv=True drafts chains only; use share_kv=False for trees")

    def accept(self, commit) -> None:
        self._sync()  # the target's commit already rolled the shared cache back (a crop, or per-row holes)


@DRAFTERS.register("early-exit")
class EarlyExitDrafter(Drafter):
    """Self-speculation with the target's first ``num_layers`` layers + LM head. ``share_kv=True``: draft in the
    target's own cache and let verification reuse the draft layers' KV and hidden states (chains only)."""

    name = "early-exit"

    def __init__(self, target, num_layers: int, share_kv: bool = False):
        decoder = decoder_of(target)
        total = len(decoder.layers)
        if not isinstance(num_layers, int) or not 1 <= num_layers < total:
            raise ValueError(f"num_layers: expected an int in [1, {total - 1}] (the target has {total} layers), got {num_layers!r}")
        self.target, self.num_layers, self.share_kv = target, num_layers, bool(share_kv)
        self.name = "early-exit" + ("+shared-kv" if share_kv else "")

    def check_compatible(self, target, vocab_size: int) -> None:
        if target is not self.target:
            raise ValueError("EarlyExitDrafter: built for a different target model than the engine's")

    def start(self, request: DraftRequest):
        if self.share_kv:
            return SharedEarlyExitSession(self.target, request, self.num_layers)
        return EarlyExitDraftSession(self.target, request, self.num_layers)
