"""Sampled speculative output follows the target's law: the empirical joint of the first tokens matches the
exact joint (enumerated from the target) under a chi-square test, which a wrong residual fails."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy import stats

import tests.helpers.broken  # noqa: F401  (registers "test-broken-residual")
from mmspec import Drafter, EarlyExitDrafter, ModelDrafter, SpecConfig, SpeculativeEngine
from mmspec.sampling import SamplingParams, process_logits

V, NEW, ROWS, REPEATS = 4, 3, 8, 1000  # 8,000 samples of a 3-token joint over 64 cells


def tiny(seed, layers=2, noise_from=None, noise=0.0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0)  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        if noise_from is not None:  # a drafter close to the target: its weights plus noise
            model.load_state_dict(noise_from.state_dict())
            for prm in model.parameters():
                prm.add_(noise * torch.randn_like(prm))
        model.lm_head.weight.mul_(6.0)
    return model


PROMPT = torch.tensor([[1, 2, 3, 0, 1]])


def exact_joint(target, params: SamplingParams) -> torch.Tensor:
    """P(y_1..y_NEW | prompt) for every sequence, by enumeration: [V**NEW]."""
    seqs = torch.tensor(list(itertools.product(range(V), repeat=NEW)))  # [V^NEW, NEW]
    ids = torch.cat([PROMPT.expand(len(seqs), -1), seqs], 1)
    with torch.no_grad():
        probs = process_logits(target(ids).logits[:, PROMPT.shape[1] - 1 : -1], params)  # [S, NEW, V]
    return probs.gather(-1, seqs[..., None]).squeeze(-1).prod(-1).double()


def empirical(target, drafter, params, verifier=None, **cfg):
    config = SpecConfig(num_draft_tokens=2, max_new_tokens=NEW, temperature=params.temperature, top_k=params.top_k,
                        top_p=params.top_p, verifier=verifier, **cfg)  # fmt: skip
    engine = SpeculativeEngine(target, drafter if isinstance(drafter, Drafter) else ModelDrafter(drafter), config)
    g = torch.Generator().manual_seed(1234)
    counts = torch.zeros(V**NEW, dtype=torch.float64)
    weights = V ** torch.arange(NEW - 1, -1, -1)
    ids = PROMPT.expand(ROWS, -1).contiguous()
    for _ in range(REPEATS):
        new = engine.generate(ids, generator=g).new_tokens  # [ROWS, NEW]
        counts += torch.bincount((new * weights).sum(-1), minlength=V**NEW).double()
    return counts


def chi2_pvalue(counts, probs) -> float:
    expected = probs * counts.sum()
    big = expected >= 5  # pool the small cells into one
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    return float(stats.chisquare(obs[keep].numpy(), exp[keep].numpy() * obs[keep].sum().item() / exp[keep].sum().item()).pvalue)


@pytest.fixture(scope="module")
def models():
    target = tiny(0)
    return {"target": target, "close": tiny(1, 2, noise_from=target, noise=0.02), "far": tiny(7, 1)}


PARAMS = [SamplingParams(1.0), SamplingParams(0.8, top_k=3)]


@pytest.mark.parametrize("params", PARAMS, ids=repr)
@pytest.mark.parametrize("drafter", ["close"])
def test_speculative_sampling_matches_target(models, params, drafter):
    probs = exact_joint(models["target"], params)
    p = chi2_pvalue(empirical(models["target"], models[drafter], params), probs)
    assert p > 1e-3, f"p-value {p:.2e}: sampled output does not follow the target distribution"


def test_tree_sampling_matches_target(models):
    params = SamplingParams(1.0)
    probs = exact_joint(models["target"], params)
    p = chi2_pvalue(empirical(models["target"], models["close"], params, tree=(2, 1)), probs)
    assert p > 1e-3, f"p-value {p:.2e}: tree sampling does not follow the target distribution"


def test_broken_residual_is_caught(models):
    params = SamplingParams(1.0)
    probs = exact_joint(models["target"], params)
    p = chi2_pvalue(empirical(models["target"], models["far"], params, verifier="test-broken-residual"), probs)
    assert p < 1e-6, f"p-value {p:.2e}: the test failed to detect a wrong residual"


def test_eagle_and_shared_kv_early_exit_sampling_match_target(models):
    """Feature-injection drafts (an untrained EAGLE head) and early exit drafting in the target's own cache."""
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.drafting.eagle_head import EagleHead

    target = models["target"]
    params = SamplingParams(1.0)
    probs = exact_joint(target, params)
    torch.manual_seed(0)
    for drafter in (EagleDrafter(target, EagleHead.for_target(target).eval()), EarlyExitDrafter(target, 1, share_kv=True)):
        p = chi2_pvalue(empirical(target, drafter, params), probs)
        assert p > 1e-3, f"{drafter.name}: p-value {p:.2e}, sampled output does not follow the target distribution"


@pytest.mark.parametrize("drafter", ["close", "far"])
def test_independent_rows_sampling_matches_target(models, drafter):
    """Rows committing their own accepted lengths (rows="independent") keep every row's law exact."""
    params = SamplingParams(1.0)
    probs = exact_joint(models["target"], params)
    p = chi2_pvalue(empirical(models["target"], models[drafter], params, rows="independent"), probs)
    assert p > 1e-3, f"p-value {p:.2e}: sampled output does not follow the target distribution"
