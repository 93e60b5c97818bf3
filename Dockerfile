# syntax=docker/dockerfile:1
# A Cairn node. `docker build -t cairn:local .` (or `docker compose build`); see deploy/README.md.
#
# Stage 1 builds exactly as a developer does (`make install`, `make build`) and then drops the
# development dependencies; stage 2 holds only what a running node needs: the production
# node_modules, the compiled dist/src, bin/cairn and the health check. No compiler is needed:
# the native dependencies (classic-level, msgpackr-extract) ship prebuilt linux binaries.
ARG NODE_VERSION=20

FROM node:${NODE_VERSION}-slim AS build
WORKDIR /src
# `make` drives the build (the slim image lacks it).
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
# Dependencies first: this layer is rebuilt only when the lock file (or the Makefile) changes.
COPY package.json package-lock.json Makefile ./
RUN make install
COPY . .
RUN make build \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:${NODE_VERSION}-slim AS runtime
# Defaults for a container: listen on every interface (each node must also be told the
# address its peers use, CAIRN_ADVERTISE_ADDR), keep data in the volume. Every agent flag
# --some-flag can be set as CAIRN_SOME_FLAG (API.md "The command line").
ENV NODE_ENV=production \
    CAIRN_DATA_DIR=/var/lib/cairn \
    CAIRN_GRPC_ADDR=0.0.0.0:7500 \
    CAIRN_HTTP_ADDR=0.0.0.0:7501
WORKDIR /opt/cairn
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist/src ./dist/src
COPY --from=build /src/bin ./bin
COPY --from=build /src/deploy/healthcheck.mjs /src/deploy/tls-init.sh ./deploy/
RUN mkdir -p /var/lib/cairn && chown node:node /var/lib/cairn
USER node
VOLUME ["/var/lib/cairn"]
# 7500: gRPC (Raft, forwarding, public API); 7501: HTTP/JSON API, /readyz, /metrics.
EXPOSE 7500 7501
HEALTHCHECK --interval=5s --timeout=4s --start-period=30s --retries=6 CMD ["node", "deploy/healthcheck.mjs"]
# The agent stops cleanly on SIGTERM (hands over leadership, closes its files).
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "bin/cairn"]
CMD ["agent"]
