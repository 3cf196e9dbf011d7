# syntax=docker/dockerfile:1
# Multi-stage build of the msgbridge CLI (ingress, sender, simulator roles).
# Debian (glibc) base: the uWebSockets.js registry build ships glibc binaries for Node 20.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY config ./config
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root package.json ./
COPY --chown=root:root config ./config
COPY --chown=root:root schemas ./schemas
# Unprivileged user from the base image; the code and config are read-only to it.
USER node
EXPOSE 8080 8081 8090
ENTRYPOINT ["node", "--enable-source-maps", "dist/cli.js"]
CMD ["--help"]
