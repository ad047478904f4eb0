"""Cleanup, the exit handler: removes every chaos object labelled with the run id, whatever happened before."""

from kfp import dsl
from kfp.dsl import Artifact, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def cleanup(experiment: str, run_id: str, cleanup_record: Output[Artifact]) -> str:
    """Depends on no task (exit handlers cannot); gets the run id from the placeholder. Returns a summary."""
    from kfchaos.steps import faults

    return faults.cleanup(experiment_text=experiment, run_id=run_id, record_path=cleanup_record.path)
