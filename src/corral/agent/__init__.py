"""The node agent: registers its node and GPUs, receives work, runs it, reports exits and logs."""
