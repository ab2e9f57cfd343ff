"""Speech recognition: audio in, text out — a token modality that runs in the one engine loop.

- :func:`load_audio`: WAV files (any sample rate, mono or multi-channel, 8/16/24/32-bit PCM), FLAC / OGG (soundfile), numpy / torch
  waveforms, or a list of them (different lengths), resampled with torchaudio to the feature extractor's rate, with
  clear errors for unreadable files, empty or silent audio, wrong shapes and audio longer than the model accepts.
- :class:`DecoderView`: an encoder-decoder model's decoder as the causal LM the engine drives, over encoder states
  computed once per utterance (Whisper's encoder runs once; the cross-attention keys and values are computed on the
  first call and reused). A draft decoder that reads the *target's* encoder states gets its own view of the same
  states, so drafting needs no second encoder pass.
- :class:`ASRSpeculator`: ``transcribe(audio)`` with a draft decoder (or any drafter), greedy or sampled.

Status (issue 19, first step): Whisper-class encoder-decoders with a draft decoder, exact verifiers; the speech-LLM
family, CTC drafts, recycling and the ``shapes-speech`` zoo entry are still to come.
"""

from __future__ import annotations

import copy
import wave
from pathlib import Path

import numpy as np
import torch

from ..checks import check_int
from ..models import with_cache

SILENCE = 1e-4  # peak amplitude below which a waveform counts as silent


def read_audio_file(path: str | Path) -> tuple[np.ndarray, int]:
    """An audio file as float32 [T] mono in [-1, 1] (channels averaged) and its sample rate: WAV through the standard
    library, FLAC / OGG / other libsndfile formats through ``soundfile``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"audio: no such file {str(path)!r}")
    if path.suffix.lower() == ".wav":
        return read_wav(path)
    import soundfile

    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as e:
        raise ValueError(f"audio: {str(path)!r} is not a readable audio file ({e})") from None
    return data.mean(1), rate


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """A WAV file as float32 [T] mono in [-1, 1] (channels averaged) and its sample rate."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"audio: no such file {str(path)!r}")
    try:
        with wave.open(str(path), "rb") as f:
            rate, channels, width, n = f.getframerate(), f.getnchannels(), f.getsampwidth(), f.getnframes()
            raw = f.readframes(n)
    except (wave.Error, EOFError) as e:
        raise ValueError(f"audio: {str(path)!r} is not a readable PCM WAV file ({e})") from None
    if width == 1:
        data = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif width in (2, 4):
        data = np.frombuffer(raw, f"<i{width}").astype(np.float32) / float(2 ** (8 * width - 1))
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        data = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / float(2**23)
    else:
        raise ValueError(f"audio: {str(path)!r} has {8 * width}-bit samples; expected 8, 16, 24 or 32-bit PCM")
    return data.reshape(-1, channels).mean(1), rate


def write_wav(path: str | Path, waveform, sampling_rate: int) -> Path:
    """16-bit PCM mono WAV (written to a temporary name, then renamed: no half-written file on failure)."""
    path = Path(path)
    x = np.clip(np.asarray(waveform, dtype=np.float32).reshape(-1), -1, 1)
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        with wave.open(str(tmp), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(int(sampling_rate))
            f.writeframes((x * 32767).round().astype("<i2").tobytes())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path


def _one(audio, sampling_rate: int | None, target_rate: int, index: int) -> np.ndarray:
    import torchaudio.functional as AF

    where = "audio" if index < 0 else f"audio[{index}]"
    if isinstance(audio, (str, Path)):
        audio, sampling_rate = read_audio_file(audio)
    elif isinstance(audio, (np.ndarray, torch.Tensor)):
        if sampling_rate is None:
            raise ValueError("sampling_rate: a waveform needs its sample rate (e.g. sampling_rate=16000), got None")
        audio = audio.detach().cpu().float().numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio, np.float32)
        if audio.ndim == 2 and min(audio.shape) <= 8:  # [T, C] or [C, T]: average the channels
            audio = audio.mean(axis=int(np.argmin(audio.shape)))
        if audio.ndim != 1:
            raise ValueError(f"{where}: expected a waveform [T] (or [T, C] / [C, T] channels), got shape {audio.shape}")
    else:
        raise TypeError(f"{where}: expected an audio file path, a numpy / torch waveform or a list of them, got "
                        f"{type(audio).__name__}")  # fmt: skip
    check_int("sampling_rate", sampling_rate, 1)
    if audio.size == 0:
        raise ValueError(f"{where}: the waveform is empty")
    if not np.isfinite(audio).all():
        raise ValueError(f"{where}: the waveform holds NaN or infinite samples")
    if np.abs(audio).max() < SILENCE:
        raise ValueError(f"{where}: the waveform is silent (peak {float(np.abs(audio).max()):.1e} < {SILENCE})")
    if sampling_rate != target_rate:
        audio = AF.resample(torch.from_numpy(np.ascontiguousarray(audio)), sampling_rate, target_rate).numpy()
    return audio.astype(np.float32)


def load_audio(audio, sampling_rate: int | None = None, target_rate: int = 16000,
               max_seconds: float | None = None) -> list[np.ndarray]:  # fmt: skip
    """One or a batch of utterances as float32 mono waveforms at ``target_rate``: -> list of [T_i] arrays.

    ``audio``: an audio file path (WAV, FLAC, ...), a waveform ([T], or with channels) with ``sampling_rate``, or a list of these (lengths may
    differ). ``max_seconds``: the model's limit (Whisper: 30 s), checked after resampling."""
    batch = audio if isinstance(audio, (list, tuple)) else [audio]
    if not batch:
        raise ValueError("audio: expected at least one utterance, got an empty list")
    out = [_one(a, sampling_rate, target_rate, i if len(batch) > 1 else -1) for i, a in enumerate(batch)]
    if max_seconds is not None:
        for i, x in enumerate(out):
            if x.size > max_seconds * target_rate:
                raise ValueError(f"audio: utterance {i} lasts {x.size / target_rate:.1f} s; the model accepts at most "
                                 f"{max_seconds:g} s (split it first)")  # fmt: skip
    return out


class DecoderView(torch.nn.Module):
    """An encoder-decoder's decoder over fixed ``encoder_states`` [B, S, D], as a causal LM: ``forward(input_ids,
    attention_mask, position_ids, cache)`` -> logits, the cache being the decoder's self-attention cache (what the
    runner crops and compacts). The cross-attention keys / values are computed on the first call and reused."""

    def __init__(self, model, encoder_states: torch.Tensor):
        super().__init__()
        from transformers import DynamicCache

        if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
            raise TypeError(f"model: expected an encoder-decoder model (e.g. WhisperForConditionalGeneration), got "
                            f"{type(model).__name__}")  # fmt: skip
        d = model.config.d_model
        if encoder_states.dim() != 3 or encoder_states.shape[-1] != d:
            raise ValueError(f"encoder_states: expected [B, S, d_model={d}], got {tuple(encoder_states.shape)}")
        self.model = model
        self.encoder_states = encoder_states
        self.cross = DynamicCache()
        cfg = copy.copy(model.config)
        cfg.is_encoder_decoder = False  # what the engine sees: a decoder-only LM
        cfg.num_hidden_layers = model.config.decoder_layers
        self.view_config = cfg

    config = property(lambda self: self.view_config)
    dtype = property(lambda self: self.model.dtype)

    def get_input_embeddings(self):
        return self.model.get_decoder().embed_tokens

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, past_key_values=None,
                use_cache=True, logits_to_keep: int = 0, **kwargs):  # fmt: skip
        from transformers import EncoderDecoderCache
        from transformers.modeling_outputs import CausalLMOutputWithPast

        self_cache = cache if cache is not None else past_key_values
        both = EncoderDecoderCache(self_cache, self.cross)  # cross entries present: reused, not recomputed
        decoder = self.model.get_decoder()
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      encoder_hidden_states=self.encoder_states, use_cache=True, **with_cache(decoder, both))  # fmt: skip
        h = out.last_hidden_state
        h = h[:, -logits_to_keep:] if logits_to_keep else h
        return CausalLMOutputWithPast(logits=self.model.get_output_embeddings()(h))


class ASROutput:
    def __init__(self, texts: list[str], new_tokens: torch.Tensor, stats):
        self.texts, self.new_tokens, self.stats = texts, new_tokens, stats  # new_tokens [B, T] (pad after EOS)


class ASRSpeculator:
    """Speculative transcription with a Whisper-class encoder-decoder ``target`` and its ``processor``.

    ``drafter``: a draft decoder — an encoder-decoder of the same ``d_model`` and vocabulary whose decoder reads the
    target's encoder states (its own encoder is never run) — or any mmspec :class:`~mmspec.drafters.Drafter` over the
    decoder tokens (e.g. n-gram). ``verifier`` / ``num_draft_tokens`` / ``config_kwargs``: :class:`~mmspec.SpecConfig`.
    Decoding starts from ``prompt_ids`` (default: the decoder start token); no token suppression is applied, so the
    exact verifiers reproduce the target's own greedy / sampled decoding from that prompt.
    """

    def __init__(self, target, processor, drafter=None, verifier: str | None = None, num_draft_tokens: int = 4,
                 **config_kwargs):  # fmt: skip
        from ..config import SpecConfig

        if not getattr(getattr(target, "config", None), "is_encoder_decoder", False):
            raise TypeError(f"target: expected an encoder-decoder speech model (e.g. WhisperForConditionalGeneration), "
                            f"got {type(target).__name__}")  # fmt: skip
        if drafter is None:
            raise ValueError("drafter: expected a draft decoder (an encoder-decoder model) or an mmspec Drafter, got None")
        if getattr(getattr(drafter, "config", None), "is_encoder_decoder", False) and drafter.config.d_model != target.config.d_model:
            raise ValueError(f"drafter: a draft decoder reads the target's encoder states, so its d_model must be the "
                             f"target's ({target.config.d_model}), got {drafter.config.d_model}")  # fmt: skip
        self.target, self.processor, self.drafter = target.eval(), processor, drafter
        tok = processor.tokenizer
        self.eos = target.generation_config.eos_token_id if target.generation_config.eos_token_id is not None else tok.eos_token_id
        self._config_kwargs = dict(num_draft_tokens=num_draft_tokens, verifier=verifier, eos_token_id=self.eos, **config_kwargs)
        SpecConfig(**self._config_kwargs)  # validates now, not mid-call
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos

    @property
    def sampling_rate(self) -> int:
        return self.processor.feature_extractor.sampling_rate

    @torch.no_grad()
    def encode(self, audio, sampling_rate: int | None = None) -> torch.Tensor:
        """Encoder states [B, S, D] of one utterance or a batch (the target's encoder, run once)."""
        fe = self.processor.feature_extractor
        waves = load_audio(audio, sampling_rate, fe.sampling_rate, max_seconds=getattr(fe, "chunk_length", None))
        feats = fe(waves, sampling_rate=fe.sampling_rate, return_tensors="pt").input_features
        param = next(self.target.parameters())
        return self.target.get_encoder()(feats.to(param.device, param.dtype)).last_hidden_state

    def transcribe(self, audio, *, sampling_rate: int | None = None, max_new_tokens: int = 64,
                   prompt_ids: list[int] | None = None, generator: torch.Generator | None = None, **overrides) -> ASROutput:  # fmt: skip
        """Texts of one utterance or a batch: ``audio`` as :func:`load_audio` takes it; ``overrides``: SpecConfig
        fields for this call (num_draft_tokens, verifier, temperature, seed, tree, rows, ...)."""
        from ..config import SpecConfig
        from ..drafters import Drafter, ModelDrafter
        from ..engine import SpeculativeEngine

        states = self.encode(audio, sampling_rate)  # [B, S, D]
        b = states.shape[0]
        start = prompt_ids if prompt_ids is not None else [self.target.config.decoder_start_token_id]
        ids = torch.tensor([list(start)] * b, device=states.device)
        draft = self.drafter if isinstance(self.drafter, Drafter) else ModelDrafter(DecoderView(self.drafter, states))
        cfg = SpecConfig(**{**self._config_kwargs, "max_new_tokens": max_new_tokens, **overrides})
        engine = SpeculativeEngine(DecoderView(self.target, states), draft, cfg, pad_token_id=self.pad,
                                   vocab_size=self.target.config.vocab_size)  # fmt: skip
        out = engine.generate(ids, torch.ones_like(ids), generator=generator)
        texts = self.processor.tokenizer.batch_decode(out.new_tokens, skip_special_tokens=True)
        return ASROutput([t.strip() for t in texts], out.new_tokens, out.stats)
