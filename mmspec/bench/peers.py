"""The peers every speed claim is measured against, as ``Method.run`` builders: Hugging Face ``generate`` (plain and
assisted, with a forward counter that also times HF's time to the first token), HF ``generate`` with classifier-free
guidance for image AR, and diffusers' own sampling loop; plus the runner of mmspec's token speculators."""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch

from ..config import SpecConfig
from ..modalities.vlm import VLMSpeculator
from .harness import Method, RunResult


class ForwardCounter:
    """Counts calls of a module's forward (the target's verification forwards under HF generate) and times the
    first call after each reset from the reset on: HF's time to the first token, with what ``generate`` does before
    its first forward (set-up, position ids, and in recent transformers the vision encoding, which it runs before
    and outside the model's forward)."""

    def __init__(self, module):
        self.count = 0
        self.first_seconds: float | None = None
        self._t0 = 0.0
        self.handles = [module.register_forward_hook(self._hook)]

    def reset(self) -> None:
        self.count, self.first_seconds, self._t0 = 0, None, time.perf_counter()

    def _hook(self, *_):
        if self.count == 0:
            self.first_seconds = time.perf_counter() - self._t0
        self.count += 1


@contextmanager
def assistant_settings(model, **values):
    """Set HF assisted-generation knobs on the assistant's generation_config for one call, then restore them."""
    cfg = model.generation_config
    old = {k: getattr(cfg, k, None) for k in values}
    for k, v in values.items():
        setattr(cfg, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(cfg, k, v)


class Runners:
    """Builders of ``Method.run`` callables for one target: plain/HF ``generate`` (with a forward counter that also
    times HF's time to the first token), HF assisted generation with per-call assistant settings, and mmspec speculators."""

    def __init__(self, target, processor, max_new_tokens: int, speculator_cls=VLMSpeculator):
        self.target, self.processor, self.max_new_tokens = target, processor, max_new_tokens
        self.speculator_cls = speculator_cls
        self.counter = ForwardCounter(target)

    def hf(self, **kwargs):
        def run(enc):
            self.counter.reset()
            out = self.target.generate(**enc, do_sample=False, max_new_tokens=self.max_new_tokens, **kwargs)
            new = out[:, enc["input_ids"].shape[1] :]
            # HF's first call prefills and verifies at once; the time up to its end is reported as HF's prefill
            return RunResult(new, new.shape[1], self.counter.count, self.counter.first_seconds)

        return run

    def hf_assisted(self, assistant, **settings):
        base = self.hf(assistant_model=assistant)

        def run(enc):
            with assistant_settings(assistant, **settings):
                return base(enc)

        return run

    def mm(self, drafter, **cfg):
        spec = self.speculator_cls(self.target, self.processor, drafter=drafter)
        config = SpecConfig(max_new_tokens=self.max_new_tokens, eos_token_id=self.processor.tokenizer.eos_token_id, **cfg)

        def run(enc):
            kw = dict(enc)
            ids, mask = kw.pop("input_ids"), kw.pop("attention_mask")
            out = spec.engine.generate(ids, mask, config=config, **kw)
            rounds = out.stats.rounds  # the prefill's token is no verification: counted in neither
            return RunResult(out.new_tokens, sum(r.committed for r in rounds), len(rounds), out.stats.prefill_seconds,
                             out.stats.draft_prefill_seconds, overhead_seconds=sum(r.overhead_seconds for r in rounds),
                             rounds=len(rounds))  # fmt: skip

        return run

    def spec(self, name: str, source: str, drafter, params: dict | None = None, **cfg) -> Method:
        """An mmspec row: ``drafter`` with the target under ``SpecConfig(**cfg)``."""
        return Method(name, "mmspec", source, True, self.mm(drafter, **cfg), params or {})

    def assisted(self, label: str, source: str, assistant, ks) -> list[Method]:
        """HF assisted generation with ``assistant``: a constant schedule at each K of ``ks``, then HF's defaults
        (heuristic schedule, confidence threshold)."""
        const = {"num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}
        rows = [Method(f"HF assisted {label} K={k}", "hf", source, True,
                       self.hf_assisted(assistant, num_assistant_tokens=k, **const), {"K": k}) for k in ks]  # fmt: skip
        return rows + [Method(f"HF assisted {label} (HF defaults)", "hf", source, True, self.hf_assisted(assistant),
                              {"defaults": True})]  # fmt: skip

    def prompt_lookup(self, k: int = 4) -> Method:
        return Method(f"HF prompt lookup K={k}", "hf", "ngram", True, self.hf(prompt_lookup_num_tokens=k), {"K": k})


@torch.no_grad()
def hf_generate(spec, prefix: torch.Tensor, *, cfg_scale: float, temperature: float = 1.0, seed: int = 0) -> torch.Tensor:
    """The peer a user would otherwise reach for: Hugging Face ``generate`` sampling the same target with
    classifier-free guidance (``guidance_scale`` + ``negative_prompt_ids`` = the null prefix: HF runs the null
    condition as a second cached model call per step and guides on log-probabilities, which is the same
    distribution as guiding logits), non-code tokens suppressed. -> codes [B, h*w]."""
    b, p = prefix.shape
    t = spec.grid[0] * spec.grid[1]
    vocab = spec.target.get_output_embeddings().weight.shape[0]
    torch.manual_seed(seed)  # HF sampling draws from the global generator
    null = torch.tensor(spec.null_prompt, device=prefix.device).expand(b, -1)
    out = spec.target.generate(prefix, attention_mask=torch.ones_like(prefix), do_sample=True, temperature=temperature,
                               top_k=0, top_p=1.0, max_new_tokens=t, min_new_tokens=t, guidance_scale=cfg_scale,
                               negative_prompt_ids=null, suppress_tokens=list(range(spec.codebook_size, vocab)),
                               eos_token_id=None, pad_token_id=spec.null_prompt[0])  # fmt: skip
    return out[:, p:]


def diffusers_loop(unet, scheduler, labels: torch.Tensor, *, steps: int, sampler: str, cfg_scale: float, null: int,
                   seed: int, eta: float | None = None) -> torch.Tensor:  # fmt: skip
    """The loop a diffusers user writes: ``set_timesteps``, ``scale_model_input``, the UNet (conditional and null
    rows stacked for CFG), ``scheduler.step(..., generator)``. -> samples [B, C, H, W]."""
    import diffusers

    from ..modalities.diffusion import SAMPLER_SCHEDULERS

    sched = getattr(diffusers, SAMPLER_SCHEDULERS[sampler]).from_config(scheduler.config)
    sched.set_timesteps(steps)
    g = torch.Generator().manual_seed(seed)
    cfg = unet.config
    x = torch.randn((labels.shape[0], cfg.in_channels, cfg.sample_size, cfg.sample_size), generator=g) * sched.init_noise_sigma
    kw = {"eta": eta} if sampler == "ddim" else {}
    for t in sched.timesteps:
        inp = sched.scale_model_input(x, t)
        if cfg_scale == 1.0:
            out = unet(inp, t, class_labels=labels).sample
        else:
            c, u = unet(torch.cat([inp, inp]), t, class_labels=torch.cat([labels, torch.full_like(labels, null)])).sample.chunk(2)
            out = u + cfg_scale * (c - u)
        x = sched.step(out, t, x, generator=g, **kw).prev_sample
    return x
