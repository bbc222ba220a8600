"""What exists: the GPU catalogue (`gpus`) and the model zoo (`zoo`), as data and their arithmetic.
The bottom layer of the simulator: imports nothing of syncsim but `sim.errors`."""
