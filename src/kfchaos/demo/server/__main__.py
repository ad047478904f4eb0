"""`python -m kfchaos.demo.server`: the demo LLM server, as manifests/demo-target and teams' own Deployments start it
(the server's code is kfchaos.demo.server.api)."""

from kfchaos.demo.server.api import main

main()
