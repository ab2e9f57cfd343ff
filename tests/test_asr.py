"""ASR, first step (issue 19): audio loading and its errors, and a Whisper-class encoder-decoder decoded in the one
engine loop through a decoder view, with a draft decoder that reads the target's encoder states — greedy
token-identical to the target's own greedy decoding (chains, trees, batches), sampled law by χ²."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mmspec.modalities.asr import ASRSpeculator, DecoderView, load_audio, read_wav, write_wav

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "<|startoftranscript|>"] + [f"w{i}" for i in range(43)]


def _tiny_whisper(seed: int, decoder_layers: int, std: float = 0.2):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(seed)
    cfg = WhisperConfig(vocab_size=len(WORDS), d_model=32, encoder_layers=1, decoder_layers=decoder_layers,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                        num_mel_bins=16, max_source_positions=1500, max_target_positions=64, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=4, init_std=std)  # fmt: skip
    return WhisperForConditionalGeneration(cfg).eval()


@pytest.fixture(scope="module")
def whisper():
    from transformers import WhisperFeatureExtractor

    from mmspec.zoo.shapes import word_tokenizer

    target, draft = _tiny_whisper(0, 2), _tiny_whisper(1, 1)
    draft.model.decoder.load_state_dict(target.model.decoder.state_dict(), strict=False)  # a close (truncated) drafter
    processor = SimpleNamespace(feature_extractor=WhisperFeatureExtractor(feature_size=16),
                                tokenizer=word_tokenizer(WORDS, {}))  # fmt: skip
    return target, draft, processor


def _tone(seconds: float, rate: int, freq: float) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * np.sin(2 * np.pi * 3.1 * freq * t)).astype(np.float32)


def _plain_greedy(target, states, start: int, n: int) -> list[list[int]]:
    """The target's own greedy decoding from the same encoder states, recomputed from scratch at every step."""
    ids = torch.full((states.shape[0], 1), start)
    with torch.no_grad():
        for _ in range(n):
            logits = target(encoder_outputs=(states,), decoder_input_ids=ids).logits[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    return ids[:, 1:].tolist()


def _trim(row: list[int], eos: int = 2) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


@pytest.mark.parametrize("tree", [None, (2, 2, 1)])
def test_draft_decoder_is_token_identical_to_the_targets_greedy_decoding(whisper, tree):
    target, draft, processor = whisper
    spec = ASRSpeculator(target, processor, drafter=draft, num_draft_tokens=3)
    audio = [_tone(1.0, 16000, 220.0), _tone(2.5, 8000, 330.0)]  # different lengths and rates
    rates = [16000, 8000]
    waves = [load_audio(a, r)[0] for a, r in zip(audio, rates)]
    out = spec.transcribe([torch.from_numpy(w) for w in waves], sampling_rate=16000, max_new_tokens=24, tree=tree)
    states = spec.encode([torch.from_numpy(w) for w in waves], sampling_rate=16000)
    ref = _plain_greedy(target, states, 4, 24)
    got = [[t for t in row if t != 0] for row in out.new_tokens.tolist()]
    assert [_trim(g) for g in got] == [_trim(r) for r in ref]
    assert len(set(ref[0])) > 2  # the tiny target does not just repeat one token
    assert out.stats.mean_accepted_tokens > 1.0 and len(out.texts) == 2


def test_sampled_speculative_decoding_follows_the_targets_law(whisper):
    """χ² on the second generated token (the first one the drafter proposes): speculative sampling with an unrelated
    draft decoder gives the target's marginal law; accepting (almost) every draft fails the same check."""
    from scipy.stats import chisquare

    target, _, processor = whisper
    other = _tiny_whisper(5, 1, std=0.4)  # an unrelated draft decoder: its law differs from the target's
    spec = ASRSpeculator(target, processor, drafter=other, num_draft_tokens=2)
    audio = _tone(1.0, 16000, 440.0)
    states = spec.encode(audio, sampling_rate=16000)
    v = target.config.vocab_size
    with torch.no_grad():
        p1 = torch.softmax(target(encoder_outputs=(states,), decoder_input_ids=torch.tensor([[4]])).logits[0, -1].double(), -1)
        pairs = torch.stack([torch.full((v,), 4), torch.arange(v)], 1)  # [V, 2]: every first token
        p2_given = torch.softmax(target(encoder_outputs=(states.expand(v, -1, -1),), decoder_input_ids=pairs).logits[:, -1].double(), -1)
    p2_given[2] = torch.nn.functional.one_hot(torch.tensor(0), v).double()  # after EOS (id 2) a row holds padding (0)
    p2 = p1 @ p2_given  # [V] the target's marginal law of the second token
    n = 600
    keep = p2 * n >= 5

    def pvalue(**overrides) -> float:
        out = spec.transcribe([audio] * n, sampling_rate=16000, max_new_tokens=3, temperature=1.0, seed=0, **overrides)
        second = torch.bincount(out.new_tokens[:, 1], minlength=v).double()
        observed = torch.cat([second[keep], second[~keep].sum(0, keepdim=True)])
        expected = torch.cat([p2[keep], p2[~keep].sum(0, keepdim=True)]) * observed.sum()
        return chisquare(observed.numpy(), expected.numpy()).pvalue

    assert pvalue() > 1e-3
    assert pvalue(verifier="ssd", verifier_params={"beta": 10.0}) < 1e-3


def test_wav_round_trip_resampling_and_batches(tmp_path):
    x = _tone(0.5, 22050, 300.0)
    path = write_wav(tmp_path / "a.wav", x, 22050)
    back, rate = read_wav(path)
    assert rate == 22050 and back.shape == x.shape and np.abs(back - x).max() < 1e-3
    assert not list(tmp_path.glob(".*partial*"))
    import soundfile

    soundfile.write(str(tmp_path / "a.flac"), np.stack([x, x], 1), 22050)  # stereo FLAC
    waves = load_audio([str(path), x, torch.from_numpy(np.stack([x, x], 1)), str(tmp_path / "a.flac")], sampling_rate=22050)
    assert [w.shape[0] for w in waves] == [8000] * 4  # 0.5 s at 16 kHz
    assert all(np.abs(waves[0] - w).max() < 1e-3 for w in waves[1:])


@pytest.mark.parametrize("bad, kind, match", [
    ("/nowhere.wav", FileNotFoundError, "audio: no such file"),
    (np.zeros(1600, np.float32), ValueError, "the waveform is silent"),
    (np.zeros(0, np.float32), ValueError, "the waveform is empty"),
    (np.ones((3, 4, 5), np.float32), ValueError, r"expected a waveform \[T\]"),
    (np.full(100, np.nan, np.float32), ValueError, "NaN or infinite"),
    (12, TypeError, "audio: expected an audio file path"),
    ([], ValueError, "at least one utterance"),
])  # fmt: skip
def test_audio_errors_name_the_argument(bad, kind, match):
    with pytest.raises(kind, match=match):
        load_audio(bad, sampling_rate=16000)


def test_more_audio_errors(tmp_path, whisper):
    with pytest.raises(ValueError, match="sampling_rate: a waveform needs its sample rate"):
        load_audio(_tone(0.1, 16000, 200.0))
    with pytest.raises(ValueError, match="utterance 0 lasts 31.0 s; the model accepts at most 30 s"):
        load_audio(_tone(31.0, 16000, 200.0), 16000, max_seconds=30)
    (tmp_path / "bad.wav").write_bytes(b"RIFF....not a wav")
    with pytest.raises(ValueError, match="not a readable PCM WAV file"):
        load_audio(str(tmp_path / "bad.wav"))
    (tmp_path / "bad.flac").write_bytes(b"fLaC but not really")
    with pytest.raises(ValueError, match="not a readable audio file"):
        load_audio(str(tmp_path / "bad.flac"))
    target, draft, processor = whisper
    with pytest.raises(TypeError, match="target: expected an encoder-decoder"):
        ASRSpeculator(torch.nn.Linear(2, 2), processor, drafter=draft)
    with pytest.raises(ValueError, match="d_model must be the target's"):
        wide = _tiny_whisper(2, 1)
        wide.config.d_model = 48
        ASRSpeculator(target, processor, drafter=wide)
    with pytest.raises(ValueError, match=r"encoder_states: expected \[B, S, d_model=32\]"):
        DecoderView(target, torch.zeros(1, 5, 7))
