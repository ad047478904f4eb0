"""The run folder `runs/<run-id>/`: one layout, written and read through this package only.

- layout.py: the folder's files and their names, the `RunDir` on disk, opening one to read or to verify, and the
  report's context read from it
- verification.py: what `kfchaos audit verify DIR` checks (the seal, the audit record against the folder, the
  verdict re-judged from the folder's own inputs), and the control records against the baseline
- writing.py: a whole folder written (each file through kfchaos.safefile), re-judged on the spot, its reports
  drawn from its own files and sealed last
- kfpimport.py: a folder from a kfp.local run's artifacts (the pipeline's audit record, report and records)

They point one way: kfpimport -> writing -> verification -> layout. Writing is apart from the layout because a
write records its own re-judgment (verification's), and verification reads the layout: in one module, the two would
import each other.
"""
