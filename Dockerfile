# Tollgate image: build with the dev toolchain, ship only dist/, proto/, config/ and production modules.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# Scripts off: `prepare` would build before the sources are here.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY proto ./proto
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY proto ./proto
COPY config ./config
# The sidecar's envoy.yaml: `tollgate simulate` reads its routes by default.
COPY envoy ./envoy
# Envoy Gateway starts its rate-limit container with `command: [/bin/ratelimit]`, envoyproxy/ratelimit's binary
# (its internal/infrastructure/kubernetes/ratelimit/resource.go): the same path starts Tollgate's serve, so this image
# can take envoyproxy/ratelimit's place there (docs/xds.md).
RUN printf '#!/bin/sh\nexec node /app/dist/cli.js serve "$@"\n' > /bin/ratelimit && chmod 755 /bin/ratelimit
# The image's unprivileged user (uid 1000).
USER node
# 8081: gRPC (RateLimitService, grpc.health.v1); 8080: HTTP (/healthz, /readyz, /healthcheck, /metrics, /json)
EXPOSE 8081 8080
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["serve"]
