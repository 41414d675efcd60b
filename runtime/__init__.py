"""The runtime (`gdp.runtime`): targets, backends, the compile cache, the task queue, profiling."""
