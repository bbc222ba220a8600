"""The discrete-event kernel the network and the engine run on: SimPy's environment with its
scheduling shortcuts (`environment`) and a garbage collector kept quiet during a run (`gc_quiet`).
Imports only simpy."""
