"""Weight integrity for zoo entries: a sha256 per file, recorded in the entry's ``card.json`` when a recipe writes it,
verified when the entry loads; and loads that refuse missing tensors.

A corrupted or half-copied weight file would otherwise load silently (random bytes give NaNs, a truncated file a
model that generates empty text) and a deleted tensor would only log a warning. Users who retrain an entry in place
by other means re-record the digests with ``mmspec zoo checksum NAME`` or skip the check with
``mmspec.zoo.load(name, verify=False)``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

CARD = "card.json"
_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: each file is hashed once per process


class WeightsIntegrityError(ValueError):
    """A zoo entry's files do not match the digests its card records, or a model lacks tensors its class needs."""


def sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def file_digests(root: Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every file under ``root`` but the card itself (weights and configs)."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != CARD and not p.name.startswith("."))
    return {p.relative_to(root).as_posix(): sha256(p) for p in files}


def write_card(root: Path, card: dict) -> Path:
    """Write ``card.json`` with the digests of every file now under ``root`` (call it after the models are saved);
    ``card["files"]`` is set in place. Written to a temporary name and renamed, so a failure leaves the old card."""
    root = Path(root)
    card.pop("files", None)
    card["files"] = file_digests(root)
    tmp = root / f".{CARD}.partial"
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    os.replace(tmp, root / CARD)
    return root / CARD


def verify(root: Path, name: str) -> None:
    """Raise :class:`WeightsIntegrityError` unless every file the card records is present with its recorded sha256
    and no weight file is unrecorded."""
    root = Path(root)
    hint = (f"if you retrained {name!r} in place, run `mmspec zoo checksum {name}` (or `--path DIR`), or load with "
            "verify=False")  # fmt: skip
    card_path = root / CARD
    if not card_path.is_file():
        raise WeightsIntegrityError(f"zoo entry {name}: no {CARD} at {root}; {hint}")
    recorded = json.loads(card_path.read_text()).get("files")
    if not recorded:
        raise WeightsIntegrityError(f"zoo entry {name}: {card_path} records no file digests; {hint}")
    missing = sorted(f for f in recorded if not (root / f).is_file())
    if missing:
        raise WeightsIntegrityError(f"zoo entry {name}: missing file(s) {missing} under {root}; {hint}")
    changed = sorted(f for f, digest in recorded.items() if sha256(root / f) != digest)
    if changed:
        raise WeightsIntegrityError(f"zoo entry {name}: {changed} under {root} do not match the sha256 recorded in "
                                    f"{CARD} (corrupted, truncated or replaced); {hint}")  # fmt: skip
    unrecorded = sorted(f for f in file_digests(root) if f not in recorded and f.endswith(".safetensors"))
    if unrecorded:
        raise WeightsIntegrityError(f"zoo entry {name}: weight file(s) {unrecorded} under {root} are not recorded in "
                                    f"{CARD}; {hint}")  # fmt: skip


def record(root: Path) -> Path:
    """Re-record the digests of ``root``'s files in its existing card (after retraining in place)."""
    root = Path(root)
    card_path = root / CARD
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    return write_card(root, card)


def pretrained(cls, path: Path, **kwargs):
    """``cls.from_pretrained(path, ...)`` that refuses a checkpoint missing tensors the class needs (transformers and
    diffusers only warn and initialise them randomly; ``PyTorchModelHubMixin`` classes load non-strictly)."""
    from huggingface_hub import PyTorchModelHubMixin

    path = Path(path)
    if issubclass(cls, PyTorchModelHubMixin):
        return cls.from_pretrained(path, strict=True, **kwargs)  # strict state-dict load (the mixin's default is not)
    model, info = cls.from_pretrained(path, output_loading_info=True, local_files_only=True, **kwargs)
    missing = sorted(info.get("missing_keys") or [])
    mismatched = info.get("mismatched_keys") or []
    if missing or mismatched:
        what = f"missing tensors {missing[:6]}{' ...' if len(missing) > 6 else ''}" if missing else ""
        what += ("; " if what else "") + (f"tensors of the wrong shape {[m[0] for m in mismatched][:6]}" if mismatched else "")
        raise WeightsIntegrityError(f"{path}: the checkpoint does not fill {cls.__name__}: {what}")
    return model


def load_model(cls, path: Path, dtype=None, device="cpu", *, optional: bool = False):
    """:func:`pretrained` in ``dtype`` on ``device``, in eval mode (transformers, diffusers and hub-mixin classes);
    ``optional``: None when ``path`` holds no model."""
    from huggingface_hub import PyTorchModelHubMixin

    path = Path(path)
    if optional and not (path / "config.json").exists():
        return None
    if issubclass(cls, PyTorchModelHubMixin):
        return pretrained(cls, path).to(device=device, dtype=dtype).eval()
    key = "torch_dtype" if cls.__module__.startswith("diffusers") else "dtype"
    return pretrained(cls, path, **({key: dtype} if dtype is not None else {})).to(device).eval()


def require_weights(path: Path, entry: str, part: str = "target") -> Path:
    """``path`` when it holds the entry's ``part``; else a FileNotFoundError saying how to train it."""
    path = Path(path)
    if not (path / part / "config.json").exists():
        raise FileNotFoundError(f"zoo entry {entry}: no weights at {path}; run `mmspec zoo train {entry}`")
    return path
