"""Continuous-state verifiers (METHODS.md §5): the shared contracts and checks (:mod:`.base`), reflection maximal
coupling (:mod:`.reflection`), density-ratio acceptance (:mod:`.density`) and forecast gating
(:mod:`.forecast`). Importing the package registers the three rules."""

from .base import (F64, LOG_2PI, BatchedDensity, ContinuousVerdict, ContinuousVerifier, DensityProposal, DensityScores,
                   ForecastProposal, ForecastScores, GaussianDensity, GaussianMixtureDensity, GaussianProposal,
                   GaussianScores)
from .density import DensityRatioVerifier, density_ratio, reference_density_ratio
from .forecast import ForecastGatingVerifier, forecast_gating, forecast_threshold, reference_forecast_gating, relative_l1_error
from .reflection import DELTA_EPS, ReflectionCouplingVerifier, reference_reflection_coupling, reflection_coupling

__all__ = [
    "DELTA_EPS", "F64", "LOG_2PI", "BatchedDensity", "ContinuousVerdict", "ContinuousVerifier", "DensityProposal",
    "DensityRatioVerifier", "DensityScores", "ForecastGatingVerifier", "ForecastProposal", "ForecastScores",
    "GaussianDensity", "GaussianMixtureDensity", "GaussianProposal", "GaussianScores", "ReflectionCouplingVerifier",
    "density_ratio", "forecast_gating", "forecast_threshold", "reference_density_ratio", "reference_forecast_gating",
    "reference_reflection_coupling", "reflection_coupling", "relative_l1_error",
]  # fmt: skip
