"""KFP glue: the component image, compiling versioned pipelines, the lock file, and the KFP client.

Importing kfchaos itself never needs KFP; these modules do, and are only imported by the commands that use them.
"""
