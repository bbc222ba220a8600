"""The SimPy processes that run one policy on the cluster: workers, the executor of policy programs,
communicators and collectives, parameter-server shards, clocks, faults and phases (`run` wires them).
Imports the layers below it: numerics, compute, network, cluster, kernel, config, policies."""
