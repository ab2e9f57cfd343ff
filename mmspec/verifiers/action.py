"""Action-bin tolerance for VLA action tokens (Spec-VLA) with KERV hooks (Kalman completion, adaptive r): METHODS.md §3.

Lossy: every rule trades exactness for acceptance, says what it still bounds (``bounds``), and has an exact special
case that reproduces a lossless rule of :mod:`mmspec.verifiers.exact` verdict for verdict:

=================== ======================================================== ==================================
rule                relaxation                                               exact special case
=================== ======================================================== ==================================
``action-tolerance`` accept iff |x - argmax p| <= r bins (KERV hooks)        r = 0 -> ``greedy``
=================== ======================================================== ==================================

Each vectorised rule is a core function of explicit random draws; ``reference_*`` functions compute the same verdicts
with plain Python loops over rows and positions (torch ops along the vocabulary only): the test oracles and the
``mmspec bench verifiers`` baseline.
"""

from __future__ import annotations

import torch

from ..checks import check_int, check_param
from ..types import Verdict
from .base import VERIFIERS, BenchCase, Verifier, first_rejection, reference_chain, require_chain
from .exact import bench_inputs


# ---------------------------------------------------------------------------------------------------------------
# Action-bin tolerance (Spec-VLA) with KERV hooks
# ---------------------------------------------------------------------------------------------------------------
def action_tolerance_core(x, logits, r: torch.Tensor, is_action: torch.Tensor | None) -> Verdict:
    """x [B, K]; r [B] per-row tolerance in bins; is_action [B, K] bool (None = all action tokens)."""
    k = x.shape[1]
    best = logits.argmax(-1)  # [B, K+1]
    close = (x - best[:, :k]).abs() <= r[:, None]  # [B, K]: token distance = bin distance for action tokens
    if is_action is not None:
        close = torch.where(is_action, close, x == best[:, :k])  # other tokens must match exactly
    n = first_rejection(close)  # [B]
    return Verdict(n, best.gather(1, n[:, None]).squeeze(1))


@VERIFIERS.register("action-tolerance")
class ActionToleranceVerifier(Verifier):
    """Spec-VLA relaxed acceptance for action tokens: accept x_i iff |x_i - argmax p_i| <= r (bins; OpenVLA action
    tokens map monotonically to bins, so token distance is bin distance); the correction is the target's argmax.

    Hooks for KERV: a per-row tolerance in ``proposal.meta["tolerance"]`` ([B] ints, e.g. from
    :func:`adaptive_tolerance`) overrides ``r``; ``proposal.meta["is_action"]`` ([B, K] bool) marks which positions
    are action tokens (others must match exactly). On a rejection the caller may fill the remaining action
    dimensions from :class:`KalmanActionFilter` instead of re-running the target. r = 0 is greedy match.
    """

    lossless = False
    needs_probs = False
    bounds = "every accepted action token is within r bins of the target's argmax; r = 0 is greedy match"
    paper = "Spec-VLA; KERV (Kalman fallback, kinematic tolerance), METHODS.md §3"

    def __init__(self, r: int = 1):
        check_int("r", r, 0, note=" (bins)")
        self.r = r

    def verify(self, proposal, scores, generator=None) -> Verdict:
        require_chain(proposal, "action-tolerance")
        x = proposal.tokens
        r = proposal.meta.get("tolerance")
        r = torch.full((x.shape[0],), self.r, device=x.device) if r is None else torch.as_tensor(r, device=x.device)
        if r.shape != (x.shape[0],) or bool((r < 0).any()):
            raise ValueError(f"proposal.meta['tolerance']: expected [B={x.shape[0]}] ints >= 0, got {r.tolist()}")
        return action_tolerance_core(x, scores.logits, r.long(), proposal.meta.get("is_action"))


def reference_action_tolerance(x, logits, r, is_action) -> Verdict:
    def accept(row, i):
        best = int(logits[row, i].argmax())
        action = True if is_action is None else bool(is_action[row, i])
        return abs(int(x[row, i]) - best) <= int(r[row]) if action else int(x[row, i]) == best

    return reference_chain(*x.shape, accept, lambda row, n: int(logits[row, n].argmax()))


def adaptive_tolerance(recent: torch.Tensor, r_min: int = 0, r_max: int = 3, scale: float = 1.0) -> torch.Tensor:
    """KERV-style kinematic tolerance: recent actions [B, T, D] in bin units (T >= 3) -> r [B] int64.

    Smooth motion (small mean |second difference|, i.e. acceleration, across dimensions) earns the loosest
    tolerance ``r_max``; jerky motion tightens it towards ``r_min``: r = clamp(round(r_max - scale * accel)).
    """
    if recent.dim() != 3 or recent.shape[1] < 3:
        raise ValueError(f"recent: expected [B, T >= 3, D] recent actions, got shape {tuple(recent.shape)}")
    accel = recent.double().diff(n=2, dim=1).abs().mean(dim=(1, 2))  # [B]
    return (r_max - scale * accel).round().clamp(r_min, r_max).long()


class KalmanActionFilter:
    """Per-dimension constant-velocity Kalman filter over recent actions (KERV's fallback predictor).

    State per (row, dimension): [position, velocity]. ``update(actions [B, D])`` folds in an observation;
    ``predict() -> [B, D]`` is the next action's expected value. Plain tensors, batched, any device.
    """

    def __init__(self, batch: int, dims: int, process_noise: float = 1e-2, obs_noise: float = 1e-1,
                 device=None, dtype=torch.float64):  # fmt: skip
        check_param("process_noise", process_noise, process_noise > 0, "a number > 0")
        check_param("obs_noise", obs_noise, obs_noise > 0, "a number > 0")
        self.x = torch.zeros(batch, dims, 2, device=device, dtype=dtype)  # [B, D, 2] (position, velocity)
        self.P = torch.eye(2, device=device, dtype=dtype).expand(batch, dims, 2, 2) * 1e3  # [B, D, 2, 2]
        self.F = torch.tensor([[1.0, 1.0], [0.0, 1.0]], device=device, dtype=dtype)  # constant velocity
        self.Q = torch.eye(2, device=device, dtype=dtype) * process_noise
        self.R = obs_noise
        self.seen = 0

    def predict(self) -> torch.Tensor:
        return (self.x @ self.F.T)[..., 0]  # [B, D]

    def update(self, actions: torch.Tensor) -> None:
        x = self.x @ self.F.T  # [B, D, 2] predicted state
        P = self.F @ self.P @ self.F.T + self.Q  # [B, D, 2, 2]
        s = P[..., 0, 0] + self.R  # [B, D] innovation variance (we observe the position)
        gain = P[..., :, 0] / s[..., None]  # [B, D, 2]
        resid = actions.to(x.dtype) - x[..., 0]  # [B, D]
        self.x = x + gain * resid[..., None]
        self.P = P - gain[..., :, None] * P[..., 0:1, :]  # (I - K H) P with H = [1, 0]
        self.seen += 1



def bench_cases(batch: int = 8, k: int = 8, vocab: int = 16384, seed: int = 0) -> list[BenchCase]:
    """Vectorised rule vs per-position reference loop on identical random inputs (``mmspec bench verifiers``)."""
    d = bench_inputs(batch, k, vocab, seed)
    x, logits = d["x"], d["logits"]
    r = torch.full((batch,), 2)
    return [
        BenchCase("action-tolerance", lambda: action_tolerance_core(x, logits, r, None),
                  lambda: reference_action_tolerance(x, logits, r, None)),
    ]  # fmt: skip
