"""Memory per GPU of a job layout, by part: the dense model and the MoE layers."""
