"""KFP components, one folder each. Every component is a thin call into `kfchaos.steps`, where the logic lives.

The function bodies are embedded into the compiled YAML and run on the kfchaos image, so they import
`kfchaos.steps` inside the function: that is where the code runs, not where it is defined.
"""
