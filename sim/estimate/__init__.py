"""What a run will cost (wall time, memory) worked out from the validated config alone, before anything
is built. Imports `sim.config`, `sim.compute` and `policies`."""
