"""`kfchaos tune`: the experiment run once per serving configuration of a grid, each run judged by the verdict, and
the cheapest configuration that holds the whole ramp under the faults recommended with its evidence.

grid (the grid file), sweep (the experiment and grid checked together before anything runs), outcome (one
configuration's run read from its run folder: breakpoint, verdict per stage, OOM kills, goodput), recommend (the
rule that picks one), table (the terminal table and the JSON document). Running the configurations is the caller's:
locally kfchaos.demo.runner.localtune (one demo stack per configuration), on KFP the sweep pipeline
(kfchaos.kfp.pipelines.tune_sweep).
"""
