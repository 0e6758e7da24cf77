"""A stand-in for SGLang's package on a machine without a GPU: only ``launch_server`` exists."""
