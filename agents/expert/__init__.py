"""The scripted expert: a model stand-in that replays an instance's gold fix like a careful agent."""

from agents.expert.model import ExpertModel, end_of_turn_ids
from agents.expert.patches import change_fragments, edit_blocks, parse_patch

__all__ = ["ExpertModel", "change_fragments", "edit_blocks", "end_of_turn_ids", "parse_patch"]
