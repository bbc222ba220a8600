"""The file names a report reads and writes beside a run's or a sweep's tables."""

REPORT_FILE = "report.html"
SWEEP_CONFIG_FILE = "sweep.yaml"  # the sweep's config file as given, copied there by `syncsim sweep`
DECISIONS_FILE = "decisions.csv"  # what the simulator decided for each `auto` setting, where a run wrote it
