"""`kfchaos doctor`: every precondition of a run on a live cluster, checked before a nightly run fails.

model.py holds the table; kfpcheck.py the KFP backend rules (pure); cluster.py the Kubernetes side (access
reviews, Chaos Mesh, namespace, Secret); series.py the Prometheus series; diagnose.py puts them together for one
experiment.
"""
