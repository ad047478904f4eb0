"""The plain-Python steps the KFP components call; all pipeline logic lives here, components stay thin.

Steps talk to each other through JSON strings (KFP parameters) in the shape of `results.StepResult`, and reach
the other parts of kfchaos (fault backend, replay, verdict, report) only through `seams`, so wiring a part
that lands later is a change in one place.
"""
