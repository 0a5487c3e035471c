"""Node-side smoke drills run by ``nodeprep verify``: kill the reference trainer, resume."""

from __future__ import annotations

from nodeprep.smoke.drill import DrillConfig, DrillResult, run_drill

__all__ = ["DrillConfig", "DrillResult", "run_drill"]
