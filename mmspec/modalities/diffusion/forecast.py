"""SpecA-style forecast gating (lossy; METHODS.md §5): forecast, check with the last block, fall back.

At each sampler step and for each row, the inputs of the denoiser's *last block* and that block's output are
forecast by a polynomial (Taylor / Newton) through the row's last ``order + 1`` fully computed steps. The last
block is then run on the forecast inputs (cheap: one block instead of the network) and its output ``c`` compared
with the forecast output ``f``; the registry's ``forecast-gating`` verifier accepts when ||f − c||₁/||c||₁ < τ,
τ = max(τ0·β^progress, floor). Accepted rows use the checked block output ``c`` and the output layers; the other
rows (and every row in the first ``order + 1`` steps, or after ``max_forecast`` forecasts in a row) run the full
network, which refreshes their history. Works with deterministic samplers; no distribution guarantee.

The split of a model into (trunk, last block, head) lives in ``BLOCK_SPLITS`` (keyed by model class name);
diffusers' ``UNet2DModel`` is registered.
"""

from __future__ import annotations

import torch

from ...checks import check_int
from ...registry import Registry
from ...verifiers import VERIFIERS
from ...verifiers.continuous import ForecastProposal, ForecastScores
from .models import _Output
from .methods import DIFFUSION_METHODS, DiffusionMethod, DiffusionStats, StepNoise, _full

BLOCK_SPLITS: Registry = Registry("block split (model class)")


@BLOCK_SPLITS.register("UNet2DModel")
class UNet2DLastBlock:
    """diffusers ``UNet2DModel`` split at its last up block: ``full`` runs the model and records that block's
    inputs (hidden state and skip tensors) and output; ``head`` runs only that block and the output layers."""

    def __init__(self, unet):
        cfg = unet.config
        if cfg.time_embedding_type != "positional" or hasattr(unet.up_blocks[-1], "skip_conv"):
            raise ValueError("model: forecast gating supports UNet2DModel with positional time embeddings and no skip "
                             f"up blocks, got time_embedding_type={cfg.time_embedding_type!r}")  # fmt: skip
        self.unet = unet
        self.block = unet.up_blocks[-1]
        self._captured = None

    def _capture(self, module, args, output):
        hidden, res, _ = args
        self._captured = [hidden, *res, output]

    def full(self, inp, t, labels):
        """-> (model output [R, *S], features: [block input, *skip inputs, block output])."""
        handle = self.block.register_forward_hook(self._capture)
        try:
            out = self.unet(inp, t, class_labels=labels).sample
        finally:
            handle.remove()
        feats, self._captured = self._captured, None
        return out, feats

    def embedding(self, t, labels):
        u = self.unet
        emb = u.time_embedding(u.time_proj(t).to(u.dtype))
        if u.class_embedding is not None:
            if u.config.class_embed_type == "timestep":
                labels = u.time_proj(labels)
            emb = emb + u.class_embedding(labels).to(u.dtype)
        return emb

    def head(self, feats, t, labels):
        """feats = [block input, *skip inputs] -> (block output, model output)."""
        u = self.unet
        block_out = self.block(feats[0], tuple(feats[1:]), self.embedding(t, labels))
        return block_out, u.conv_out(u.conv_act(u.conv_norm_out(block_out)))


def lagrange_weights(nodes: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """Weights w [K, R] of the polynomial through (nodes[j, r], ·) evaluated at at[r]: Σ_j w_j H_j is the forecast.
    nodes [K, R] distinct per row (float64), at [R]."""
    k = nodes.shape[0]
    w = torch.ones_like(nodes)
    for j in range(k):
        for i in range(k):
            if i != j:
                w[j] = w[j] * (at - nodes[i]) / (nodes[j] - nodes[i])
    return w


class GatedModel(torch.nn.Module):
    """The denoiser as seen by forecast gating: a model with the same call as the wrapped one, keeping per-row
    histories of the last ``order + 1`` fully computed steps (its own state, for one sampling run)."""

    def __init__(self, model, verifier, order: int, max_forecast: int):
        super().__init__()
        self.split = BLOCK_SPLITS.get(type(model).__name__)(model)
        self.model, self.verifier, self.order, self.max_forecast = model, verifier, order, max_forecast
        self.history: list[list[torch.Tensor]] = []  # [K][F] tensors [R, ...], oldest first
        self.nodes: torch.Tensor | None = None  # [K, R] step index of each history entry
        self.streak: torch.Tensor | None = None  # [R] consecutive forecast steps
        self.step = 0
        self.progress = 0.0
        self.full_rows = self.head_rows = self.accepted_rows = 0

    def forward(self, sample, timestep, class_labels=None):
        r = sample.shape[0]
        k = len(self.history)
        step = torch.full((r,), float(self.step), dtype=torch.float64, device=sample.device)
        ready = torch.zeros(r, dtype=torch.bool, device=sample.device)
        if k == self.order + 1:
            ready = self.streak < self.max_forecast
        out = torch.empty_like(sample)
        if bool(ready.any()):
            idx = ready.nonzero().squeeze(1)
            w = lagrange_weights(self.nodes[:, idx], step[idx])  # [K, R']
            fc = [sum(w[j].view(-1, *[1] * (h[0].dim() - 1)).to(h[j].dtype) * h[j][idx] for j in range(k))
                  for h in zip(*self.history)]  # fmt: skip
            block_out, head_out = self.split.head(fc[:-1], timestep[idx], None if class_labels is None else class_labels[idx])
            progress = torch.full((idx.shape[0],), self.progress, dtype=torch.float64, device=sample.device)
            verdict = self.verifier.verify(ForecastProposal(fc[-1][:, None], progress), ForecastScores(block_out[:, None]))
            ok = verdict.num_accepted > 0  # [R']
            out[idx[ok]] = head_out[ok].to(out.dtype)
            ready[idx[~ok]] = False
            self.head_rows += int(idx.shape[0])
            self.accepted_rows += int(ok.sum())
        fall = (~ready).nonzero().squeeze(1)
        if fall.numel():
            full_out, feats = self.split.full(sample[fall], timestep[fall], None if class_labels is None else class_labels[fall])
            out[fall] = full_out.to(out.dtype)
            self._record(fall, feats, r, sample.device)
            self.full_rows += int(fall.numel())
        self.streak = torch.where(ready, self.streak + 1, torch.zeros_like(self.streak)) if self.streak is not None else \
            torch.zeros(r, dtype=torch.int64, device=sample.device)  # fmt: skip
        return _Output(out)

    def _record(self, rows, feats, r, device):
        """Push the full computation of ``rows`` at the current step into their histories."""
        feats = [f.detach() for f in feats]
        if len(self.history) < self.order + 1:  # warm-up: every row is computed fully in lock-step
            self.history.append(feats)
            node = torch.full((1, r), float(self.step), dtype=torch.float64, device=device)
            self.nodes = node if self.nodes is None else torch.cat([self.nodes, node])
            return
        for j in range(len(self.history) - 1):  # shift the rows' histories by one entry
            for f in range(len(feats)):
                self.history[j][f][rows] = self.history[j + 1][f][rows]
            self.nodes[j, rows] = self.nodes[j + 1, rows]
        for f in range(len(feats)):
            self.history[-1][f][rows] = feats[f]
        self.nodes[-1, rows] = float(self.step)


@DIFFUSION_METHODS.register("speca")
class ForecastGatedSampling(DiffusionMethod):
    """The sampler with SpecA-style forecast gating of the denoiser's last block (lossy, any sampler incl. σ = 0).

    Parameters: ``tau0``, ``beta``, ``floor`` of the ``forecast-gating`` verifier; ``order`` (default 2) of the
    forecast polynomial; ``max_forecast`` (default 4) forecast steps in a row before a forced full computation.
    Sequential rounds stay N; what drops is the number of full network evaluations (``target_rows``).
    """

    lossless = False
    params = ("tau0", "beta", "floor", "order", "max_forecast")

    def run(self, ctx, x, tau0: float = 0.1, beta: float = 0.5, floor: float = 0.01, order: int = 2, max_forecast: int = 4):
        check_int("order", order, 0)
        check_int("max_forecast", max_forecast, 1)
        kernel, den = ctx.kernel, ctx.denoiser
        gated = GatedModel(den.model, VERIFIERS.get("forecast-gating")(tau0=tau0, beta=beta, floor=floor), order, max_forecast)
        run = type(den)(gated, kernel, den.cfg_scale, den.null)
        b, big_n = x.shape[0], kernel.num_steps
        noise = StepNoise(ctx.seed, x.shape, x.device, x.dtype)
        rows = torch.arange(b, device=x.device)
        for n in range(big_n):
            gated.step, gated.progress = n, n / max(big_n - 1, 1)
            step = _full(b, n, x.device)
            out = run(x, step, ctx.condition(rows))
            x = kernel.mean_from_output(x, out, step) + kernel.step_std(step, x) * noise(n)
            noise.forget_before(n + 1)
        cfg_rows = 2 if (den.cfg_scale != 1.0 and ctx.cond is not None) else 1
        stats = DiffusionStats(big_n, big_n, gated.full_rows // cfg_rows, row_rounds=[big_n] * b)
        stats.head_rows = stats.drafted = gated.head_rows // cfg_rows
        stats.accepted = gated.accepted_rows // cfg_rows
        den.calls += run.calls
        return x, stats
