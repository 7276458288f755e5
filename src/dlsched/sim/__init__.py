"""Discrete-event engine, shared-bandwidth channels and the Timeline."""

from dlsched.sim.engine import Engine
from dlsched.sim.shared_bandwidth import SharedChannel
from dlsched.sim.timeline import Span, Timeline

__all__ = ["Engine", "SharedChannel", "Span", "Timeline"]
