"""A job plan handed to the frameworks and read back from them: Megatron-LM arguments and a
TorchTitan TOML job config written from an ``Execution`` (``writers``, with the FP8 recipe,
torch.compile and asynchronous TP spelled by ``framework_flags``), and a TorchTitan job config
read into the plan's fixed fields (``torchtitan_config``).
"""
