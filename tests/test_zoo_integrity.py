"""Zoo weight integrity: every bundled entry's card records a sha256 per file and loads verify them; corrupted,
NaN-filled, missing or unrecorded files and checkpoints missing tensors are refused with an error naming the file."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from mmspec import zoo
from mmspec.cli import main as cli
from mmspec.zoo.integrity import WeightsIntegrityError, file_digests, pretrained, verify

WEIGHT = "unet/diffusion_pytorch_model.safetensors"


@pytest.mark.parametrize("name", zoo.ZOO.names())
def test_bundled_entries_match_their_recorded_digests(name):
    root = zoo.ZOO.get(name).path
    recorded = json.loads((root / "card.json").read_text())["files"]
    assert any(f.endswith(".safetensors") for f in recorded)
    verify(root, name)  # raises on any mismatch


@pytest.fixture()
def ddpm_copy(tmp_path):
    root = tmp_path / "shapes-ddpm"
    shutil.copytree(zoo.ZOO.get("shapes-ddpm").path, root)
    return root


def test_a_clean_copy_loads(ddpm_copy):
    m = zoo.load("shapes-ddpm", path=ddpm_copy)
    assert m.unet is not None


def test_overwritten_bytes_are_refused_naming_the_file(ddpm_copy):
    path = ddpm_copy / WEIGHT
    data = bytearray(path.read_bytes())
    data[-4096:] = bytes(4096)  # zero the tail of the tensor data (the header stays valid)
    path.write_bytes(bytes(data))
    with pytest.raises(WeightsIntegrityError, match=f"{WEIGHT}.*do not match the sha256"):
        zoo.load("shapes-ddpm", path=ddpm_copy)
    assert zoo.load("shapes-ddpm", path=ddpm_copy, verify_weights=False).unet is not None  # the opt-out


def test_nan_weights_are_refused(ddpm_copy):
    path = ddpm_copy / WEIGHT
    tensors = load_file(path)
    first = sorted(tensors)[0]
    tensors[first] = torch.full_like(tensors[first], float("nan"))
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(WeightsIntegrityError, match="do not match"):
        zoo.load("shapes-ddpm", path=ddpm_copy)


def test_deleted_files_and_unrecorded_weights_are_refused(ddpm_copy, tmp_path):
    extra = ddpm_copy / "unet" / "extra.safetensors"
    save_file({"x": torch.zeros(2)}, extra)
    with pytest.raises(WeightsIntegrityError, match="not recorded"):
        verify(ddpm_copy, "shapes-ddpm")
    extra.unlink()
    (ddpm_copy / WEIGHT).unlink()
    with pytest.raises(WeightsIntegrityError, match=f"missing file.*{WEIGHT}"):
        zoo.load("shapes-ddpm", path=ddpm_copy)


def test_a_checkpoint_missing_a_tensor_is_refused_even_with_fresh_digests(ddpm_copy):
    """A deleted tensor used to load with a warning (randomly initialised). Re-recording the digests does not hide
    it: the load itself refuses checkpoints that do not fill the model."""
    from diffusers import UNet2DModel

    path = ddpm_copy / WEIGHT
    tensors = load_file(path)
    dropped = sorted(tensors)[3]
    del tensors[dropped]
    save_file(tensors, path, metadata={"format": "pt"})
    cli(["zoo", "checksum", "shapes-ddpm", "--path", str(ddpm_copy)])  # as after retraining in place
    verify(ddpm_copy, "shapes-ddpm")
    with pytest.raises(WeightsIntegrityError, match=f"missing tensors.*{dropped}"):
        zoo.load("shapes-ddpm", path=ddpm_copy)
    with pytest.raises(WeightsIntegrityError, match="missing tensors"):
        pretrained(UNet2DModel, ddpm_copy / "unet")


def test_hub_mixin_modules_load_strictly(tmp_path):
    from mmspec.drafting.eagle_head import EagleHead

    head = EagleHead(hidden_size=16, num_attention_heads=2, intermediate_size=32)
    head.save_pretrained(tmp_path / "eagle")
    tensors = load_file(tmp_path / "eagle" / "model.safetensors")
    del tensors["fc.weight"]
    save_file(tensors, tmp_path / "eagle" / "model.safetensors")
    with pytest.raises(RuntimeError, match="fc.weight"):
        pretrained(EagleHead, tmp_path / "eagle")


def test_checksum_cli_records_and_checks(ddpm_copy, capsys):
    card = json.loads((ddpm_copy / "card.json").read_text())
    card.pop("files")
    (ddpm_copy / "card.json").write_text(json.dumps(card))
    with pytest.raises(WeightsIntegrityError, match="records no file digests"):
        verify(ddpm_copy, "shapes-ddpm")
    cli(["zoo", "checksum", "shapes-ddpm", "--path", str(ddpm_copy)])
    cli(["zoo", "checksum", "shapes-ddpm", "--path", str(ddpm_copy), "--check"])
    assert "matches its recorded sha256" in capsys.readouterr().out
    assert json.loads((ddpm_copy / "card.json").read_text())["files"] == file_digests(ddpm_copy)
