# Tollgate image: build with the dev toolchain, ship only dist/, proto/, config/, schema/, examples/ and production
# modules. Node.js 24 LTS. The base is pinned by digest in one place for both stages: node:24-bookworm-slim as of
# Node 24.18.0. To move it: `docker buildx imagetools inspect node:24-bookworm-slim` (or let Renovate or
# Dependabot's docker ecosystem do it); to try another without editing: --build-arg NODE_IMAGE=node:22-bookworm-slim@sha256:…
ARG NODE_IMAGE=node:24-bookworm-slim@sha256:6f7b03f7c2c8e2e784dcf9295400527b9b1270fd37b7e9a7285cf83b6951452d

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
# Scripts off: `prepare` would build before the sources are here.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY proto ./proto
RUN npm run build && npm prune --omit=dev

FROM ${NODE_IMAGE}
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="Global rate-limit service for Envoy (RLS v3), counters in Redis" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV NODE_ENV=production
WORKDIR /app
# Owned by root and not writable by the user below: `serve` writes nothing at run time (no temp files, no cache),
# so the container runs with readOnlyRootFilesystem: true (deploy/kubernetes sets it).
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY proto ./proto
COPY config ./config
# The descriptor-config schema (editors, CI checks) and the example configs, for `tollgate check-config` in the image.
COPY schema ./schema
COPY examples ./examples
# The sidecar's envoy.yaml: `tollgate simulate` reads its routes by default.
COPY envoy ./envoy
# Envoy Gateway starts its rate-limit container with `command: [/bin/ratelimit]`, envoyproxy/ratelimit's binary
# (its internal/infrastructure/kubernetes/ratelimit/resource.go): the same path starts Tollgate's serve, so this image
# can take envoyproxy/ratelimit's place there (docs/xds.md).
RUN printf '#!/bin/sh\nexec node /app/dist/cli.js serve "$@"\n' > /bin/ratelimit && chmod 755 /bin/ratelimit
# The image's unprivileged `node` user, by number, so Kubernetes' runAsNonRoot can verify it (runAsUser: 1000).
USER 1000:1000
# 8081: gRPC (RateLimitService, grpc.health.v1); 8080: HTTP (/healthz, /readyz, /healthcheck, /metrics, /json)
EXPOSE 8081 8080
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve"]
