"""The zoo: small real models trained here by recipes on procedural data, saved as safetensors.

``load(name)`` returns the entry's models (after checking every file against the sha256 its card records);
``ZOO.get(name).train(out_dir)`` rebuilds it from scratch. One module (or folder) per entry owns its
:class:`ZooEntry`: :mod:`.shapes_vlm`, :mod:`.shapes_video`, :mod:`.shapes_video_long`, :mod:`.shapes_t2i`,
:mod:`.shapes_ddpm`; :mod:`.shapes` is the scene world they share.
"""

from . import shapes_ddpm, shapes_t2i, shapes_video, shapes_video_long, shapes_vlm  # noqa: F401  (register the entries)
from .integrity import WeightsIntegrityError
from .registry import WEIGHTS, ZOO, ZooEntry, load

__all__ = ["WEIGHTS", "ZOO", "WeightsIntegrityError", "ZooEntry", "load"]
