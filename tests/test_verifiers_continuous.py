"""Continuous-state verifiers (METHODS.md §5): the continuous verifier contract (a mixin every continuous rule's
test class inherits), vectorised core == per-row reference loop, the laws of reflection coupling and density-ratio
acceptance (with deliberately broken variants that must fail the same tests), and forecast gating's schedule
and exact boundary decisions."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from scipy import integrate, stats

import tests.helpers.broken_continuous  # noqa: F401  (registers the test-broken-* verifiers)
from mmspec.verifiers import make_verifier
from mmspec.verifiers.continuous import density, forecast, reflection
from mmspec.verifiers.continuous import (
    ContinuousVerdict,
    ContinuousVerifier,
    DensityProposal,
    DensityScores,
    ForecastProposal,
    ForecastScores,
    GaussianDensity,
    GaussianMixtureDensity,
    GaussianProposal,
    GaussianScores,
    density_ratio,
    forecast_threshold,
)

B, L, D = 6, 4, 5
N_LAW = 100_000  # draws per distribution test
P_OK, P_BROKEN = 1e-3, 1e-6  # a correct rule must pass every test at P_OK; a broken one fail one at P_BROKEN


def _tensors(obj) -> list[torch.Tensor]:
    """Every tensor inside a contract (dataclasses, densities, dicts), depth first."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj):
        return [t for f in dataclasses.fields(obj) for t in _tensors(getattr(obj, f.name))]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _move(obj, device):
    """A copy of a contract (dataclasses, densities) with every tensor moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if dataclasses.is_dataclass(obj):
        return dataclasses.replace(obj, **{f.name: _move(getattr(obj, f.name), device) for f in dataclasses.fields(obj)})
    return obj


# ----------------------------------------------------------------------------------------------------------------
# Random rounds, one builder per contract.
# ----------------------------------------------------------------------------------------------------------------


def gaussian_round(seed, batch=B, device="cpu", dtype=torch.float32, steps=L, dim=D):
    """L drafted Gaussian steps with δ spread over ~[0, 2] so rows stop at different steps."""
    g = torch.Generator().manual_seed(seed)
    sigma = 0.2 + torch.rand(batch, steps, generator=g)  # [B, L]
    m_p = torch.randn(batch, steps, dim, generator=g)  # [B, L, D]
    xi = torch.randn(batch, steps, dim, generator=g)  # [B, L, D]
    scale = 2 * torch.rand(batch, steps, 1, generator=g) / math.sqrt(dim)
    m_q = m_p + sigma[..., None] * scale * torch.randn(batch, steps, dim, generator=g)  # [B, L, D]
    cast = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    return (GaussianProposal(cast(m_p + sigma[..., None] * xi), cast(m_p), cast(xi), cast(sigma)),
            GaussianScores(cast(m_q)))  # fmt: skip


def density_round(seed, batch=B, device="cpu", dtype=torch.float32, k=L, dim=3, bonus=True):
    """Gaussian drafts q, Gaussian-mixture targets p (with a bonus position), close enough to mix outcomes."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(batch, k + 1, dim, generator=g)
    q = GaussianDensity(mean[:, :k].to(device, dtype), (0.6 + torch.rand(batch, k, generator=g)).to(device, dtype))
    means = mean[:, :, None] + 0.7 * torch.randn(batch, k + 1, 3, dim, generator=g)  # [B, K+1, M, D]
    weights = 0.2 + torch.rand(batch, k + 1, 3, generator=g)  # [B, K+1, M]
    stds = 0.5 + torch.rand(batch, k + 1, 3, generator=g)  # [B, K+1, M]
    p = GaussianMixtureDensity(weights.to(device, dtype), means.to(device, dtype), stds.to(device, dtype))
    if not bonus:
        p = p.positions(slice(0, k))
    gen = torch.Generator(device=device).manual_seed(seed)
    return DensityProposal(q.sample(gen), q), DensityScores(p)


def forecast_round(seed, batch=B, device="cpu", dtype=torch.float32, steps=L, shape=(3, 4)):
    """Check tensors and forecasts whose relative error grows with the step, per-row progress."""
    g = torch.Generator().manual_seed(seed)
    check = torch.randn(batch, steps, *shape, generator=g)
    scale = 0.3 * torch.rand(batch, 1, generator=g) * torch.arange(1, steps + 1) / steps  # [B, L]
    forecast = check + scale.view(batch, steps, 1, 1) * torch.randn(batch, steps, *shape, generator=g)
    progress = torch.rand(batch, generator=g)
    return (ForecastProposal(forecast.to(device, dtype), progress.to(device)),
            ForecastScores(check.to(device, dtype)))  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# The contract.
# ----------------------------------------------------------------------------------------------------------------


class ContinuousVerifierContract:
    """Mixin: subclasses set ``name`` (a registered continuous verifier), ``make_round`` and ``state_shape``."""

    name: str
    params: dict = {}
    deterministic = False  # no randomness: rows are independent even through verify()
    state_shape: tuple = (D,)

    def make(self):
        return make_verifier(self.name, **self.params)

    def make_round(self, seed, batch=B, device="cpu", dtype=torch.float32):
        raise NotImplementedError  # abstract: each test class builds its rule's inputs

    def test_declares_itself(self):
        v = self.make()
        assert isinstance(v, ContinuousVerifier)
        assert isinstance(type(v).lossless, bool)
        assert type(v).needs_probs is False
        assert type(v).bounds and "\n" not in type(v).bounds and type(v).paper

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
    def test_verdict_types_shapes_and_dtypes(self, dtype):
        proposal, scores = self.make_round(0, dtype=dtype)
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        assert isinstance(verdict, ContinuousVerdict) and isinstance(verdict.extras, dict)
        assert verdict.num_accepted.shape == (B,) and verdict.num_accepted.dtype == torch.int64
        assert bool(((verdict.num_accepted >= 0) & (verdict.num_accepted <= L)).all())
        assert verdict.next_states.shape == (B, *self.state_shape) and verdict.next_states.dtype == dtype
        assert bool(torch.isfinite(verdict.next_states.float()).all())
        assert verdict.extras["new_state"].shape == (B,) and verdict.extras["new_state"].dtype == torch.bool

    def test_seeded_determinism(self):
        proposal, scores = self.make_round(1)
        a = self.make().verify(proposal, scores, torch.Generator().manual_seed(7))
        b = self.make().verify(proposal, scores, torch.Generator().manual_seed(7))
        assert torch.equal(a.num_accepted, b.num_accepted) and torch.equal(a.next_states, b.next_states)
        assert a.extras.keys() == b.extras.keys()
        assert all(torch.equal(a.extras[key], b.extras[key]) for key in a.extras)

    def test_generator_is_optional(self):
        proposal, scores = self.make_round(1)
        assert self.make().verify(proposal, scores).num_accepted.shape == (B,)

    def test_inputs_not_mutated(self):
        proposal, scores = self.make_round(2)
        before = [t.clone() for t in _tensors((proposal, scores))]
        self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        after = _tensors((proposal, scores))
        assert len(before) == len(after) and all(torch.equal(x, y) for x, y in zip(before, after))

    def test_batch_rows_independent(self):
        """Given the same randomness every row's verdict is that row's alone (always: the core is batched over
        rows); for deterministic rules verify() itself is row-independent."""
        proposal, scores = self.make_round(3)
        v = self.make()
        randomness = v.draw(proposal, scores, torch.Generator().manual_seed(0))
        whole = v.core(proposal, scores, **randomness)
        for row in range(B):
            idx = slice(row, row + 1)
            one = v.core(proposal.rows(idx), scores.rows(idx), **{k: t[idx] for k, t in randomness.items()})
            assert int(one.num_accepted) == int(whole.num_accepted[row])
            torch.testing.assert_close(one.next_states[0], whole.next_states[row], rtol=1e-6, atol=1e-6)
            if self.deterministic:
                alone = v.verify(proposal.rows(idx), scores.rows(idx))
                assert int(alone.num_accepted) == int(whole.num_accepted[row])
                assert torch.equal(alone.next_states[0], whole.next_states[row])

    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_vectorised_matches_reference(self, seed):
        proposal, scores = self.make_round(10 + seed, batch=16)
        v = self.make()
        randomness = v.draw(proposal, scores, torch.Generator().manual_seed(seed))
        fast, slow = v.core(proposal, scores, **randomness), v.reference(proposal, scores, **randomness)
        assert torch.equal(fast.num_accepted, slow.num_accepted)
        torch.testing.assert_close(fast.next_states, slow.next_states, rtol=1e-5, atol=1e-5)
        assert len(set(fast.num_accepted.tolist())) >= 3, "inputs too easy: rows should stop at different steps"

    def test_bench_case_matches_reference(self):
        (case,) = [c for m in (reflection, density, forecast) for c in m.bench_cases(batch=3, k=4, dim=64, seed=1)
                   if c.name == self.name]
        fast, slow = case.vectorised(), case.reference()
        assert torch.equal(fast.num_accepted, slow.num_accepted)
        torch.testing.assert_close(fast.next_states, slow.next_states, rtol=1e-5, atol=1e-5)

    def test_rejects_mismatched_rounds(self):
        proposal, _ = self.make_round(4)
        _, other = self.make_round(4, batch=B - 1)
        with pytest.raises(ValueError, match="expected"):
            self.make().verify(proposal, other)
        with pytest.raises(TypeError, match="expected"):
            self.make().verify(other, proposal)

    @pytest.mark.gpu
    def test_runs_on_cuda(self):
        if not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        dev = torch.device("cuda")
        proposal, scores = self.make_round(5, device=dev)
        v = self.make()
        verdict = v.verify(proposal, scores, torch.Generator(device=dev).manual_seed(0))
        assert verdict.num_accepted.device.type == "cuda" and verdict.next_states.device.type == "cuda"
        # same randomness on both devices -> same verdict
        randomness = v.draw(proposal, scores, torch.Generator(device=dev).manual_seed(1))
        on_gpu = v.core(proposal, scores, **randomness)
        on_cpu = v.core(_move(proposal, "cpu"), _move(scores, "cpu"), **{k: t.cpu() for k, t in randomness.items()})
        assert torch.equal(on_gpu.num_accepted.cpu(), on_cpu.num_accepted)
        torch.testing.assert_close(on_gpu.next_states.cpu(), on_cpu.next_states, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------------------------
# Reflection maximal coupling.
# ----------------------------------------------------------------------------------------------------------------


def rmc_single_step(name, seed=0, dim=3, delta=1.2, sigma=0.7, n=N_LAW):
    """One Gaussian step drawn N times from N(m_p, σ²I) and verified against N(m_q, σ²I), m_q = m_p + σ·delta·e
    (a negative delta puts the target on the other side).

    Returns KS p-values of the output state's standardised projections onto e and onto a direction orthogonal
    to e, of its squared norm vs χ²_D, and the acceptance rate with its exact value 2Φ(−δ/2)."""
    g = torch.Generator().manual_seed(seed)
    m_p = torch.linspace(-0.5, 0.5, dim, dtype=torch.float64)  # [D]
    e = torch.tensor([1.0, 2.0, -1.0] + [0.5] * max(dim - 3, 0), dtype=torch.float64)[:dim]
    e = e / e.norm()  # [D] unit direction from m_p to m_q
    m_q = m_p + sigma * delta * e
    xi = torch.randn(n, 1, dim, dtype=torch.float64, generator=g)  # [N, 1, D]
    proposal = GaussianProposal(m_p + sigma * xi, m_p.expand(n, 1, dim), xi, torch.full((n, 1), sigma, dtype=torch.float64))
    verdict = make_verifier(name).verify(proposal, GaussianScores(m_q.expand(n, 1, dim)), g)
    z = ((verdict.next_states - m_q) / sigma).numpy()  # [N, D] should be N(0, I)
    out = {
        "accept_rate": float(verdict.num_accepted.double().mean()),
        "accept_exact": 2 * stats.norm.cdf(-abs(delta) / 2),
        "p_e": stats.kstest(z @ e.numpy(), "norm").pvalue,
    }
    if dim > 1:
        ortho = torch.zeros(dim, dtype=torch.float64)
        ortho[0], ortho[1] = -e[1], e[0]  # e⊥ in the plane of the first two axes
        out["p_ortho"] = stats.kstest(z @ (ortho / ortho.norm()).numpy(), "norm").pvalue
        out["p_norm2"] = stats.kstest((z * z).sum(1), stats.chi2(dim).cdf).pvalue
    return out


def rmc_two_step_chain(name, seed=0, n=N_LAW):
    """A 2-step linear-drift chain: target m_q(y) = a·y + b, draft m_p(y) = a'·y + b' (a frozen drift), σ per step.

    Draft both steps, score the target means at the drafted parents, verify with L = 2; rows that stopped at
    step 1 take the second step from the target directly. The state after two steps must be
    N(a(a·x0 + b) + b, (a²σ1² + σ2²) I) and the committed first step N(a·x0 + b, σ1² I). Returns KS p-values."""
    g = torch.Generator().manual_seed(seed)
    a, b, a_d, b_d, s1, s2 = 0.8, 0.5, 0.6, 0.1, 0.6, 0.4
    x0 = torch.tensor([0.5, -1.0], dtype=torch.float64)
    xi = torch.randn(n, 2, 2, dtype=torch.float64, generator=g)  # [N, L, D]
    y1 = a_d * x0 + b_d + s1 * xi[:, 0]  # [N, D]
    y2 = a_d * y1 + b_d + s2 * xi[:, 1]
    means_p = torch.stack([(a_d * x0 + b_d).expand(n, 2), a_d * y1 + b_d], 1)  # [N, L, D]
    means_q = torch.stack([(a * x0 + b).expand(n, 2), a * y1 + b], 1)  # target means at the drafted parents
    sigma = torch.tensor([s1, s2], dtype=torch.float64).expand(n, 2)
    proposal = GaussianProposal(torch.stack([y1, y2], 1), means_p, xi, sigma)
    verdict = make_verifier(name).verify(proposal, GaussianScores(means_q), g)
    k, nxt = verdict.num_accepted, verdict.next_states
    state1 = torch.where((k >= 1)[:, None], y1, nxt)
    fresh = a * nxt + b + s2 * torch.randn(n, 2, dtype=torch.float64, generator=g)  # plain target step after a stop at 1
    state2 = torch.where((k >= 1)[:, None], nxt, fresh)
    mean1, mean2, sd2 = a * x0 + b, a * (a * x0 + b) + b, math.sqrt(a * a * s1 * s1 + s2 * s2)
    z1, z2 = ((state1 - mean1) / s1).numpy(), ((state2 - mean2) / sd2).numpy()
    return {f"p_step{i}_dim{j}": stats.kstest(z[:, j], "norm").pvalue for i, z in ((1, z1), (2, z2)) for j in range(2)}


class TestReflectionCoupling(ContinuousVerifierContract):
    name = "reflection-coupling"

    def make_round(self, seed, batch=B, device="cpu", dtype=torch.float32):
        return gaussian_round(seed, batch, device, dtype)

    @pytest.mark.slow
    @pytest.mark.parametrize("dim,delta", [(3, 1.2), (1, -0.9), (8, 0.3)])
    def test_output_law_is_target(self, dim, delta):
        r = rmc_single_step(self.name, dim=dim, delta=delta, sigma=0.7)
        pvalues = {k: v for k, v in r.items() if k.startswith("p_")}
        assert min(pvalues.values()) > P_OK, r
        tol = 4.5 * math.sqrt(r["accept_exact"] * (1 - r["accept_exact"]) / N_LAW)
        assert abs(r["accept_rate"] - r["accept_exact"]) < tol, r

    @pytest.mark.slow
    def test_chain_law_is_target(self):
        r = rmc_two_step_chain(self.name)
        assert min(r.values()) > P_OK, r

    @pytest.mark.slow
    @pytest.mark.parametrize("broken", ["test-broken-rmc-unreflected", "test-broken-rmc-fresh"])
    def test_broken_variants_fail(self, broken):
        r = rmc_single_step(broken, dim=3, delta=1.2, sigma=0.7)
        assert min(v for k, v in r.items() if k.startswith("p_")) < P_BROKEN, r

    def test_zero_and_tiny_delta_accept(self):
        proposal, _ = self.make_round(6, dtype=torch.float64)
        for shift in (0.0, 1e-14):
            scores = GaussianScores(proposal.means + shift)
            verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
            assert bool((verdict.num_accepted == L).all())
            assert torch.equal(verdict.next_states, proposal.states[:, -1])
            assert not bool(verdict.extras["new_state"].any())
            assert bool(torch.isfinite(verdict.extras["accept_prob"]).all())

    def test_rejected_state_is_the_reflection(self):
        """A far target rejects at step 0: X = m_q + σ(ξ − 2(e·ξ)e), i.e. ξ mirrored across the plane ⟂ e."""
        proposal, _ = self.make_round(7, dtype=torch.float64)
        scores = GaussianScores(proposal.means + 50.0)  # δ huge: certain rejection
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))
        assert bool((verdict.num_accepted == 0).all()) and bool(verdict.extras["new_state"].all())
        e = torch.ones(D, dtype=torch.float64) / math.sqrt(D)
        xi = proposal.noise[:, 0]
        expected = scores.means[:, 0] + proposal.std[:, :1] * (xi - 2 * (xi @ e)[:, None] * e)
        torch.testing.assert_close(verdict.next_states, expected)

    def test_refuses_deterministic_steps(self):
        proposal, scores = self.make_round(8)
        std = proposal.std.clone()
        std[2, 1] = 0.0
        with pytest.raises(ValueError, match="σ > 0"):
            self.make().verify(dataclasses.replace(proposal, std=std), scores)

    def test_contract_shape_errors(self):
        proposal, _ = self.make_round(9)
        with pytest.raises(ValueError, match=r"GaussianProposal.std: expected shape \[B, L\]"):
            GaussianProposal(proposal.states, proposal.means, proposal.noise, proposal.std[:, :1])
        with pytest.raises(ValueError, match="L >= 1"):
            GaussianProposal(proposal.states[:, :0], proposal.means[:, :0], proposal.noise[:, :0], proposal.std[:, :0])

    def test_bad_parameters(self):
        with pytest.raises(ValueError, match="eps"):
            make_verifier(self.name, eps=-1.0)
        with pytest.raises(TypeError, match="eps"):
            make_verifier(self.name, eps="small")


# ----------------------------------------------------------------------------------------------------------------
# Density-ratio acceptance.
# ----------------------------------------------------------------------------------------------------------------

MIX_W, MIX_MU, MIX_SD = [0.3, 0.7], [-2.0, 1.5], [0.6, 1.0]
DRAFT_MU, DRAFT_SD = 0.3, 1.6


def mixture_cdf(x):
    return sum(w * stats.norm.cdf(x, m, s) for w, m, s in zip(MIX_W, MIX_MU, MIX_SD))


def mixture_pdf(x):
    return sum(w * stats.norm.pdf(x, m, s) for w, m, s in zip(MIX_W, MIX_MU, MIX_SD))


def density_ratio_law(name, seed=0, n=N_LAW, k=2):
    """K = 2 i.i.d. positions with a bonus: draft q = N(0.3, 1.6²), target p = a 1-D two-component mixture.

    Every committed position must be ~p: position 1 over all rows, position 2 over rows that accepted x_1,
    the bonus over rows that accepted both. Returns KS p-values and the position-1 acceptance rate with its
    exact value ∫ min(p, q)."""
    g = torch.Generator().manual_seed(seed)
    f64 = dict(dtype=torch.float64)
    q = GaussianDensity(torch.full((n, k, 1), DRAFT_MU, **f64), torch.full((n, k), DRAFT_SD, **f64))
    p = GaussianMixtureDensity(torch.tensor(MIX_W, **f64).expand(n, k + 1, 2),
                               torch.tensor(MIX_MU, **f64).view(1, 1, 2, 1).expand(n, k + 1, 2, 1),
                               torch.tensor(MIX_SD, **f64).expand(n, k + 1, 2))  # fmt: skip
    x = q.sample(g)  # [N, K, 1]
    verdict = make_verifier(name).verify(DensityProposal(x, q), DensityScores(p), g)
    acc, nxt = verdict.num_accepted, verdict.next_states[:, 0]
    pos1 = torch.where(acc >= 1, x[:, 0, 0], nxt)
    pos2 = torch.where(acc >= 2, x[:, 1, 0], nxt)[acc >= 1]
    bonus = nxt[acc == 2]
    overlap = integrate.quad(lambda t: min(mixture_pdf(t), stats.norm.pdf(t, DRAFT_MU, DRAFT_SD)), -12, 12, limit=200)[0]
    return {
        "accept_rate": float((acc >= 1).double().mean()),
        "accept_exact": overlap,
        "exhausted": int(verdict.extras["residual_exhausted"].sum()),
        "p_pos1": stats.kstest(pos1.numpy(), mixture_cdf).pvalue,
        "p_pos2": stats.kstest(pos2.numpy(), mixture_cdf).pvalue,
        "p_bonus": stats.kstest(bonus.numpy(), mixture_cdf).pvalue,
    }


class TestDensityRatio(ContinuousVerifierContract):
    name = "density-ratio"
    state_shape = (3,)

    def make_round(self, seed, batch=B, device="cpu", dtype=torch.float32):
        return density_round(seed, batch, device, dtype)

    @pytest.mark.slow
    def test_output_law_is_target(self):
        r = density_ratio_law(self.name)
        assert min(v for k, v in r.items() if k.startswith("p_")) > P_OK, r
        tol = 4.5 * math.sqrt(r["accept_exact"] * (1 - r["accept_exact"]) / N_LAW)
        assert abs(r["accept_rate"] - r["accept_exact"]) < tol, r
        assert r["exhausted"] == 0, r

    @pytest.mark.slow
    def test_broken_variant_fails(self):
        r = density_ratio_law("test-broken-density-from-p")
        assert r["p_pos1"] < P_BROKEN, r

    def test_densities_match_scipy(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
        mean = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
        std = 0.5 + torch.rand(2, 3, 4, generator=g, dtype=torch.float64)
        want = stats.norm.logpdf(x.numpy(), mean.numpy(), std.numpy()).sum(-1)
        torch.testing.assert_close(GaussianDensity(mean, std).log_prob(x), torch.as_tensor(want))
        iso = GaussianDensity(mean, std[..., 0])  # [B, K] isotropic
        want = stats.norm.logpdf(x.numpy(), mean.numpy(), std[..., :1].numpy()).sum(-1)
        torch.testing.assert_close(iso.log_prob(x[None].expand(5, -1, -1, -1)), torch.as_tensor(want)[None].expand(5, -1, -1))
        w = torch.tensor(MIX_W, dtype=torch.float64).expand(1, 1, 2) * 3  # unnormalised on purpose
        mix = GaussianMixtureDensity(w, torch.tensor(MIX_MU, dtype=torch.float64).view(1, 1, 2, 1),
                                     torch.tensor([MIX_SD], dtype=torch.float64)[None])  # fmt: skip
        pts = torch.linspace(-5, 5, 11, dtype=torch.float64).view(11, 1, 1, 1)
        torch.testing.assert_close(mix.log_prob(pts)[:, 0, 0], torch.as_tensor(mixture_pdf(pts.flatten().numpy())).log())

    @pytest.mark.slow
    def test_mixture_sampler_law(self):
        n = N_LAW
        mix = GaussianMixtureDensity(torch.tensor(MIX_W).expand(n, 1, 2),
                                     torch.tensor(MIX_MU).view(1, 1, 2, 1).expand(n, 1, 2, 1),
                                     torch.tensor(MIX_SD).expand(n, 1, 2))  # fmt: skip
        draws = mix.sample(torch.Generator().manual_seed(0))  # [N, 1, 1]
        assert draws.shape == (n, 1, 1) and draws.dtype == torch.float32
        assert stats.kstest(draws.flatten().double().numpy(), mixture_cdf).pvalue > P_OK
        assert mix.sample(torch.Generator().manual_seed(0), (2, 3)).shape == (2, 3, n, 1, 1)

    def test_without_bonus_all_accepted_keeps_last_draft(self):
        proposal, _ = density_round(11, bonus=False)
        q = proposal.density  # p := q as a one-component mixture
        scores = DensityScores(GaussianMixtureDensity(torch.ones(B, L, 1), q.mean[:, :, None], q.std[..., 0][..., None]))
        verdict = self.make().verify(proposal, scores, torch.Generator().manual_seed(0))  # p == q: accept all
        assert bool((verdict.num_accepted == L).all()) and not bool(verdict.extras["new_state"].any())
        assert torch.equal(verdict.next_states, proposal.samples[:, -1])

    def test_residual_selection_and_fallback(self):
        """q = N(0, 0.1²) and p = N(5, 1) at x = 0: the draft is rejected; a candidate is kept with probability
        max(0, 1 − q/p): ~0 near 0, ~1 near 5. Row 0 keeps candidate 1; row 1 keeps none and falls back to its
        last candidate (flagged)."""
        f64 = dict(dtype=torch.float64)
        q = GaussianDensity(torch.zeros(2, 1, 1, **f64), 0.1)
        p = GaussianDensity(torch.full((2, 1, 1), 5.0, **f64), 1.0)
        proposal, scores = DensityProposal(torch.zeros(2, 1, 1, **f64), q), DensityScores(p)
        candidates = torch.tensor([[0.0, 5.0, 0.01], [0.0, 0.01, 0.02]], **f64)[..., None]  # [B, N, D]
        verdict = density_ratio(proposal, scores, torch.full((2, 1), 0.5, **f64), candidates, torch.full((2, 3), 0.5, **f64))
        assert verdict.num_accepted.tolist() == [0, 0]
        assert verdict.next_states.flatten().tolist() == [5.0, 0.02]
        assert verdict.extras["residual_exhausted"].tolist() == [False, True]
        assert verdict.extras["residual_draws"].tolist() == [2, 3]

    def test_exhaustion_flagged_or_strict_error(self):
        """p ≈ q (TV ≈ 0.02): one residual candidate per row is rarely kept; with strict=True that is an error."""
        n = 20_000
        q = GaussianDensity(torch.full((n, 1, 1), 0.05), 1.0)
        p = GaussianDensity(torch.zeros(n, 1, 1), 1.0)
        proposal, scores = DensityProposal(q.sample(torch.Generator().manual_seed(0)), q), DensityScores(p)
        lenient = make_verifier(self.name, max_rounds=1, candidates_per_round=1)
        verdict = lenient.verify(proposal, scores, torch.Generator().manual_seed(1))
        exhausted = verdict.extras["residual_exhausted"]
        assert 0 < int(exhausted.sum()) <= int((verdict.num_accepted == 0).sum())
        assert bool((verdict.extras["residual_draws"][exhausted] == 1).all())
        with pytest.raises(RuntimeError, match="residual rejection sampling"):
            strict = make_verifier(self.name, max_rounds=1, candidates_per_round=1, strict=True)
            strict.verify(proposal, scores, torch.Generator().manual_seed(1))

    def test_invalid_densities_are_clear_errors(self):
        proposal, scores = self.make_round(12)
        bad = dataclasses.replace(scores.density, stds=-scores.density.stds)
        with pytest.raises(ValueError, match="DensityScores.density.stds"):
            self.make().verify(proposal, DensityScores(bad))
        with pytest.raises(ValueError, match="DensityProposal.density"):
            DensityProposal(proposal.samples, proposal.density.positions(slice(0, 2)))
        with pytest.raises(ValueError, match="GaussianDensity.std"):
            GaussianDensity(torch.zeros(2, 3, 4), torch.ones(2, 3, 2))

    def test_bad_parameters(self):
        with pytest.raises(ValueError, match="max_rounds"):
            make_verifier(self.name, max_rounds=0)
        with pytest.raises(TypeError, match="candidates_per_round"):
            make_verifier(self.name, candidates_per_round=1.5)
        with pytest.raises(TypeError, match="strict"):
            make_verifier(self.name, strict="yes")


# ----------------------------------------------------------------------------------------------------------------
# Forecast gating.
# ----------------------------------------------------------------------------------------------------------------


def _gate(verifier, forecast, check, progress):
    """One-step rounds from plain lists: forecast/check [B][F], progress [B]."""
    f = torch.tensor(forecast, dtype=torch.float64)[:, None]  # [B, 1, F]
    c = torch.tensor(check, dtype=torch.float64)[:, None]
    return verifier.verify(ForecastProposal(f, torch.tensor(progress, dtype=torch.float64)), ForecastScores(c))


class TestForecastGating(ContinuousVerifierContract):
    name = "forecast-gating"
    params = {"tau0": 0.2, "beta": 0.25, "floor": 0.02}
    deterministic = True
    state_shape = (3, 4)

    def make_round(self, seed, batch=B, device="cpu", dtype=torch.float32):
        return forecast_round(seed, batch, device, dtype)

    def test_declares_lossy(self):
        assert type(self.make()).lossless is False

    def test_threshold_schedule(self):
        v = make_verifier(self.name, tau0=0.2, beta=0.25, floor=0.06)
        progress = torch.linspace(0, 1, 101, dtype=torch.float64)
        tau = v.threshold(progress)
        want = torch.tensor([max(0.2 * 0.25 ** float(p), 0.06) for p in progress], dtype=torch.float64)
        torch.testing.assert_close(tau, want, rtol=1e-12, atol=0)
        assert float(tau[0]) == 0.2 and float(tau[-1]) == 0.06  # τ0 at the start, the floor binds at the end
        assert bool((tau[1:] <= tau[:-1]).all()) and bool((tau >= 0.06).all())
        free = forecast_threshold(progress, 0.2, 0.25, 0.0)  # no floor: strictly decaying to τ0·β
        assert bool((free[1:] < free[:-1]).all()) and math.isclose(float(free[-1]), 0.05)
        assert bool((forecast_threshold(progress, 0.2, 1.0, 0.0) == 0.2).all())  # β = 1: constant

    def test_exact_boundaries(self):
        """Accept iff ||f − c||₁/||c||₁ < τ (strict): an error exactly at τ is rejected."""
        v = make_verifier(self.name, tau0=0.25, beta=0.25, floor=0.0)
        c = [[2.0, 2.0]] * 4  # ||c||₁ = 4
        verdict = _gate(v, [[3.0, 2.0], [2.999, 2.0], [3.0, 2.0], [2.999, 2.0]], c, [0.0, 0.0, 0.5, 0.5])
        # τ(0) = 0.25: err 0.25 rejected, 0.24975 accepted; τ(0.5) = 0.25·0.5 = 0.125 rejects both
        assert verdict.num_accepted.tolist() == [0, 1, 0, 0]
        torch.testing.assert_close(verdict.extras["tau"][:, 0], torch.tensor([0.25, 0.25, 0.125, 0.125], dtype=torch.float64))
        floor = make_verifier(self.name, tau0=0.5, beta=0.0625, floor=0.125)  # τ(0.75) = max(0.0625, 0.125)
        verdict = _gate(floor, [[5.0, 4.0], [4.99, 4.0], [4.0, 4.0]], [[4.0, 4.0]] * 3, [0.75, 0.75, 1.0])
        assert verdict.num_accepted.tolist() == [0, 1, 1]
        assert verdict.extras["tau"][:, 0].tolist() == [0.125, 0.125, 0.125]

    def test_decay_flips_decisions(self):
        v = make_verifier(self.name, tau0=0.5, beta=0.25, floor=0.0)
        verdict = _gate(v, [[3.0, 2.0]] * 3, [[2.0, 2.0]] * 3, [0.0, 0.5, 1.0])  # err 0.25 vs τ = 0.5, 0.25, 0.125
        assert verdict.num_accepted.tolist() == [1, 0, 0]

    def test_prefix_and_next_states(self):
        check = torch.ones(2, 3, 4, dtype=torch.float64)
        forecast = check.clone()
        forecast[0, 1] += 0.5  # row 0: step 1 fails, step 2 would pass: accept the prefix of 1
        forecast[1, 0] += 0.5  # row 1: nothing accepted
        progress = torch.tensor([[0.0, 0.1, 0.2], [0.0, 0.1, 0.2]], dtype=torch.float64)  # per-step progress
        verdict = self.make().verify(ForecastProposal(forecast, progress), ForecastScores(check))
        assert verdict.num_accepted.tolist() == [1, 0]
        assert verdict.extras["fallback"].tolist() == [True, True]
        assert torch.equal(verdict.next_states[0], forecast[0, 0]) and torch.equal(verdict.next_states[1], check[1, 0])
        all_good = self.make().verify(ForecastProposal(check + 1e-3, progress), ForecastScores(check))
        assert all_good.num_accepted.tolist() == [3, 3] and not bool(all_good.extras["fallback"].any())

    def test_zero_check(self):
        v = self.make()
        verdict = _gate(v, [[0.0, 0.0], [1e-9, 0.0]], [[0.0, 0.0], [0.0, 0.0]], [0.0, 0.0])  # 0/0 -> 0, x/0 -> inf
        assert verdict.num_accepted.tolist() == [1, 0]

    def test_progress_out_of_range(self):
        proposal, scores = self.make_round(13)
        with pytest.raises(ValueError, match=r"progress: expected values in \[0, 1\]"):
            self.make().verify(dataclasses.replace(proposal, progress=proposal.progress + 1.5), scores)

    @pytest.mark.parametrize("params,arg", [({"tau0": 0.0}, "tau0"), ({"beta": 1.5}, "beta"), ({"beta": 0.0}, "beta"),
                                            ({"floor": 0.5, "tau0": 0.2}, "floor"), ({"floor": -0.1}, "floor")])  # fmt: skip
    def test_bad_parameters(self, params, arg):
        with pytest.raises(ValueError, match=arg):
            make_verifier(self.name, **params)
