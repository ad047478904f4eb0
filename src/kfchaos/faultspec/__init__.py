"""The fault half of the experiment format, below kfchaos.spec which builds on it: each fault type's parameter
model (params) and the rules Chaos Mesh's admission webhook and CRD schemas hold a chaos object to (admission,
goparse, crdschema). Pure validation: nothing here renders, injects or talks to a cluster (kfchaos.faults)."""
