"""Traffic-side faults: the requests a fault adds to a stage's traffic, performed by the replayer itself.

Chaos Mesh has no fault for what an LLM server meets from its clients (long-context bursts, prompts that are
costly to tokenize, a step of concurrency, clients that abort in bulk, ...). Such a fault is a generator of
extra requests for the stages it is active in, listed by fault type in kfchaos.traffic.trafficfaults.table, the table
the replay plan reads to merge them into the stage's schedule.

Every request a fault generates carries `TrafficRequest.fault` (the fault's name). The records keep it in the
`fault_request` column, and everything that judges the *traffic* (the verdict's checks, the stage gate, the
control baseline) leaves those requests out: they are the fault, not the service's users. A generator yields
`(offset, request)` in non-decreasing offset order; the plan splits the fault's requests over shards by their
index in that order (request k goes to shard k mod n), so the shards together send each request once.
"""
