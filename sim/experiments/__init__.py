"""Many simulations of one config: sweeps (here, in processes or on Dask), Sync-Switch's offline
search, seeded ensembles of asynchronous runs. Imports `sim.api` and everything below it."""
