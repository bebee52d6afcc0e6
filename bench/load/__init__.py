"""Load harness by workload class (issue 14): ``make load``.

corpus.py generates the work, arrivals.py schedules it (plateaus and bursts,
open loop), sampler.py watches the processes and the queues, report.py writes
the plots and report.md, and main.py runs it all against the embedded stack.
"""
