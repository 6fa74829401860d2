"""Speculative-decoding engine: drafters, acceptance rules, model loading and the decode loop.

Knows only token ids: no tasks, agents, Hydra or MLflow. The public surface is re-exported here.
"""

from engine.decode import ContextLimitError, GenerationResult
from engine.engine import Engine, EngineConfig
from engine.loading import LoadedModel, ModelNotFoundError, TokenizerMismatchError, load_model
from engine.sampling import SamplingParams
from engine.session import Session
from engine.stats import GenerationStats

__all__ = [
    "ContextLimitError",
    "Engine",
    "EngineConfig",
    "GenerationResult",
    "GenerationStats",
    "LoadedModel",
    "ModelNotFoundError",
    "SamplingParams",
    "Session",
    "TokenizerMismatchError",
    "load_model",
]
