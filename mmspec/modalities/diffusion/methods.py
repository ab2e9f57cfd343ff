"""Diffusion sampling methods: the plain ancestral sampler, speculative sampling with reflection coupling
(frozen-drift drafts, De Bortoli et al.), ASD (frozen-x̂0 drafts), a ParaDiGMS-style Picard baseline, and
SpecA-style forecast gating (in :mod:`.forecast`). Each is registered in ``DIFFUSION_METHODS``.

Every method works on a batch of states ``x [B, *S]`` (S = (C, H, W) for images, (D,) for the toy mixture)
whose rows advance independently: a row's step index ``n [B]`` moves by its own accepted count, and the one
batched target call per round evaluates every row at its own step (per-row timesteps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...checks import check_int, check_param, is_number
from ...registry import Registry
from ...types import Stats
from ...verifiers import VERIFIERS
from ...verifiers.continuous import GaussianProposal, GaussianScores
from .gaussian import GaussianKernel
from .models import Denoiser


@dataclass
class DiffusionStats(Stats):
    """What one sampling run cost (see :class:`~mmspec.types.Stats`; the units are sampler steps). ``rounds`` is the
    number of sequential batched target calls."""

    steps: int  # sampler steps N
    rounds: int = 0  # sequential target calls (plain sampling: N)
    target_rows: int = 0  # network evaluations summed over the batch (CFG doubling not counted)
    head_rows: int = 0  # forecast gating: rows whose last block was checked on a forecast (accepted ones skip the network)
    drafted: int = 0  # drafted stochastic steps (speculative) or forecast checks (gating), summed over rows
    accepted: int = 0  # of those, accepted by the verifier
    row_rounds: list[int] = field(default_factory=list)  # per sample: rounds in which it was evaluated
    timeline: list[tuple[int, int, int, int]] = field(default_factory=list)  # (row, first step, drafted, accepted) per
    # speculative round of each row that drafted
    total_seconds: float = 0.0

    num_rounds = target_forwards = property(lambda self: self.rounds)  # diffusion's rounds are its target calls

    @property
    def mean_accepted_tokens(self) -> float:
        """Sampler steps per sequential target call of the batch (plain sampling = 1.00)."""
        return self.steps / max(self.rounds, 1)

    @property
    def compression(self) -> float:
        """Sampler steps per target call a sample needed, averaged over samples."""
        rows = self.row_rounds or [self.rounds]
        return self.steps * len(rows) / max(1, sum(rows))

    batch_compression = property(lambda self: self.mean_accepted_tokens)  # the batch runs until its slowest row

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def summary(self) -> dict:
        return {**super().summary(), "steps": self.steps, "target_rows": self.target_rows, "head_rows": self.head_rows,
                "acceptance_rate": round(self.acceptance_rate, 4)}  # fmt: skip


@dataclass
class SampleContext:
    """What a method needs: the kernel, the counted target call, the per-row conditions and the randomness."""

    kernel: GaussianKernel
    denoiser: Denoiser
    cond: torch.Tensor | None  # [B, ...] per-row condition (class ids or embeddings), None = unconditional
    seed: int
    generator: torch.Generator  # drafting noise and acceptance uniforms

    def condition(self, rows: torch.Tensor):
        return None if self.cond is None else self.cond[rows.to(self.cond.device)]


class StepNoise:
    """ξ for (row, step), a function of (seed, step) only: plain sampling and Picard iterations that revisit a
    step read the same noise, in any order."""

    def __init__(self, seed: int, shape: tuple, device, dtype):
        self.seed, self.shape, self.device, self.dtype = seed, tuple(shape), device, dtype
        self._cache: dict[int, torch.Tensor] = {}

    def __call__(self, n: int) -> torch.Tensor:
        if n not in self._cache:
            g = torch.Generator(self.device).manual_seed(self.seed * 1_000_003 + 7919 * (n + 1))
            self._cache[n] = torch.randn(self.shape, generator=g, device=self.device, dtype=self.dtype)
        return self._cache[n]  # [B, *S]

    def rows(self, steps: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """ξ at per-entry steps for batch rows ``rows`` [R]: steps [R, K] -> [R, K, *S]."""
        r, k = steps.shape
        out = torch.empty((r, k, *self.shape[1:]), device=self.device, dtype=self.dtype)
        for n in steps.unique().tolist():
            where = steps == n  # [R, K]
            out[where] = self(int(n))[rows[where.nonzero()[:, 0]]]
        return out

    def forget_before(self, n: int) -> None:
        for key in [k for k in self._cache if k < n]:
            del self._cache[key]


DIFFUSION_METHODS: Registry = Registry("diffusion method")


class DiffusionMethod:
    """A sampling method: ``run(ctx, x [B, *S], **params) -> (x_final [B, *S], DiffusionStats)``."""

    lossless: bool = True
    needs_stochastic: bool = False  # refuses deterministic kernels (σ = 0)
    params: tuple[str, ...] = ()  # the keyword parameters ``run`` accepts
    draft_length: str | None = None  # which of them counts the steps drafted ahead (``num_draft_tokens`` sets it)

    def run(self, ctx: SampleContext, x: torch.Tensor, **params):
        raise NotImplementedError  # abstract


def _full(b: int, n: int, device) -> torch.Tensor:
    return torch.full((b,), n, dtype=torch.int64, device=device)


@DIFFUSION_METHODS.register("plain")
class PlainSampling(DiffusionMethod):
    """The sampler itself: one target call per step, x_{n+1} = mean_n(x_n) + σ_n ξ_n."""

    def run(self, ctx, x):
        kernel, den = ctx.kernel, ctx.denoiser
        b = x.shape[0]
        noise = StepNoise(ctx.seed, x.shape, x.device, x.dtype)
        rows = torch.arange(b, device=x.device)
        for n in range(kernel.num_steps):
            step = _full(b, n, x.device)
            out = den(x, step, ctx.condition(rows))  # [B, *S]
            x = kernel.mean_from_output(x, out, step) + kernel.step_std(step, x) * noise(n)
            noise.forget_before(n + 1)
        return x, DiffusionStats(kernel.num_steps, kernel.num_steps, b * kernel.num_steps, row_rounds=[kernel.num_steps] * b)


# ----------------------------------------------------------------------------------------------------------------
# Speculative sampling with reflection coupling: drafts from a frozen quantity, one batched target call, RMC.
# ----------------------------------------------------------------------------------------------------------------

DRAFT_RULES: Registry = Registry("diffusion draft rule")


@DRAFT_RULES.register("frozen-drift")
class FrozenDrift:
    """Freeze the network output of the last verified node; re-apply the step's coefficients at each draft."""

    @staticmethod
    def freeze(kernel: GaussianKernel, y: torch.Tensor, out: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return out

    @staticmethod
    def mean(kernel: GaussianKernel, y: torch.Tensor, frozen: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return kernel.mean_from_output(y, frozen, n)


@DRAFT_RULES.register("frozen-x0")
class FrozenX0:
    """Freeze x̂0 of the last verified node (ASD): closed-form drafts mean_n(y; x̂0) for every future step."""

    @staticmethod
    def freeze(kernel, y, out, n):
        return kernel.x0_from_output(y, out, n)

    @staticmethod
    def mean(kernel, y, frozen, n):
        return kernel.mean_from_x0(y, frozen, n)


@DRAFT_RULES.register("frozen-eps")
class FrozenEps:
    """Freeze ε̂ of the last verified node (whatever the model predicts); x̂0 is re-derived at each drafted state
    from ε̂ = gx·y + g0·x̂0 (clipped like the sampler's own x̂0)."""

    @staticmethod
    def freeze(kernel, y, out, n):
        return kernel.predict(y, out, n)[1]

    @staticmethod
    def mean(kernel, y, frozen, n):
        x0 = (frozen - kernel.at("gx", n, y) * y) / kernel.at("g0", n, y)
        if kernel.clip is not None:
            x0 = x0.clamp(-kernel.clip, kernel.clip)
        return kernel.mean(y, x0, frozen, n)


def stochastic_run_lengths(kernel: GaussianKernel) -> torch.Tensor:
    """run[n] = number of consecutive steps with σ > 0 starting at step n: [N + 1] int64 (run[N] = 0)."""
    n = kernel.num_steps
    run = torch.zeros(n + 1, dtype=torch.int64)
    for i in range(n - 1, -1, -1):
        run[i] = run[i + 1] + 1 if kernel.std[i] > 0 else 0
    return run


class SpeculativeSampling(DiffusionMethod):
    """Speculative sampling of a stochastic sampler, lossless (METHODS.md §5).

    Per round and row (state x at step n, frozen quantity f from the freshest verified network output):

    1. propose: Y_0 = x; Y_i = m_p,i + σ_{n+i-1} ξ_i with m_p,i = draft mean at (Y_{i-1}, n+i-1; f), i = 1..l,
       l = min(lookahead, stochastic steps left);
    2. score: ONE batched target call at Y_0..Y_l (Y_l prefetches the next round's drift), per-row steps;
    3. verify: the registry's verifier (reflection coupling) walks the chain with target means m_q,i at Y_{i-1};
    4. commit: the accepted prefix plus, at the first rejection, the reflected state; the next frozen quantity is
       the network output at Y_l when all l were accepted (exact at the new state), else at the parent of the
       reflected state (the freshest verified drift).

    ``draft`` picks the frozen quantity from ``DRAFT_RULES``: "frozen-drift" (the network output, default here),
    "frozen-x0" (ASD's default) or "frozen-eps". A deterministic step (σ = 0, e.g. DDPM's last) is taken exactly
    with the target mean: at Y_0 when a round starts there, or with the prefetched output at Y_l right after a
    whole accepted chain.
    """

    lossless = True
    needs_stochastic = True
    params = ("lookahead", "draft", "verifier", "verifier_params")
    draft_length = "lookahead"
    draft_rule = "frozen-drift"

    def run(self, ctx, x, lookahead: int = 4, draft: str | None = None, verifier="reflection-coupling",
            verifier_params: dict | None = None):  # fmt: skip
        check_int("lookahead", lookahead, 1, note=" (drafted steps per round)")
        kernel, den, g = ctx.kernel, ctx.denoiser, ctx.generator
        rule = DRAFT_RULES.get(draft or self.draft_rule)
        check = VERIFIERS.get(verifier)(**(verifier_params or {})) if isinstance(verifier, str) else verifier
        if not hasattr(check, "verify"):
            raise TypeError(f"verifier: expected a registered name or a verifier object, got {type(verifier).__name__}")
        big_n = kernel.num_steps
        b, shape = x.shape[0], x.shape[1:]
        run_len = stochastic_run_lengths(kernel).to(x.device)  # [N + 1]
        x = x.clone()
        n = torch.zeros(b, dtype=torch.int64, device=x.device)  # next step of each row
        frozen = torch.zeros_like(x)  # no evaluation yet: the first round drafts from a zero drift
        stats = DiffusionStats(big_n, row_rounds=[0] * b)
        while bool((n < big_n).any()):
            rows = (n < big_n).nonzero().squeeze(1)  # [R]
            r = rows.shape[0]
            x_r, n_r, f_r = x[rows], n[rows], frozen[rows]
            l = run_len[n_r].clamp_max(lookahead)  # [R] drafted stochastic steps, 0 = a deterministic step
            big_l = int(l.max())
            ar = torch.arange(r, device=x.device)

            # 1. propose: Y [R, L+1, *S], draft means and noise [R, L, *S]
            ys, means_p, xis = [x_r], [], []
            for i in range(big_l):
                step = (n_r + i).clamp_max(big_n - 1)
                m_p = rule.mean(kernel, ys[-1], f_r, step)
                xi = torch.randn(x_r.shape, generator=g, device=x.device, dtype=x.dtype)
                ys.append(m_p + kernel.step_std(step, x_r) * xi)
                means_p.append(m_p)
                xis.append(xi)
            y = torch.stack(ys, 1)  # [R, L+1, *S]
            steps = n_r[:, None] + torch.arange(big_l + 1, device=x.device)  # [R, L+1]
            evaluate = (torch.arange(big_l + 1, device=x.device) <= l[:, None]) & (steps < big_n)  # [R, L+1]

            # 2. score: one batched call over every evaluated (row, position)
            which = evaluate.nonzero()  # [E, 2]
            cond = ctx.condition(rows)
            out = torch.zeros_like(y)
            out[evaluate] = den(y[evaluate], steps[evaluate], None if cond is None else cond[which[:, 0]])
            stats.rounds += 1
            stats.target_rows += which.shape[0]
            for row in rows.tolist():
                stats.row_rounds[row] += 1
            parents = max(big_l, 1)
            p_steps = steps[:, :parents].clamp_max(big_n - 1)  # [R, P]
            m_q = kernel.mean_from_output(y[:, :parents].flatten(0, 1), out[:, :parents].flatten(0, 1),
                                          p_steps.flatten()).view(r, parents, *shape)  # fmt: skip

            # 3. verify (deterministic rows and padding past a row's chain: m_p := m_q, accepted outright)
            new = m_q[:, 0].clone()  # deterministic rows take the exact target mean
            advance = torch.ones(r, dtype=torch.int64, device=x.device)
            fresh = torch.zeros(r, dtype=torch.int64, device=x.device)
            whole = torch.zeros(r, dtype=torch.bool, device=x.device)  # rows whose whole chain was accepted
            if big_l > 0:
                live = torch.arange(big_l, device=x.device) < l[:, None]  # [R, L]
                m_p = torch.where(live.view(r, big_l, *[1] * len(shape)), torch.stack(means_p, 1), m_q)
                sigma = torch.where(live, kernel.std.to(x.device)[p_steps], torch.ones_like(p_steps, dtype=torch.float64))
                proposal = GaussianProposal(y[:, 1:].flatten(2), m_p.flatten(2), torch.stack(xis, 1).flatten(2), sigma)
                verdict = check.verify(proposal, GaussianScores(m_q.flatten(2)), generator=g)
                acc = verdict.num_accepted.clamp_max(l)  # [R]
                rejected = verdict.num_accepted < l  # [R]
                chain = l > 0
                stats.drafted += int(l.sum())
                stats.accepted += int(acc.sum())
                stats.timeline += [t for t in zip(rows.tolist(), n_r.tolist(), l.tolist(), acc.tolist()) if t[2] > 0]
                # 4. commit
                kept = torch.where(rejected.view(r, *[1] * len(shape)), verdict.next_states.view(r, *shape), y[ar, acc])
                new = torch.where(chain.view(r, *[1] * len(shape)), kept, new)
                advance = torch.where(chain, acc + rejected.long(), advance)
                whole = chain & ~rejected
                fresh = torch.where(whole, l, advance - 1)
                # a deterministic step right after a whole accepted chain (DDPM's last step) is taken at once with
                # the output prefetched at Y_l: it is the exact target step, and it saves a round
                nxt = (n_r + advance).clamp_max(big_n - 1)
                tail = whole & (n_r + advance < big_n) & (kernel.std.to(x.device)[nxt] == 0)
                if bool(tail.any()):
                    stepped = kernel.mean_from_output(new, out[ar, l], nxt)
                    new = torch.where(tail.view(r, *[1] * len(shape)), stepped, new)
                    advance = advance + tail.long()
            x[rows] = new
            n[rows] = n_r + advance
            fresh_steps = steps[ar, fresh].clamp_max(big_n - 1)
            frozen[rows] = rule.freeze(kernel, y[ar, fresh], out[ar, fresh], fresh_steps)
        return x, stats


DIFFUSION_METHODS.register("speculative")(SpeculativeSampling)


@DIFFUSION_METHODS.register("asd")
class AutospeculativeSampling(SpeculativeSampling):
    """ASD: speculative sampling whose drafts reuse the root's predicted x̂0 (closed-form drafts), verified with
    reflection coupling along the chain. Lossless for any Gaussian kernel with state-independent σ."""

    draft_rule = "frozen-x0"


@DIFFUSION_METHODS.register("paradigms")
class PicardSampling(DiffusionMethod):
    """ParaDiGMS-style Picard iterations (approximate; Shih et al. 2023).

    Each row keeps a window of ``window`` future states with the sampler's own noise for those steps fixed
    (the same noise plain sampling uses, :class:`StepNoise`). One round evaluates every window position in one
    batched call and updates all of them at once, x_{p+k+1} = x_p + Σ_{i<=k} (mean_i(x_{p+i}) − x_{p+i} + σ_i ξ_i);
    the window then slides past the positions whose change was within tolerance, error_k = ||Δx_k||²/D <=
    tolerance²·σ²_k (always at least one: the first position is exact). ``tolerance=0`` reproduces plain
    sampling with the same noise (up to float rounding) at one step per round.
    """

    lossless = False
    params = ("window", "tolerance")
    draft_length = "window"

    def run(self, ctx, x, window: int = 8, tolerance: float = 0.1):
        check_int("window", window, 1, note=" (Picard window in steps)")
        check_param("tolerance", tolerance, is_number(tolerance) and tolerance >= 0, "a number >= 0")
        kernel, den = ctx.kernel, ctx.denoiser
        big_n, b, shape = kernel.num_steps, x.shape[0], x.shape[1:]
        noise = StepNoise(ctx.seed, x.shape, x.device, x.dtype)
        std = kernel.std.to(x.device)
        traj = x[:, None].repeat(1, window + 1, *[1] * len(shape))  # [B, W+1, *S]: x_p .. x_{p+W}, x_p exact
        p = torch.zeros(b, dtype=torch.int64, device=x.device)
        stats = DiffusionStats(big_n, row_rounds=[0] * b)
        k_idx = torch.arange(window, device=x.device)
        while bool((p < big_n).any()):
            rows = (p < big_n).nonzero().squeeze(1)
            r = rows.shape[0]
            t_r, p_r = traj[rows], p[rows]
            steps = p_r[:, None] + k_idx  # [R, W]
            valid = steps < big_n  # [R, W]
            which = valid.nonzero()
            cond = ctx.condition(rows)
            out = torch.zeros((r, window, *shape), device=x.device, dtype=x.dtype)
            parents = t_r[:, :window]  # [R, W, *S]
            out[valid] = den(parents[valid], steps[valid], None if cond is None else cond[which[:, 0]])
            stats.rounds += 1
            stats.target_rows += which.shape[0]
            for row in rows.tolist():
                stats.row_rounds[row] += 1
            s = steps.clamp_max(big_n - 1)
            means = kernel.mean_from_output(parents.flatten(0, 1), out.flatten(0, 1), s.flatten()).view(r, window, *shape)
            sigma = std[s].to(x.dtype)  # [R, W]
            incr = means - parents + sigma.view(r, window, *[1] * len(shape)) * noise.rows(s, rows)
            incr = torch.where(valid.view(r, window, *[1] * len(shape)), incr, torch.zeros_like(incr))
            new = t_r[:, :1] + incr.cumsum(1)  # [R, W, *S]: positions 1..W
            err = (new - t_r[:, 1:]).flatten(2).pow(2).mean(-1).double()  # [R, W]
            ok = (err <= tolerance**2 * sigma.double() ** 2) & valid
            first_bad = torch.where(ok, window, k_idx).min(1).values  # [R] index of the first non-converged position
            stride = (first_bad + 1).clamp_max(window).minimum((big_n - p_r).clamp_min(1))  # >= 1
            full = torch.cat([t_r[:, :1], new], 1)  # [R, W+1, *S]
            idx = (stride[:, None] + torch.arange(window + 1, device=x.device)).clamp_max(window)  # [R, W+1]
            traj[rows] = full.gather(1, idx.view(r, window + 1, *[1] * len(shape)).expand_as(full))
            p[rows] = p_r + stride
            noise.forget_before(int(p.min()))
        return traj[:, 0], stats
