"""Long-running loops apart from request handlers, each on its own thread: alerts, repeating jobs (and the
scheduler's), all on one Loop base (start/stop/trigger, a failed pass logged and retried)."""

from corral.server.background.alerts import AlertLoop
from corral.server.background.loop import Loop
from corral.server.background.schedules import ScheduleLoop
from corral.server.background.scheduling import Scheduler

__all__ = ["AlertLoop", "Loop", "ScheduleLoop", "Scheduler"]
