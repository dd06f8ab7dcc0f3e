"""The reproduction report: profiles, the stage registry (one section per claim of SPEC §6),
the cached runner and the HTML page. Entry point: :func:`reproduce`."""

from .profiles import PROFILES
from .runner import plan, reproduce
from .stages import Stage, StageContext, StageOutput, StageUnavailable, registered
from .verdict import RULES, Comparison, decide

__all__ = ["PROFILES", "RULES", "Comparison", "Stage", "StageContext", "StageOutput", "StageUnavailable",
           "decide", "plan", "registered", "reproduce"]
