# topicstream: one image for every process (learner, replicas, producer, CLI tools).
#   docker build -t topicstream:latest -t topicstream:0.1.0 .   (compose runs :latest; deploy/k8s pulls :0.1.0)
#   docker run --rm -e TOPICSTREAM_KAFKA_BOOTSTRAP=kafka:9092 -e TOPICSTREAM_REDIS_URL=redis://redis:6379/0 topicstream run
# Configuration is by TOPICSTREAM_* environment variables (see service/settings.py); /metrics is on port 9100.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: install the package and its dependencies (all binary wheels) into a virtual environment
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first, so that editing the code does not reinstall them; with the report extra (matplotlib), so
# that `topicstream report` runs in the image too (its venv is not writable there).
COPY pyproject.toml README.md LICENSE ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['report']))" \
        > /tmp/requirements.txt \
 && pip install --upgrade pip \
 && pip install -r /tmp/requirements.txt
COPY kernels ./kernels
COPY service ./service
COPY evaluation ./evaluation
RUN pip install --no-deps . \
 && python -c "import kernels, service.cli, evaluation.command"

# ---- runtime
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="topicstream" \
      org.opencontainers.image.description="Single-pass, constant-memory topic models over a live Kafka stream" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NUMBA_CACHE_DIR=/tmp/numba-cache \
    TOPICSTREAM_METRICS_PORT=9100
RUN groupadd --system --gid 10001 topicstream \
 && useradd --system --uid 10001 --gid topicstream --create-home --home-dir /home/topicstream topicstream
USER 10001:10001
WORKDIR /home/topicstream
EXPOSE 9100 8080
# No HEALTHCHECK here: only `run`, `replica` and `feeds` serve /metrics (docker-compose.yml and the k8s probes
# check it where they run).
ENTRYPOINT ["topicstream"]
CMD ["--help"]
