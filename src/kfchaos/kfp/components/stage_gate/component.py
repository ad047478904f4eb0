"""Stage gate: continue the ramp or stop it; carries the history of every step result so far."""

from typing import NamedTuple

from kfp import dsl

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def stage_gate(stage: int, result: str, history: str) -> NamedTuple(
    "GateOutputs", [("decision", str), ("history", str)]
):
    """`decision` is 'continue' or 'stop'; `history` is the JSON list of results with this one appended."""
    from typing import NamedTuple

    from kfchaos.steps import gates

    decision, updated = gates.gate(stage=stage, result=result, history=history)
    outputs = NamedTuple("GateOutputs", [("decision", str), ("history", str)])  # noqa: UP014
    return outputs(decision, updated)
