"""Compute costs of a job layout: per-block seconds, MoE layers, per-op checkpointing and gradient
accumulation."""
