"""The embedded demo: a real chaos experiment on one machine, through the real compiled pipeline.

Four parts, each importing only those listed after it:
- runner: running experiments against the stack (`kfchaos demo`, `demo up`/`down`, `demo tune`, `run --local`,
  `tune --local`);
- stack: bringing the demo's processes up and down together (the demo server under its supervisor, the fault
  proxy, Prometheus, or the real vLLM engine in a memory cgroup under a kubelet-like supervisor);
- faults: local fault injection in place of Chaos Mesh (the fault proxy, the local fault backend and its view of
  the pod);
- server: kfchaos's own demo LLM server, a model of vLLM under load, and the pod it stands for.
stack and faults do not import each other. The experiments/ and grids/ folders are package data.
"""
