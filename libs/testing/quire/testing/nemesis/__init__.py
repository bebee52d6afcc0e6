"""The nemesis (issue 42): faults struck at times a seed chooses on a
cluster in network namespaces, and the timeline of what struck when."""

from quire.testing.nemesis.fault import Cluster, Fault, FaultRecord, Process, Timeline

__all__ = ["Cluster", "Fault", "FaultRecord", "Process", "Timeline"]
