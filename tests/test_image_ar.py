"""Image-AR adapter: CFG wiring, exact output length, greedy identity and the sampled law of every lossless method
through the shared loops (tiny Hugging Face Llama + diffusers VQModel built here, never downloaded)."""

from __future__ import annotations

import itertools

import pytest
import torch
from diffusers import VQModel
from transformers import LlamaConfig, LlamaForCausalLM

import tests.helpers.broken_jacobi  # noqa: F401  (registers "test-broken-mc-sjd-stale-q")
from mmspec import JacobiDrafter, SpecConfig, SpeculativeEngine
from mmspec.modalities.image_ar import (IMAGE_AR_METHODS, ClassifierFreeGuidance, ImageARSpeculator, codes_to_images,
                                        images_to_codes)  # fmt: skip
from mmspec.runner import ModelRunner
from mmspec.sampling import SamplingParams, process_logits
from tests.test_verifiers_jacobi import chi2_pvalue as counts_pvalue

CODES = 4  # codebook entries = image-token vocabulary
COND = (4, 5)  # two condition tokens
NULL = 6  # the null condition
PREFIX = 2


def tiny_lm(seed: int, layers: int = 2, hidden: int = 32) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=7, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64, pad_token_id=NULL,
                      bos_token_id=None, eos_token_id=None)  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper than the default init: distributions that are neither uniform nor one-hot
        model.lm_head.weight.mul_(40)
    return model


def tiny_vq(grid: int) -> VQModel:
    torch.manual_seed(0)
    return VQModel(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                   up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 8), layers_per_block=1,
                   latent_channels=4, num_vq_embeddings=CODES, vq_embed_dim=4, norm_num_groups=4,
                   sample_size=2 * grid).eval()  # fmt: skip


def speculator(grid=(3, 3), cfg_scale=2.0) -> ImageARSpeculator:
    return ImageARSpeculator(tiny_lm(0), tiny_vq(grid[0]), drafter=tiny_lm(1, layers=1), null_prompt=[NULL] * PREFIX,
                             grid=grid, conditioner=lambda c: [COND[c], COND[1 - c]], cfg_scale=cfg_scale, lantern_k=2)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Classifier-free guidance


def test_cfg_logits_are_combined_from_cond_and_null_passes():
    model, s = tiny_lm(0), 2.5
    cond = torch.tensor([[4, 5], [5, 4]])
    codes = torch.tensor([[1, 2, 3], [0, 0, 2]])
    runner = ModelRunner(ClassifierFreeGuidance(model, [NULL, NULL], s), CODES)
    first = runner.prefill(cond)  # [B, V]
    block = runner.extend(codes)  # [B, 3, V]: the same drafts fed to both halves
    with torch.no_grad():
        c = model(torch.cat([cond, codes], 1)).logits[:, 1:, :CODES]  # [B, 4, V] at the last prefix token and codes
        u = model(torch.cat([torch.full_like(cond, NULL), codes], 1)).logits[:, 1:, :CODES]
    expected = u + s * (c - u)
    torch.testing.assert_close(first, expected[:, 0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(block, expected[:, 1:], atol=1e-4, rtol=1e-4)
    assert runner.cache.layers[0].keys.shape[0] == 4  # the cache holds both halves


def test_cfg_prompt_must_be_the_condition_prefix():
    runner = ModelRunner(ClassifierFreeGuidance(tiny_lm(0), [NULL, NULL], 2.0), CODES)
    with pytest.raises(ValueError, match="condition prefix of 2 tokens"):
        runner.prefill(torch.tensor([[4, 5, 1]]))


def exact_joint(model, prefix, length, scale, sampling) -> torch.Tensor:
    """P(codes) [CODES**length] of guided AR sampling, by enumeration (guidance on logits, then sampling params)."""
    seqs = torch.tensor(list(itertools.product(range(CODES), repeat=length)))  # [N, T]
    n = len(seqs)
    with torch.no_grad():
        c = model(torch.cat([prefix.expand(n, -1), seqs], 1)).logits[:, PREFIX - 1 : -1, :CODES]
        u = model(torch.cat([torch.full((n, PREFIX), NULL), seqs], 1)).logits[:, PREFIX - 1 : -1, :CODES]
    p = process_logits(u + scale * (c - u), sampling)  # [N, T, V]
    return p.gather(-1, seqs[..., None]).squeeze(-1).double().prod(-1)


def chi2_pvalue(codes: torch.Tensor, joint: torch.Tensor) -> float:
    """Pearson chi-square of sampled code grids [N, T] against the exact joint over all CODES**T grids."""
    length = codes.shape[1]
    cells = (codes * CODES ** torch.arange(length - 1, -1, -1)).sum(-1)
    return counts_pvalue(torch.bincount(cells, minlength=CODES**length).double(), joint)


ROWS = 24_000  # sampled images per law test (one batched call)
SAMPLING = SamplingParams(temperature=0.9, top_k=3)  # exercises guidance -> temperature -> top-k order


def law_pvalue(method: str, grid=(2, 2), rows_per_call: int = ROWS, **kw) -> tuple[float, float]:
    """Sample ROWS images in calls of ``rows_per_call`` rows -> (chi-square p vs the exact joint, step compression)."""
    spec = speculator(grid=grid, cfg_scale=2.0)
    prefix = torch.tensor([[COND[0], COND[1]]]).expand(rows_per_call, -1).contiguous()
    codes, tokens, forwards = [], 0, 0
    for call in range(ROWS // rows_per_call):
        out = spec.generate(prefix, method, temperature=SAMPLING.temperature, top_k=SAMPLING.top_k, seed=11 + call,
                            decode=False, **kw)  # fmt: skip
        codes.append(out.codes)
        tokens += out.codes.numel()
        forwards += out.codes.numel() / out.stats.compression
    joint = exact_joint(spec.target, prefix[:1], grid[0] * grid[1], 2.0, SAMPLING)
    return chi2_pvalue(torch.cat(codes), joint), tokens / forwards


LAW_CASES = {
    "plain": ("plain", {}),
    "sjd": ("sjd", {"window": 2}),
    "sjd-repeat": ("sjd", {"window": 3, "init": "repeat"}),
    "sjd-reuse": ("sjd", {"window": 2, "reuse": 0.3}),
    "mc-sjd": ("mc-sjd", {"window": 2}),
    "gumbel-sjd": ("gumbel-sjd", {"window": 2}),
    "lantern-jacobi-delta0": ("lantern-jacobi", {"window": 2, "delta": 0.0}),
    "gsd-group1": ("gsd", {"window": 2, "ranks": 0}),
    "speculative": ("speculative", {"num_draft_tokens": 2}),
    "lantern-delta0": ("lantern", {"num_draft_tokens": 2, "delta": 0.0}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", LAW_CASES)
def test_sampled_law_matches_guided_ar(case):
    """Every lossless method (and the exact special cases of the lossy ones: δ = 0, a group of one) samples the
    exact guided AR joint over a 2x2 grid, batched, through the real loops, CFG and sampling parameters."""
    method, kw = LAW_CASES[case]
    p, compression = law_pvalue(method, **kw)
    print(f"\n{case}: chi2 p = {p:.3g}, step compression {compression:.2f}")
    assert p > 1e-3, f"{case}: p-value {p:.2e}, the sampled images do not follow the guided target's law"


@pytest.mark.slow
def test_law_test_catches_a_stale_proposal_mc_sjd():
    spec = speculator(grid=(2, 2))
    prefix = torch.tensor([[COND[0], COND[1]]]).expand(ROWS, -1).contiguous()
    cfg = SpecConfig(max_new_tokens=4, num_draft_tokens=2, verifier="test-broken-mc-sjd-stale-q", temperature=0.9, top_k=3,
                     seed=3, rows="independent", fixed_length=True)  # fmt: skip
    engine = SpeculativeEngine(spec.guided(spec.target, 2.0), JacobiDrafter(), cfg, vocab_size=CODES)
    codes = engine.generate(prefix).new_tokens
    p = chi2_pvalue(codes, exact_joint(spec.target, prefix[:1], 4, 2.0, SAMPLING))
    assert p < 1e-6, f"p-value {p:.2e}: the law test missed the stale-proposal MC-SJD"


def test_lantern_with_delta_relaxes_the_law_but_keeps_the_length():
    p, compression = law_pvalue("lantern-jacobi", window=2, delta=0.5)
    assert p < 1e-3  # a large δ visibly changes the law (it is lossy, and declares it)
    assert compression >= 1.0


# ----------------------------------------------------------------------------------------------------------------
# Length, greedy identity, batching


@pytest.mark.parametrize("method", IMAGE_AR_METHODS.names())
def test_every_method_gives_exactly_h_times_w_codes(method):
    spec = speculator(grid=(3, 3))
    for window in (1, 4, 20):  # windows shorter than, around and longer than the grid
        k = window if IMAGE_AR_METHODS.get(method).drafter == "jacobi" else min(window, 5)
        out = spec.generate([0, 1, 0], method, seed=window, num_draft_tokens=k)
        assert out.codes.shape == (3, 9) and int(out.codes.max()) < CODES
        assert len(out.images) == 3 and out.images[0].size == (6, 6)
        assert out.stats.target_forwards <= 9 and out.stats.compression >= 1.0
        assert out.lossless == (method not in ("lantern", "lantern-jacobi", "gsd"))


@pytest.mark.parametrize("method", IMAGE_AR_METHODS.names())
def test_greedy_output_is_identical_to_plain(method):
    spec = speculator(grid=(4, 4))
    plain = spec.generate([0, 1, 1, 0], "plain", temperature=0)
    out = spec.generate([0, 1, 1, 0], method, temperature=0, window=5, seed=3)
    assert torch.equal(out.codes, plain.codes)


def test_gumbel_sjd_is_token_identical_to_its_own_sequential_sample_for_any_window():
    spec = speculator(grid=(3, 3))
    ref = spec.generate([0, 1, 0, 1], "gumbel-sjd", window=1, seed=5).codes
    for window in (2, 4, 8):
        assert torch.equal(spec.generate([0, 1, 0, 1], "gumbel-sjd", window=window, seed=5).codes, ref)


def test_same_seed_same_images():
    spec = speculator()
    a = spec.generate([0, 1], "mc-sjd", seed=4).codes
    assert torch.equal(a, spec.generate([0, 1], "mc-sjd", seed=4).codes)


def test_vq_round_trip_helpers():
    vq = tiny_vq(3)
    codes = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 0]])
    images = codes_to_images(vq, codes, (3, 3))
    assert images.shape == (1, 3, 6, 6)
    assert images_to_codes(vq, images).shape == (1, 9)
    with pytest.raises(ValueError, match="codes: expected shape"):
        codes_to_images(vq, codes[:, :8], (3, 3))


# ----------------------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("kwargs,arg", [
    ({"method": "nope"}, "nope"),
    ({"cfg_scale": -1.0}, "cfg_scale"),
    ({"seed": -3}, "seed"),
    ({"temperature": -1.0}, "temperature"),
    ({"init": "zeros"}, "init"),
])  # fmt: skip
def test_bad_arguments_name_themselves(kwargs, arg):
    spec = speculator()
    with pytest.raises((ValueError, KeyError), match=arg):
        spec.generate([0], **kwargs)


def test_bad_conditions_and_missing_drafter():
    spec = speculator()
    with pytest.raises(ValueError, match="condition"):
        spec.generate([], "plain")
    with pytest.raises(ValueError, match="condition"):
        spec.generate(torch.tensor([[4.0, 5.0]]), "plain")
    bare = ImageARSpeculator(tiny_lm(0), tiny_vq(3), null_prompt=[NULL] * PREFIX, grid=(3, 3))
    with pytest.raises(ValueError, match="conditioner"):
        bare.generate(["red"], "plain")
    with pytest.raises(ValueError, match="drafter"):
        bare.generate(torch.tensor([[4, 5]]), "speculative")


@pytest.mark.slow
def test_hf_generate_peer_samples_the_same_guided_law():
    """The benchmark's Hugging Face peer (generate with guidance_scale + negative_prompt_ids) draws from the same
    guided distribution as mmspec's plain sampler, so speed comparisons with it are like for like."""
    from mmspec.bench.peers import hf_generate

    spec = speculator(grid=(2, 2), cfg_scale=2.0)
    prefix = torch.tensor([[COND[0], COND[1]]]).expand(ROWS, -1).contiguous()
    codes = hf_generate(spec, prefix, cfg_scale=2.0, temperature=1.0, seed=5)
    assert codes.shape == (ROWS, 4) and int(codes.max()) < CODES
    joint = exact_joint(spec.target, prefix[:1], 4, 2.0, SamplingParams(temperature=1.0))
    assert chi2_pvalue(codes, joint) > 1e-3
