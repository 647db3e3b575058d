# eosbroker in a container.
#   docker build -t eosbroker .                                   # the broker
#   docker build --target spark -t eosbroker-spark .              # + Java 17 and PySpark, for the demo pipeline
# BASE_IMAGE is any Debian-based image with python3 (>= 3.11); the default is the
# official slim one. Settings come from environment variables named after Kafka's
# settings: EOSBROKER_LOG_RETENTION_MS=60000 (or KAFKA_LOG_RETENTION_MS=60000) sets
# log.retention.ms. EOSBROKER_HOST, EOSBROKER_PORT, EOSBROKER_DATA_DIR, EOSBROKER_NODES
# and EOSBROKER_ADMIN_PORT set the listener, data directory, node count and admin port;
# KAFKA_LISTENERS, KAFKA_ADVERTISED_LISTENERS, ... (the apache/kafka image's variables)
# replace EOSBROKER_HOST/PORT with Kafka's listeners.
ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS broker
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/eosbroker/venv/bin:$PATH
# A Debian base without the venv module gets it from apt (the official Python image has it).
RUN python3 -c "import ensurepip, venv" 2>/dev/null \
    || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
        && rm -rf /var/lib/apt/lists/*)
WORKDIR /opt/eosbroker
COPY pyproject.toml README.md ./
COPY protocol protocol
COPY coordinator coordinator
COPY broker broker
COPY spark_client spark_client
RUN python3 -m venv venv \
    && venv/bin/pip install --quiet . \
    && venv/bin/python -m compileall -q venv/lib \
    && venv/bin/python -P -m broker.dataclass_code \
    && venv/bin/python -P -m protocol.answer_wire \
    && useradd --system --uid 10001 --no-create-home --home-dir /data eosbroker \
    && mkdir -p /data && chown eosbroker /data
USER eosbroker
VOLUME /data
ENV EOSBROKER_HOST=0.0.0.0 \
    EOSBROKER_PORT=9092 \
    EOSBROKER_DATA_DIR=/data
EXPOSE 9092
# A Kafka ApiVersions round trip with the broker, not just an open port.
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=3 CMD ["eosbroker", "healthcheck"]
ENTRYPOINT ["eosbroker"]
CMD ["serve"]

FROM broker AS spark
USER root
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && venv/bin/pip install --quiet '.[spark]'
COPY examples examples
USER eosbroker
ENV HOME=/tmp
# a job, not the broker: nothing to probe
HEALTHCHECK NONE
ENTRYPOINT []
CMD ["python", "examples/pipeline.py", "--bootstrap", "127.0.0.1:9092"]
