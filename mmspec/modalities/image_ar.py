"""Visual-autoregressive image generation (LlamaGen-style): a VQ tokenizer and a causal LM over the h*w code grid.

Pipeline: condition tokens (a prefix) -> the AR model samples h*w codes, row-major -> the VQ decoder turns them
into an image. Classifier-free guidance doubles the batch (conditional rows, then the same rows with the null
condition), every call feeds both halves the same tokens and positions, and the two halves' logits are combined
*before* temperature, top-k and top-p (LlamaGen order)::

    logits = uncond + cfg_scale * (cond - uncond)

Methods (a registry, :data:`IMAGE_AR_METHODS`): (drafter, verifier) pairs run by the one token loop,
:class:`~mmspec.engine.SpeculativeEngine` (rows advance independently, exactly h*w codes per row, no EOS):

==================  =============================================================  ========
method              drafter + verifier                                             lossless
==================  =============================================================  ========
``plain``           none: one token per target call (the reference sampler)        yes
``sjd``             :class:`~mmspec.drafters.jacobi.JacobiDrafter` + ``sjd``       yes
                    (``init``, ``reuse`` = SJD++ high-confidence reuse)
``mc-sjd``          Jacobi window + ``mc-sjd`` (maximal coupling)                   yes
``gumbel-sjd``      Jacobi window + ``gumbel-sjd`` (fixed Gumbel noise per position) yes
``lantern-jacobi``  Jacobi window + ``lantern`` (δ or λ mode, codebook neighbours)  no
``gsd``             Jacobi window + ``gsd`` (grouped acceptance, codebook distances) no
``speculative``     small AR drafter (:class:`ModelDrafter`) + ``speculative``      yes
``lantern``         small AR drafter + ``lantern``                                  no
==================  =============================================================  ========

Python API::

    spec = ImageARSpeculator(target, vq, drafter=small, conditioner=shapes_t2i.condition_tokens,
                             null_prompt=shapes_t2i.null_tokens(), cfg_scale=2.0)
    out = spec.generate(["red circle at top left"], method="mc-sjd", temperature=1.0, seed=0)
    out.images[0].save("x.png"); out.stats.summary()
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from PIL import Image
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..checks import check_int, check_param, is_number
from ..config import SpecConfig
from ..drafters.jacobi import JacobiDrafter
from ..drafters.model import ModelDrafter
from ..engine import SpeculativeEngine
from ..registry import Registry
from ..models import with_cache
from ..runner import ModelRunner
from ..sampling import SamplingParams, sample_tokens
from ..types import GenerationOutput, SpecStats
from ..verifiers import VERIFIERS
from ..verifiers.codebook import build_neighbour_table, calibrate_distance_threshold
from .images import to_pil


# ----------------------------------------------------------------------------------------------------------------
# Classifier-free guidance as a model: B rows in, 2B rows inside, B rows of guided logits out


class ClassifierFreeGuidance(torch.nn.Module):
    """Wrap a causal LM so every call runs the conditional rows and their null-condition twins in one batch.

    The prompt (prefill: the cache is empty) must be the condition prefix of length P = ``len(null_prompt)``; the
    twins get ``null_prompt`` instead. Later calls feed both halves the same tokens, attention mask and positions,
    so drafts are identical in both halves. The returned logits [B, L, V] are ``uncond + s * (cond - uncond)``
    (in float32), to be followed by temperature / top-k / top-p. The KV cache holds 2B rows; chains only (the
    runner's tree compaction indexes B rows).
    """

    def __init__(self, model, null_prompt: Sequence[int] | torch.Tensor, guidance_scale: float):
        super().__init__()
        check_param("cfg_scale", guidance_scale, is_number(guidance_scale) and guidance_scale >= 0, "a number >= 0 (1 = no guidance)")
        null = torch.as_tensor(null_prompt, dtype=torch.long).flatten()
        if null.numel() < 1:
            raise ValueError(f"null_prompt: expected at least one token id, got {null_prompt!r}")
        self.model = model
        self.null_prompt = null
        self.guidance_scale = float(guidance_scale)

    # what the runner and the drafters read of a model, answered by the wrapped one (nothing else: calling e.g.
    # ``generate`` on the wrapper would silently run the unguided model)
    FORWARDED = ("config", "dtype", "get_output_embeddings", "get_input_embeddings", "get_decoder", "set_attn_implementation")

    def __getattr__(self, name: str):
        if name in ClassifierFreeGuidance.FORWARDED:
            return getattr(self._modules["model"], name)
        return super().__getattr__(name)

    def forward(self, input_ids: torch.Tensor, attention_mask=None, position_ids=None, cache=None, past_key_values=None,
                **kwargs) -> CausalLMOutputWithPast:  # fmt: skip
        b = input_ids.shape[0]
        cache = cache if cache is not None else past_key_values  # the cache, under either transformers keyword
        if cache is None or cache.get_seq_length() == 0:  # prefill: the condition prefix
            if input_ids.shape[1] != self.null_prompt.numel():
                raise ValueError(f"input_ids: with classifier-free guidance the prompt must be the condition prefix of "
                                 f"{self.null_prompt.numel()} tokens (the null prompt's length), got {input_ids.shape[1]}")  # fmt: skip
            twins = self.null_prompt.to(input_ids.device).expand(b, -1)  # [B, P]
        else:
            twins = input_ids  # [B, L] the same drafts in both halves
        ids = torch.cat([input_ids, twins], dim=0)  # [2B, L]
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask], dim=0)  # [2B, S] (or [2B, 1, L, S])
        if position_ids is not None:
            position_ids = torch.cat([position_ids, position_ids], dim=-2)  # [2B, L] (M-RoPE: [3, 2B, L])
        out = self.model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids,
                         **with_cache(self.model, cache), **kwargs)  # fmt: skip
        cond, uncond = out.logits.float().chunk(2, dim=0)  # [B, L, V] each
        return CausalLMOutputWithPast(logits=uncond + self.guidance_scale * (cond - uncond))


# ----------------------------------------------------------------------------------------------------------------
# VQ codes <-> images (diffusers VQModel)


@torch.no_grad()
def images_to_codes(vq, images: torch.Tensor) -> torch.Tensor:
    """images [B, 3, H, W] in [-1, 1] -> codes [B, h*w] int64, row-major (the indices the quantiser picks)."""
    h = vq.encode(images.to(device=vq.device, dtype=vq.dtype)).latents  # [B, C, h, w]
    _, _, (_, _, idx) = vq.quantize(h)
    return idx.view(images.shape[0], -1)  # [B, h*w]


@torch.no_grad()
def codes_to_images(vq, codes: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """codes [B, h*w] -> images [B, 3, H, W] in [-1, 1] (the VQ decoder on the looked-up codebook entries)."""
    h, w = grid
    if codes.dim() != 2 or codes.shape[1] != h * w:
        raise ValueError(f"codes: expected shape [B, {h * w}] for a {h}x{w} grid, got {tuple(codes.shape)}")
    quant = vq.quantize.get_codebook_entry(codes.reshape(-1).to(vq.device), (codes.shape[0], h, w, vq.config.vq_embed_dim))
    return vq.decode(quant.to(vq.dtype), force_not_quantize=True).sample  # [B, 3, H, W]


def codebook_embeddings(vq) -> torch.Tensor:
    """The codebook the quantiser actually uses [V, D] (diffusers' VectorQuantizer: plain L2, not normalised)."""
    return vq.quantize.embedding.weight.detach().float()


# ----------------------------------------------------------------------------------------------------------------
# Methods


@dataclass
class ImageAROutput:
    images: list[Image.Image]
    codes: torch.Tensor  # [B, h*w] int64
    stats: SpecStats
    method: str
    lossless: bool


@dataclass(frozen=True)
class ImageARMethod:
    """A method is a (drafter, verifier) pair run by the one token loop, or plain AR sampling (``verifier`` None)."""

    name: str
    verifier: str | None  # registered verifier; None: plain AR (the reference sampler)
    drafter: str  # "jacobi": the target's previous pass (a Jacobi window); "model": the small AR drafter
    num_draft_tokens: int  # default K: the Jacobi window, or drafts per round
    description: str
    params: Callable | None = None  # (speculator, verifier params) -> verifier params (codebook tables, ...)

    @property
    def lossless(self) -> bool:
        return True if self.verifier is None else VERIFIERS.get(self.verifier).lossless


IMAGE_AR_METHODS: Registry[ImageARMethod] = Registry("image-AR method")


@torch.no_grad()
def plain_ar(model, prefix: torch.Tensor, num_tokens: int, sampling: SamplingParams, generator, vocab: int) -> GenerationOutput:
    """The reference sampler: one target call per token with a KV cache (what LlamaGen's sampling loop does)."""
    t0 = time.perf_counter()
    runner = ModelRunner(model, vocab)
    tokens = [sample_tokens(runner.prefill(prefix), sampling, generator)]  # [B]
    stats = SpecStats(prefill_seconds=time.perf_counter() - t0)
    for _ in range(num_tokens - 1):
        logits = runner.extend(tokens[-1][:, None])[:, -1]  # [B, V]
        runner.commit(1)
        tokens.append(sample_tokens(logits, sampling, generator))
    codes = torch.stack(tokens, dim=1)  # [B, T]
    stats.target_forwards, stats.new_tokens = runner.forwards, codes.shape[1]
    stats.total_seconds = time.perf_counter() - t0
    return GenerationOutput(torch.cat([prefix, codes], 1), codes, stats)


def _lantern_params(spec: "ImageARSpeculator", params: dict) -> dict:
    k = params.pop("neighbours_k", spec.lantern_k)
    return {"neighbours": spec.neighbour_table(k), **params}


def _gsd_params(spec: "ImageARSpeculator", params: dict) -> dict:
    emb = codebook_embeddings(spec.vq)
    return {"embeddings": emb, "dist_threshold": spec.gsd_threshold(), **params}


for _method in (
    ImageARMethod("plain", None, "none", 0, "plain AR sampling, one target call per token"),
    ImageARMethod("sjd", "sjd", "jacobi", 16, "speculative Jacobi decoding (init random|repeat; reuse = SJD++ reuse)"),
    ImageARMethod("mc-sjd", "mc-sjd", "jacobi", 16, "MC-SJD: Jacobi with maximal coupling of old and new samples"),
    ImageARMethod("gumbel-sjd", "gumbel-sjd", "jacobi", 16, "Jacobi with Gumbel coupling (fixed noise per position)"),
    ImageARMethod("lantern-jacobi", "lantern", "jacobi", 16, "LANTERN relaxed acceptance on Jacobi drafts", _lantern_params),
    ImageARMethod("gsd", "gsd", "jacobi", 16, "GSD grouped acceptance on Jacobi drafts", _gsd_params),
    ImageARMethod("speculative", "speculative", "model", 4, "speculative sampling with the small AR drafter"),
    ImageARMethod("lantern", "lantern", "model", 4, "LANTERN relaxed acceptance, small AR drafter", _lantern_params),
):
    IMAGE_AR_METHODS.register(_method.name)(_method)


# ----------------------------------------------------------------------------------------------------------------
# The adapter


class ImageARSpeculator:
    """Class- or text-conditional image generation over VQ codes with every method of :data:`IMAGE_AR_METHODS`.

    ``target`` / ``drafter``: Hugging Face causal LMs whose vocabulary starts with the ``codebook_size`` image codes
    (condition tokens may follow). ``vq``: a diffusers ``VQModel``. ``conditioner`` maps a user condition (a
    string, a label, ...) to its prefix token ids; prefixes given as int64 tensors [B, P] are used as they are.
    ``null_prompt``: the prefix of the null condition (CFG); ``grid`` (h, w) of codes.
    """

    def __init__(self, target, vq, *, null_prompt: Sequence[int], grid: tuple[int, int], drafter=None,
                 conditioner: Callable[[Any], list[int]] | None = None, codebook_size: int | None = None,
                 cfg_scale: float = 3.0, lantern_k: int = 16):  # fmt: skip
        self.target = target.eval()
        self.vq = vq.eval()
        self.drafter = None if drafter is None else drafter.eval()
        self.conditioner = conditioner
        self.null_prompt = list(null_prompt)
        h, w = grid
        if h < 1 or w < 1:
            raise ValueError(f"grid: expected (h, w) with h, w >= 1, got {grid!r}")
        self.grid = (int(h), int(w))
        self.codebook_size = codebook_size or vq.config.num_vq_embeddings
        if target.get_output_embeddings().weight.shape[0] < self.codebook_size:
            raise ValueError(f"target: its logits are narrower than the codebook ({self.codebook_size} codes)")
        self.cfg_scale = cfg_scale
        self.lantern_k = lantern_k
        self._neighbours: dict[int, torch.Tensor] = {}
        self._gsd_threshold: float | None = None

    # -- model wiring ---------------------------------------------------------------------------------------
    def guided(self, model, cfg_scale: float):
        """``model`` with classifier-free guidance at ``cfg_scale`` (1: the model itself, no batch doubling)."""
        return model if cfg_scale == 1.0 else ClassifierFreeGuidance(model, self.null_prompt, cfg_scale)

    def neighbour_table(self, k: int) -> torch.Tensor:
        if k not in self._neighbours:
            self._neighbours[k] = build_neighbour_table(codebook_embeddings(self.vq), k, normalize=False)
        return self._neighbours[k]

    def gsd_threshold(self) -> float:
        if self._gsd_threshold is None:
            self._gsd_threshold = calibrate_distance_threshold(codebook_embeddings(self.vq))
        return self._gsd_threshold

    def prefix_ids(self, condition) -> torch.Tensor:
        """User conditions -> prefix ids [B, P] (int64 on the target's device)."""
        device = next(self.target.parameters()).device
        if isinstance(condition, torch.Tensor):
            if condition.dim() != 2 or condition.dtype != torch.long:
                raise ValueError(f"condition: expected an int64 tensor [B, P] of prefix ids, got {condition.dtype} "
                                 f"{tuple(condition.shape)}")  # fmt: skip
            return condition.to(device)
        items = list(condition) if isinstance(condition, (list, tuple)) else [condition]
        if not items:
            raise ValueError("condition: expected at least one condition, got an empty list")
        if self.conditioner is None:
            raise ValueError("conditioner: pass ImageARSpeculator(..., conditioner=fn) to use conditions that are not "
                             "prefix id tensors")  # fmt: skip
        rows = [list(self.conditioner(c)) for c in items]
        if len({len(r) for r in rows}) != 1 or len(rows[0]) != len(self.null_prompt):
            raise ValueError(f"conditioner: expected every prefix to have {len(self.null_prompt)} tokens (the null "
                             f"prompt's length), got lengths {[len(r) for r in rows]}")  # fmt: skip
        return torch.tensor(rows, dtype=torch.long, device=device)

    # -- generation -----------------------------------------------------------------------------------------
    def generate(self, condition, method: str = "sjd", *, cfg_scale: float | None = None, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, generator: torch.Generator | None = None,
                 num_draft_tokens: int | None = None, window: int | None = None, init: str = "random",
                 decode: bool = True, **verifier_params) -> ImageAROutput:  # fmt: skip
        """Generate one image per condition with ``method`` (see :data:`IMAGE_AR_METHODS`).

        ``num_draft_tokens``: K, the Jacobi window of the Jacobi methods (default 16) or the drafts per round of the
        drafter methods (default 4); ``window`` is an alias. ``seed`` seeds the sampling (``generator`` instead:
        a torch.Generator of your own). ``init``: how fresh Jacobi slots are filled ("random" | "repeat").
        ``verifier_params`` go to the method's verifier: ``delta`` / ``lam`` / ``neighbours_k`` (LANTERN),
        ``ranks`` / ``prob_tol`` (GSD), ``reuse`` (SJD).
        """
        entry = IMAGE_AR_METHODS.get(method)
        check_int("seed", seed, 0)
        if window is not None and num_draft_tokens is not None and window != num_draft_tokens:
            raise ValueError(f"window: an alias of num_draft_tokens; got both ({window} and {num_draft_tokens})")
        k = num_draft_tokens if num_draft_tokens is not None else window if window is not None else entry.num_draft_tokens
        name = "num_draft_tokens" if num_draft_tokens is not None or window is None else "window"
        if entry.verifier is not None:
            check_int(name, k, 1)
        prefix = self.prefix_ids(condition)
        cfg_scale = self.cfg_scale if cfg_scale is None else cfg_scale
        ClassifierFreeGuidance(self.target, self.null_prompt, cfg_scale)  # validates cfg_scale
        sampling = SamplingParams(temperature, top_k, top_p)
        generator = generator or torch.Generator(device=prefix.device).manual_seed(seed)
        num_tokens = self.grid[0] * self.grid[1]
        if entry.verifier is None:
            out = plain_ar(self.guided(self.target, cfg_scale), prefix, num_tokens, sampling, generator, self.codebook_size)
        else:
            out = self._speculate(entry, prefix, num_tokens, sampling, generator, seed, float(cfg_scale), k, init,
                                  verifier_params)  # fmt: skip
        codes = out.new_tokens  # [B, h*w]
        if codes.shape[1] != num_tokens:
            raise RuntimeError(f"method {method!r} produced {codes.shape[1]} codes, expected {num_tokens}")
        images = to_pil(codes_to_images(self.vq, codes, self.grid)) if decode else []
        return ImageAROutput(images, codes, out.stats, method, entry.lossless)

    def _speculate(self, entry: ImageARMethod, prefix, num_tokens, sampling, generator, seed, cfg_scale, k, init,
                   verifier_params) -> GenerationOutput:  # fmt: skip
        """The method's (drafter, verifier) pair in the one token loop: every row advances on its own and generates
        exactly ``num_tokens`` codes (no EOS)."""
        params = dict(verifier_params)
        if entry.params is not None:
            params = entry.params(self, params)
        if entry.verifier == "gumbel-sjd":
            params.setdefault("seed", seed)
        if VERIFIERS.get(entry.verifier).domain == "jacobi":  # the rule fills its own next window's fresh slots
            params.setdefault("init", init)
        if entry.drafter == "jacobi":
            drafter = JacobiDrafter(init)
        elif self.drafter is None:
            raise ValueError(f"drafter: the method needs a small AR drafter (verifier {entry.verifier!r}); pass "
                             "ImageARSpeculator(..., drafter=model)")  # fmt: skip
        else:
            drafter = ModelDrafter(self.guided(self.drafter, cfg_scale))
        config = SpecConfig(num_draft_tokens=k, max_draft_tokens=max(k, 16), verifier=entry.verifier,
                            verifier_params=params, temperature=sampling.temperature, top_k=sampling.top_k,
                            top_p=sampling.top_p, max_new_tokens=num_tokens, rows="independent", fixed_length=True)  # fmt: skip
        engine = SpeculativeEngine(self.guided(self.target, cfg_scale), drafter, config, vocab_size=self.codebook_size)
        return engine.generate(prefix, generator=generator)
