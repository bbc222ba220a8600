"""The cluster as a graph: hosts, racks, links and switches built from the config (`builder`, `sites`,
`datacenters` joined by WAN links, all through `topology`), and the routes between ranks over it
(`routing`). Imports `sim.config`, `sim.catalog` and `policies.view`."""
