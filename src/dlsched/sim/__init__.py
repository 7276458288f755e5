"""Discrete-event engine, shared links, collective costs and the Timeline."""

from dlsched.sim.engine import Engine
from dlsched.sim.links import SharedLinks
from dlsched.sim.timeline import Span, Timeline

__all__ = ["Engine", "SharedLinks", "Span", "Timeline"]
