# syntax=docker/dockerfile:1

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/remediator
COPY . .
RUN /opt/remediator/bin/pip install .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="gpu-remediator" \
      org.opencontainers.image.description="Alert-driven GPU remediation controller for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 remediator \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin remediator \
 && install -d -o 10001 -g 10001 -m 0750 /data
COPY --from=build /opt/remediator /opt/remediator
ENV PATH=/opt/remediator/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /data
USER 10001:10001
EXPOSE 8080 9410
ENTRYPOINT ["remediator"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
