"""Verdict and report: the overall verdict, Metrics for the UI, Markdown and HTML reports, the audit record."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Markdown, Metrics, Output

from kfchaos.kfp.image import component_image


@dsl.component(base_image=component_image(), install_kfp_package=False)
def verdict_report(
    experiment: str,
    baseline: str,
    experiment_dir: str,
    target: str,
    run_id: str,
    pipeline_name: str,
    pipeline_version: str,
    image: str,
    pipeline_ir_hash: str,
    preflight: str,
    history: str,
    recovery: str,
    metrics: Output[Metrics],
    report_md: Output[Markdown],
    report_html: Output[HTML],
    audit: Output[Artifact],
) -> str:
    """Returns PASS, FAIL or INCONCLUSIVE."""
    from kfchaos.steps import conclude

    outcome = conclude.conclude(
        experiment_text=experiment,
        baseline_text=baseline,
        experiment_dir=experiment_dir,
        target=target,
        run_id=run_id,
        pipeline_name=pipeline_name,
        pipeline_version=pipeline_version,
        image=image,
        pipeline_ir_hash=pipeline_ir_hash,
        preflight=preflight,
        history=history,
        recovery=recovery,
        markdown_path=report_md.path,
        html_path=report_html.path,
        audit_path=audit.path,
    )
    for name, value in outcome.figures.items():
        metrics.log_metric(name, value)
    return outcome.verdict
