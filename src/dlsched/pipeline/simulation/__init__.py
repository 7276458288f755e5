"""Executing a plan: the network, the event simulation, its timings, memory and utilization, and
the provable bounds."""
