"""The pipeline torch runtime: profile a chain of blocks, calibrate the link and the
runtime's own cost, run plans with torch.distributed.pipelining and replay them."""
