"""Diffusion modality: scheduler kernels vs diffusers' step(), the speculative samplers' law on a 2-D Gaussian
mixture with an analytic score, per-sample acceptance, refusals, the Picard and forecast-gating special cases."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import ks_2samp

from mmspec import VERIFIERS
from mmspec.modalities.diffusion import (DIFFUSION_METHODS, Denoiser, DiffusionSpeculator, build_kernel,
                                         toy_mixture)  # fmt: skip
from mmspec.verifiers.continuous import ContinuousVerdict, ReflectionCouplingVerifier

SCHEDULERS = {"ddpm": "DDPMScheduler", "ddim": "DDIMScheduler", "euler-ancestral": "EulerAncestralDiscreteScheduler"}


def scheduler(name="ddpm", **config):
    import diffusers

    base = dict(num_train_timesteps=1000, beta_schedule="linear", clip_sample=False)
    if name == "euler-ancestral":
        base.pop("clip_sample")
    return getattr(diffusers, SCHEDULERS[name])(**{**base, **config})


def tiny_unet(seed=0, classes=None, channels=3, size=8):
    from diffusers import UNet2DModel

    torch.manual_seed(seed)
    return UNet2DModel(sample_size=size, in_channels=channels, out_channels=channels, layers_per_block=1,
                       block_out_channels=(8, 16), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4, attention_head_dim=8,
                       num_class_embeds=classes).eval()  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Kernels: the pure per-step Gaussians equal diffusers' stateful step() on random inputs.


@pytest.mark.parametrize("name,options", [("ddpm", {}), ("ddpm", {"variance_type": "fixed_large"}), ("ddim", {"eta": 0.6}),
                                          ("ddim", {"eta": 0.0}), ("euler-ancestral", {})])  # fmt: skip
@pytest.mark.parametrize("prediction", ["epsilon", "v_prediction", "sample"])
@pytest.mark.parametrize("clip", [False, True])
def test_kernel_matches_diffusers_step(name, options, prediction, clip):
    if name == "euler-ancestral" and (prediction == "sample" or clip):
        pytest.skip("Euler-ancestral has no sample prediction and no x̂0 clipping")
    options = dict(options)
    eta = options.pop("eta", None)
    config = {"prediction_type": prediction, **options}
    if name != "euler-ancestral":
        config["clip_sample"] = clip
    sched = scheduler(name, **config)
    steps = 12
    sched.set_timesteps(steps)
    kernel = build_kernel(name, sched.config, steps, **({} if eta is None else {"eta": eta}))
    assert kernel.timesteps.tolist() == sched.timesteps.double().tolist()
    torch.manual_seed(0)
    x = torch.randn(3, 3, 6, 6) * kernel.init_std
    assert math.isclose(kernel.init_std, float(sched.init_noise_sigma), rel_tol=1e-6)
    for i, t in enumerate(sched.timesteps):
        n = torch.full((3,), i)
        inp = sched.scale_model_input(x, t)
        assert torch.allclose(kernel.model_input(x, n), inp, rtol=1e-5, atol=1e-6)
        out = torch.randn(3, 3, 6, 6)
        kw = {} if eta is None else {"eta": eta}
        res = sched.step(out, t, x, generator=torch.Generator().manual_seed(i), **kw).prev_sample
        xi = torch.randn(3, 3, 6, 6, generator=torch.Generator().manual_seed(i))
        ours = kernel.mean_from_output(x, out, n) + kernel.step_std(n, x) * xi
        scale = 1 + x.abs().max().item()
        assert torch.allclose(ours, res, atol=2e-6 * scale, rtol=1e-5), (i, (ours - res).abs().max())
        x = res


def test_kernel_per_row_steps_and_x0_draft():
    sched = scheduler("ddpm")
    k = build_kernel("ddpm", sched.config, 10)
    x, out = torch.randn(4, 2), torch.randn(4, 2)
    n = torch.tensor([0, 3, 5, 9])
    rowwise = torch.stack([k.mean_from_output(x[i : i + 1], out[i : i + 1], n[i : i + 1])[0] for i in range(4)])
    assert torch.allclose(k.mean_from_output(x, out, n), rowwise)
    # a frozen x̂0 taken at the same state reproduces the mean (no clipping: ε̂ is recovered exactly)
    x0 = k.x0_from_output(x, out, n)
    assert torch.allclose(k.mean_from_x0(x, x0, n), k.mean_from_output(x, out, n), atol=1e-5)


def test_kernel_refusals():
    with pytest.raises(ValueError, match="variance_type.*learned_range"):
        build_kernel("ddpm", scheduler("ddpm", variance_type="learned_range").config, 10)
    with pytest.raises(ValueError, match="thresholding"):
        build_kernel("ddpm", scheduler("ddpm", thresholding=True).config, 10)
    with pytest.raises(ValueError, match="eta: expected a number in \\[0, 1\\]"):
        build_kernel("ddim", scheduler("ddim").config, 10, eta=1.5)
    with pytest.raises(ValueError, match="num_inference_steps"):
        build_kernel("ddpm", scheduler("ddpm").config, 0)
    with pytest.raises(KeyError, match="unknown diffusion sampler 'heun'"):
        build_kernel("heun", scheduler("ddpm").config, 10)


# ----------------------------------------------------------------------------------------------------------------
# The target call: per-row timesteps in one batch, CFG as a stacked batch.


def test_denoiser_per_row_timesteps_and_cfg():
    unet = tiny_unet(classes=5)
    sched = scheduler("ddpm")
    k = build_kernel("ddpm", sched.config, 10)
    den = Denoiser(unet, k, cfg_scale=2.5, null=4)
    x, n, c = torch.randn(3, 3, 8, 8), torch.tensor([0, 4, 9]), torch.tensor([0, 1, 2])
    with torch.no_grad():
        got = den(x, n, c)
        for i in range(3):
            t = k.timesteps[n[i : i + 1]].float()
            cond = unet(x[i : i + 1], t, class_labels=c[i : i + 1]).sample
            unc = unet(x[i : i + 1], t, class_labels=torch.tensor([4])).sample
            assert torch.allclose(got[i : i + 1], unc + 2.5 * (cond - unc), atol=1e-5)
    assert den.calls == 1 and den.rows == 3


# ----------------------------------------------------------------------------------------------------------------
# Law tests on the 2-D mixture (analytic score): speculative output ~ plain sampler output.

DIRECTIONS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7071, 0.7071], [0.7071, -0.7071]])


def min_ks_pvalue(a: torch.Tensor, b: torch.Tensor) -> float:
    return min(ks_2samp((a @ d).numpy(), (b @ d).numpy()).pvalue for d in DIRECTIONS)


class NoReflection(ReflectionCouplingVerifier):
    """The broken variant: at a rejection return m_q + σξ (same noise, no reflection). Not exact."""

    def core(self, proposal, scores, uniforms):
        v = super().core(proposal, scores, uniforms)
        b, l, _ = proposal.states.shape
        rows = torch.arange(b)
        j = v.num_accepted.clamp_max(l - 1)
        plain = scores.means[rows, j] + proposal.std[rows, j, None].to(scores.means.dtype) * proposal.noise[rows, j]
        nxt = torch.where(v.extras["new_state"][:, None], plain, v.next_states)
        return ContinuousVerdict(v.num_accepted, nxt, v.extras)


N_LAW = 40000  # enough that dropping the reflection fails (p ~ 1e-13 at this size, see below)
LAW_CASES = [  # (sampler, eta, steps, method, lookahead, cfg_scale)
    ("ddpm", None, 10, "asd", 4, 1.0),
    ("ddpm", None, 20, "speculative", 4, 1.0),
    ("ddpm", None, 20, "asd", 6, 1.0),
    ("ddim", 1.0, 16, "speculative", 3, 1.0),
    ("euler-ancestral", None, 16, "asd", 4, 1.0),
    ("ddpm", None, 20, "speculative", 4, 2.0),
    ("ddpm", None, 20, "frozen-eps", 4, 1.0),  # speculative with the frozen-ε draft rule
]


def _mixture_speculator(sampler="ddpm"):
    sched = scheduler(sampler)
    return DiffusionSpeculator((toy_mixture(sched.alphas_cumprod), sched), null_condition=4)


def _conditions(n):
    return [i % 3 for i in range(n)]  # components 0..2; label 4 = the null (whole mixture)


@pytest.fixture(scope="module")
def plain_samples():
    cache = {}

    def get(sampler, eta, steps, cfg_scale):
        key = (sampler, eta, steps, cfg_scale)
        if key not in cache:
            sp = _mixture_speculator(sampler)
            out = sp.generate(_conditions(N_LAW), num_inference_steps=steps, sampler=sampler, eta=eta, seed=123,
                              method="plain", cfg_scale=cfg_scale)  # fmt: skip
            cache[key] = out.samples
        return cache[key]

    return get


@pytest.mark.parametrize("sampler,eta,steps,method,lookahead,cfg", LAW_CASES)
def test_speculative_law_matches_plain_sampler(plain_samples, sampler, eta, steps, method, lookahead, cfg):
    sp = _mixture_speculator(sampler)
    rule = {"draft": method} if method.startswith("frozen") else {}
    out = sp.generate(_conditions(N_LAW), num_inference_steps=steps, sampler=sampler, eta=eta, seed=7,
                      method="speculative" if rule else method, lookahead=lookahead, cfg_scale=cfg, **rule)  # fmt: skip
    assert out.lossless
    p = min_ks_pvalue(out.samples, plain_samples(sampler, eta, steps, cfg))
    assert p > 1e-3 / len(DIRECTIONS), p
    st = out.stats
    assert st.rounds <= steps  # never more sequential calls than steps (every round commits >= 1 step per row)
    assert sum(st.row_rounds) / len(st.row_rounds) < 0.6 * steps  # far fewer per sample
    assert 0 < st.acceptance_rate < 1


def test_dropping_the_reflection_fails_the_law_test(plain_samples):
    sampler, eta, steps, method, lookahead, cfg = LAW_CASES[0]  # ASD rejects at moderate δ, where the bias shows
    sp = _mixture_speculator(sampler)
    out = sp.generate(_conditions(N_LAW), num_inference_steps=steps, sampler=sampler, seed=7, method=method,
                      lookahead=lookahead, verifier=NoReflection())  # fmt: skip
    assert min_ks_pvalue(out.samples, plain_samples(sampler, eta, steps, cfg)) < 1e-6


def test_plain_sampler_matches_diffusers_loop():
    """Our plain sampler on the kernels is the diffusers loop (scale_model_input + step) with the same noise."""
    sched = scheduler("euler-ancestral")
    model = toy_mixture(sched.alphas_cumprod)
    sp = DiffusionSpeculator((model, sched))
    out = sp.generate(batch_size=5, num_inference_steps=8, method="plain", seed=3)
    from mmspec.modalities.diffusion import StepNoise

    x = sched.init_noise_sigma * torch.randn((5, 2), generator=torch.Generator().manual_seed(3))
    sched.set_timesteps(8)
    noise = StepNoise(3, (5, 2), "cpu", torch.float32)
    for i, t in enumerate(sched.timesteps):
        eps = model(sched.scale_model_input(x, t), t.expand(5)).sample
        g = torch.Generator().manual_seed(3 * 1_000_003 + 7919 * (i + 1))
        assert torch.equal(torch.randn((5, 2), generator=g), noise(i))
        x = sched.step(eps, t, x, generator=torch.Generator().manual_seed(3 * 1_000_003 + 7919 * (i + 1))).prev_sample
    assert torch.allclose(out.samples, x, atol=1e-4)


def test_rows_advance_independently():
    sp = _mixture_speculator()
    out = sp.generate(_conditions(64), num_inference_steps=30, seed=0, method="speculative", lookahead=6)
    rr = out.stats.row_rounds
    assert len(rr) == 64 and max(rr) == out.stats.rounds and min(rr) < max(rr)
    assert out.stats.rounds < 30  # the whole batch (its slowest row) in fewer sequential calls than plain
    assert torch.isfinite(out.samples).all()


# ----------------------------------------------------------------------------------------------------------------
# Refusals and errors.


def test_deterministic_sampler_is_refused_for_lossless_speculation():
    sp = _mixture_speculator("ddim")
    for method in ("speculative", "asd"):
        with pytest.raises(ValueError, match="deterministic.*eta > 0.*speca"):
            sp.generate(batch_size=2, num_inference_steps=10, method=method, eta=0.0)
    # forecast gating and Picard run on it (lossy methods)
    assert sp.generate(batch_size=2, num_inference_steps=10, method="paradigms", eta=0.0).samples.shape == (2, 2)


def test_errors_name_the_argument():
    sp = _mixture_speculator()
    with pytest.raises(ValueError, match="lookahead: expected an int >= 1"):
        sp.generate(batch_size=2, num_inference_steps=5, lookahead=0)
    with pytest.raises(ValueError, match="window: not a parameter of method 'speculative'"):
        sp.generate(batch_size=2, num_inference_steps=5, window=4)
    with pytest.raises(KeyError, match="unknown diffusion method 'magic'"):
        sp.generate(batch_size=2, num_inference_steps=5, method="magic")
    with pytest.raises(ValueError, match="eta: only the 'ddim' sampler"):
        sp.generate(batch_size=2, num_inference_steps=5, eta=0.5)
    with pytest.raises(ValueError, match="batch_size: expected an int >= 1"):
        sp.generate(num_inference_steps=5)
    with pytest.raises(ValueError, match="cfg_scale: classifier-free guidance"):
        DiffusionSpeculator((toy_mixture(scheduler().alphas_cumprod), scheduler())).generate([0, 1], cfg_scale=2.0)
    with pytest.raises(TypeError, match="pipeline_or_unet_and_scheduler"):
        DiffusionSpeculator(object())
    with pytest.raises(ValueError, match="tolerance: expected a number >= 0"):
        sp.generate(batch_size=2, num_inference_steps=5, method="paradigms", tolerance=-1)


# ----------------------------------------------------------------------------------------------------------------
# Picard (ParaDiGMS) and forecast gating: their exact special cases and their bounds.


def test_picard_with_zero_tolerance_is_the_plain_sampler():
    sp = _mixture_speculator()
    plain = sp.generate(_conditions(50), num_inference_steps=25, method="plain", seed=5)
    exact = sp.generate(_conditions(50), num_inference_steps=25, method="paradigms", window=6, tolerance=0.0, seed=5)
    assert torch.allclose(exact.samples, plain.samples, atol=1e-4)
    assert exact.stats.rounds <= 25 and not exact.lossless
    loose = sp.generate(_conditions(50), num_inference_steps=25, method="paradigms", window=6, tolerance=0.1, seed=5)
    assert loose.stats.rounds < 25
    assert (loose.samples - plain.samples).norm(dim=-1).max() < 0.2  # same noise: the Picard fixed point is close


@pytest.mark.parametrize("sampler,eta", [("ddim", 0.0), ("ddpm", None)])
def test_forecast_gating_exact_case_and_savings(sampler, eta):
    unet = tiny_unet(classes=3)
    sched = scheduler(sampler)
    sp = DiffusionSpeculator((unet, sched), conditioner=int, null_condition=2, cfg_scale=1.5)
    conds = [0, 1, 0, 1]
    plain = sp.generate(conds, num_inference_steps=12, method="plain", sampler=sampler, eta=eta, seed=2)
    strict = sp.generate(conds, num_inference_steps=12, method="speca", sampler=sampler, eta=eta, seed=2, tau0=1e-12, floor=0.0)
    assert torch.allclose(strict.samples, plain.samples, atol=1e-5)
    assert strict.stats.target_rows == 4 * 12 and strict.stats.accepted == 0
    loose = sp.generate(conds, num_inference_steps=12, method="speca", sampler=sampler, eta=eta, seed=2, tau0=1e3, floor=1e3,
                        beta=1.0, order=1, max_forecast=3)  # fmt: skip
    assert loose.stats.accepted > 0 and loose.stats.target_rows < 4 * 12
    assert loose.stats.rounds == 12 and not loose.lossless
    assert torch.isfinite(loose.samples).all()


def test_forecast_gating_refuses_unknown_models():
    sp = _mixture_speculator()
    with pytest.raises(KeyError, match="unknown block split.*GaussianMixtureDenoiser"):
        sp.generate(batch_size=2, num_inference_steps=5, method="speca")


# ----------------------------------------------------------------------------------------------------------------
# Real diffusers classes: a UNet2DConditionModel with embedding conditions, a DDPMPipeline, images out.


def test_conditional_unet_and_pipeline_inputs():
    from diffusers import DDPMPipeline, UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=12,
                                norm_num_groups=4, attention_head_dim=4).eval()  # fmt: skip
    table = torch.randn(4, 3, 12)
    sp = DiffusionSpeculator((unet, scheduler("ddpm")), conditioner=lambda c: table[c], null_condition=torch.zeros(3, 12),
                             cfg_scale=2.0)  # fmt: skip
    out = sp.generate([0, 1, 2], num_inference_steps=10, lookahead=3, seed=0)
    assert out.samples.shape == (3, 3, 8, 8) and len(out.images) == 3 and out.images[0].size == (8, 8)
    assert out.stats.rounds <= 10
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    dit = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=3, num_layers=1, sample_size=8,
                                patch_size=2, num_embeds_ada_norm=5).eval()  # fmt: skip
    out = DiffusionSpeculator((dit, scheduler("ddpm")), conditioner=int, null_condition=4, cfg_scale=1.5).generate(
        [0, 3], num_inference_steps=8, lookahead=3, seed=0)  # fmt: skip
    assert out.samples.shape == (2, 3, 8, 8) and torch.isfinite(out.samples).all()
    pipe = DDPMPipeline(unet=tiny_unet(), scheduler=scheduler("ddpm"))
    out = DiffusionSpeculator(pipe).generate(batch_size=2, num_inference_steps=6, method="asd")
    assert out.samples.shape == (2, 3, 8, 8) and out.sampler == "ddpm"


def test_methods_registry_declares_losslessness():
    assert {"plain", "speculative", "asd", "paradigms", "speca"} <= set(DIFFUSION_METHODS.names())
    lossless = {name: DIFFUSION_METHODS.get(name).lossless for name in DIFFUSION_METHODS.names()}
    assert lossless["speculative"] and lossless["asd"] and not lossless["paradigms"] and not lossless["speca"]
    assert "reflection-coupling" in VERIFIERS.names() and "forecast-gating" in VERIFIERS.names()
