"""Reports of a verdict, for an SRE to read at a glance: the Markdown summary (kfchaos.report.markdown, report.md)
and the self-contained HTML page (kfchaos.report.page, report.html: Plotly inline, no network). Both accept a
`kfchaos.Verdict` JSON or the pipeline's `kfchaos.RunVerdict` and say the same things about it
(kfchaos.report.facts); the page's figures are kfchaos.report.plots', drawn from what kfchaos.report.data pulls
out of the run's documents.

`markdown(verdict, context)` and `html(verdict, context)` return text. Context keys, all optional: run (the
run folder's manifest), experiment (an Experiment), records (Parquet path, Table or Requests), metrics (a
MetricsSnapshot or its JSON), baseline (the baseline file's mapping), control_records (the control
baseline's Parquet), run_state, steps, audit, fault_types, evidence (the OOM evidence bundle, kfchaos.evidence).
`kfchaos.rundir` builds the context from a run folder.

`kfchaos.report.mdtext.markdown_text` makes text from outside inert in GitHub Flavored Markdown (links, images, HTML,
mentions, code fences, table cells): the one escaping function of the Markdown `kfchaos history` writes.
"""
