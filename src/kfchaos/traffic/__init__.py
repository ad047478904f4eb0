"""Traffic: formats and importers, synthetic generator, stage sampling, the open-loop replay engine, LLM
streaming metrics. The stable entry points are in kfchaos.traffic.api (plan_stage, run_stage, replay,
merge_shards)."""
