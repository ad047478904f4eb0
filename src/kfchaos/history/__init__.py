"""`kfchaos history`: many runs of one experiment side by side, and whether a pipeline version made it worse.

- `model`: one run as history sees it (its verdict's checks per stage, OOM kills, pipeline version, and whether the
  run could be verified);
- `local`: the runs of a local runs/ folder (kfchaos.rundir), each verified by its seal and audit record first;
- `kfpruns`: the runs of a KFP experiment or recurring run, through the API (kfchaos.kfp), each audit record verified;
- `regression`: a stated test per check and stage between two pipeline versions, and the recurring failure modes;
- `render`: the terminal table, JSON, the Markdown summary of `--compare` and the offline HTML page.
"""
