# dpstream release service image: python:3.11-slim, non-root, `dpstream` as entrypoint.
# Build: docker build -t dpstream:0.1.0 .      Run: docker run … dpstream:0.1.0 run --config /etc/dpstream/config.yaml
# Installs the package without extras: no embedded broker, no test or plotting dependencies
# (production talks to Apache Kafka). Checked structurally by tests/deploy/test_deploy.py.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY histogram ./histogram
COPY controller ./controller
COPY stream ./stream
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ARG UID=10001
RUN groupadd --system --gid "${UID}" dpstream \
 && useradd --system --uid "${UID}" --gid dpstream --home-dir /var/lib/dpstream --no-create-home \
        --shell /usr/sbin/nologin dpstream \
 && install -d -m 0700 -o dpstream -g dpstream /var/lib/dpstream \
 && install -d -m 0755 /etc/dpstream
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels dpstream \
 && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DPSTREAM_SERVICE__STATE_DIR=/var/lib/dpstream \
    DPSTREAM_SERVICE__HTTP_HOST=0.0.0.0
USER 10001:10001
WORKDIR /var/lib/dpstream
VOLUME ["/var/lib/dpstream"]
EXPOSE 8000 8080
# liveness only (never depends on Kafka); readiness is /readyz
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4); sys.exit(0)"]
ENTRYPOINT ["dpstream"]
CMD ["run", "--config", "/etc/dpstream/config.yaml"]
