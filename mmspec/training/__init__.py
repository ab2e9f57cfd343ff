"""Training used by the zoo recipes: the generic loop (:mod:`.loops`) and drafter alignment (:mod:`.distill`: logit
and hidden-state distillation, drafters, compressed drafters with their query adaptor, EAGLE heads)."""

from .distill import (compressed_forward, distill_compressed_drafter, distill_drafter, distill_eagle_head, eagle_loss,
                      feature_regression, kl_to_teacher)
from .loops import card_entry, count_parameters, fit, pack_answers

__all__ = [
    "card_entry", "compressed_forward", "count_parameters", "distill_compressed_drafter", "distill_drafter", "distill_eagle_head",
    "eagle_loss", "feature_regression", "fit", "kl_to_teacher", "pack_answers",
]  # fmt: skip
