"""What other apps may listen to, so that experiments never imports them (the sweeps app listens; see its apps.py).

`run_ended` is sent when a run reaches a final state (Run.FINISHED: succeeded, failed, cancelled, pruned, or lost
and not resumed), after that state is written, in the process that wrote it: a worker that ended the run, the
lost-run reaper, or a page that cancelled a queued run. Arguments: `sender` (the Run class), `run_id`, `status`.
Receivers run at once and may write; one that raises is logged and the others still run (lifecycle.announce_end).
"""

from django.dispatch import Signal

run_ended = Signal()
