"""`ddq bench ...`: benchmarks whose Markdown tables go into the README."""
