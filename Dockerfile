# `dsmlkit serve` in a container: the gateway with the [server,tokenizer] extras, run as a
# user without privileges on port 8000, its health checked on /health.
#
#   docker build -t dsmlkit .            (or: podman build --format docker -t dsmlkit .)
#   docker run -p 8000:8000 -e DSMLKIT_STATE_SECRET=... dsmlkit --upstream http://engine:8000/v1
#
# Arguments after the image name are added to `dsmlkit serve --host 0.0.0.0 --port 8000`;
# every flag can also come from its DSMLKIT_* variable (DSMLKIT_UPSTREAM, DSMLKIT_STATE, ...).
# docs/server.md, "The container image", says more.

ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
# Where pip finds packages, if not PyPI: a mirror (PIP_INDEX_URL) or a folder of wheels in
# the build context (PIP_FIND_LINKS=/src/wheels with PIP_NO_INDEX=1).
ARG PIP_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
COPY . /src
RUN python3 -m venv /opt/dsmlkit \
 && /opt/dsmlkit/bin/pip install --no-cache-dir --disable-pip-version-check "/src[server,tokenizer]"

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin dsmlkit
COPY --from=build /opt/dsmlkit /opt/dsmlkit
ENV PATH=/opt/dsmlkit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["dsmlkit", "serve", "--host", "0.0.0.0", "--port", "8000"]
