"""Training modes: each wires the core's parts one way (serial in one process, downpour over Spark and
the parameter server), and the run folder they all write."""
