"""The task processor's settings (DESIGN section 6): the idle gap, the boundary judge's context and
the summariser's budgets, kept small on purpose."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from memory.tasks.rules import SkipThresholds


@dataclass(frozen=True)
class TaskSettings:
    """Task parameters; defaults from DESIGN section 6, prompt budgets kept small on purpose."""

    idle_gap: timedelta = timedelta(hours=2)
    second_look_below: float = 0.65
    context_turns: int = 3
    recheck_user_messages: int = 8
    boundary_chars: int = 400          # per message shown to the boundary judge
    summary_chunk_chars: int = 2000    # per user/assistant message shown to the summariser
    summary_tool_chars: int = 300      # tool output is noise past its first lines
    summary_total_chars: int = 12000
    boundary_max_tokens: int = 60
    summary_max_tokens: int = 900
    skip: SkipThresholds = field(default_factory=SkipThresholds)
