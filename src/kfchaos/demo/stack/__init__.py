"""The demo stack: its processes started together and torn down together (demostack), the demo server's
kubelet-like supervisor (supervisor), processes that die with their parent (lifetime), and the real vLLM engine:
installed (vllminstall), started (vllmengine) in a memory cgroup (memcgroup), deployed as a container
(enginedeploy) under its own supervisor (enginesupervisor), and checked for before a run (enginecheck)."""
