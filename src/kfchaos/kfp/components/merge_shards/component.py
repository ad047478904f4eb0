"""Merge shards: one stage's records and summary from its shards; faults ending in the stage removed.

The component is made for a shard count: `merge_shards_of(n)` takes each shard task's summary (`result_<i>`) and
records (`part_<i>`) as inputs of its own, so the fan-in is N plain task outputs. A ParallelFor collected with
`dsl.Collected` would be the shorter graph, but KFP's backend refuses it before 2.14 (kubeflow/pipelines#11725) and
runs it inside an ExitHandler correctly only from 2.17 (#13322): plain tasks run on every v2 backend, 2.1.0
included (docs/pipelines.md, "Sharded stages").

A lightweight component's code is its function's source text (kfp/dsl/component_factory.py,
_get_function_source_definition reads it with inspect.getsource), and a signature with N inputs cannot be written
once for every N. So the function is written out here for the count asked, compiled, and its text registered with
linecache under a name of its own, which is where inspect.getsource finds text that no file holds.
"""

import functools
import linecache
import textwrap

from kfp import dsl
from kfp.dsl import Dataset, Input, Output
from kfp.dsl.python_component import PythonComponent

from kfchaos.kfp.image import component_image

FUNCTION_NAME = "merge_shards"


def _source(shards: int) -> str:
    results = [f"result_{index}" for index in range(shards)]
    parts = [f"part_{index}" for index in range(shards)]
    inputs = "".join(f"    {name}: str,\n" for name in results) + "".join(
        f"    {name}: Input[Dataset],\n" for name in parts
    )
    return (
        f"def {FUNCTION_NAME}(\n"
        "    experiment: str,\n"
        "    experiment_dir: str,\n"
        "    run_id: str,\n"
        "    stage: int,\n"
        "    shards: int,\n"
        "    start: str,\n"
        f"{inputs}"
        "    requests: Output[Dataset],\n"
        ") -> str:\n"
        + textwrap.indent(
            '"""Writes the merged records (Parquet); returns the stage\'s replay summary as the replay task does."""\n'
            "from kfchaos.steps import shards as steps\n"
            "\n"
            "return steps.merge(\n"
            "    experiment_text=experiment,\n"
            "    experiment_dir=experiment_dir,\n"
            "    run_id=run_id,\n"
            "    stage=stage,\n"
            "    shards=shards,\n"
            "    start_json=start,\n"
            f"    shard_results=[{', '.join(results)}],\n"
            f"    parts=[{', '.join(f'{name}.path' for name in parts)}],\n"
            "    records_path=requests.path,\n"
            ")\n",
            "    ",
        )
    )


def merge_shards_of(shards: int) -> PythonComponent:
    """The merge component for `shards` shard tasks (inputs result_0.., part_0..) on the component image named
    now; one object per count and image."""
    if shards < 1:
        raise ValueError(f"merge_shards_of: {shards} shards; at least 1")
    return _made(shards, component_image())


@functools.cache
def _made(shards: int, image: str) -> PythonComponent:
    source = _source(shards)
    filename = f"<kfchaos merge_shards of {shards}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict[str, object] = {"Input": Input, "Output": Output, "Dataset": Dataset}
    exec(compile(source, filename, "exec"), namespace)  # our own text, made above from a count
    function = namespace[FUNCTION_NAME]
    component = dsl.component(base_image=image, install_kfp_package=False)(function)
    assert isinstance(component, PythonComponent)
    return component


# The form `kfchaos compile` writes to components/merge_shards/component.yaml for reuse: two shards.
merge_shards = merge_shards_of(2)
