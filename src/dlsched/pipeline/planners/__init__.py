"""The pipeline planners: dlsched's planner, the baselines at full strength, their
partition/mapping kernels and the exhaustive oracle."""
