# The one image every kfchaos pipeline component runs on. Its tag is the package version
# (ghcr.io/kfchaos/kfchaos:<version>, see src/kfchaos/image.py), so a compiled pipeline version names
# the image its code was released in. Build from the repository root:
#   docker build --build-arg GIT_COMMIT=$(git rev-parse HEAD) -t ghcr.io/kfchaos/kfchaos:0.2.2 .
FROM python:3.11-slim

ARG GIT_COMMIT=unknown
# Read by the verdict step into every run's audit record.
ENV KFCHAOS_GIT_COMMIT=${GIT_COMMIT} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /opt/kfchaos
# Dependencies first, so a code change does not reinstall them.
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install . && useradd --uid 10001 --no-create-home kfchaos \
    # KFP's launcher writes output artifacts under /minio, /s3 or /gcs (backend/src/v2/component/launcher_v2.go,
    # LocalPathForURI) as the image's user: they must exist and be its own.
    && mkdir /minio /s3 /gcs && chown 10001:10001 /minio /s3 /gcs

# Experiments, the recorded traffic they reference (../traffic/...) and baselines: the pipeline's default experiment_dir is
# /opt/kfchaos/experiments, where traffic paths in experiment files resolve.
COPY experiments ./experiments
COPY baselines ./baselines
COPY traffic ./traffic

USER 10001
ENTRYPOINT []
CMD ["kfchaos", "--help"]
