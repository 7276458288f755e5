"""The model as the pipeline planner sees it: chains of blocks with their costs, the
tensor-parallel dimension, the memory model and the planning problem."""
