"""The data-parallel torch runtime: profile a module into layers, calibrate the network
between ranks, execute every policy's plan on torch.distributed and compare with the
simulator."""
