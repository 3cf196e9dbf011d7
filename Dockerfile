# syntax=docker/dockerfile:1
# Multi-stage build of the msgbridge CLI (every role).
# The runtime is deploy/runtime.env's: Node 24 (LTS) on Debian 13 (glibc 2.41), whose official
# uWebSockets.js 20.57 binaries (@btc-vision/uwebsockets.js, pinned by package-lock.json's
# integrity) need glibc 2.38+; src/platform/uws.ts picks the build whose binary loads (README,
# "Node.js and uWebSockets.js"). .ci/run runs the test suite in a Debian root made from the same list;
# test/deploy/runtime.test.ts checks that this file agrees with it (a FROM and an ENTRYPOINT
# cannot read a file).
ARG NODE_IMAGE=node:24-trixie-slim
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY deploy/runtime.env ./deploy/
# Two packages npm links from the tree (vendor/README.md).
COPY vendor ./vendor
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY config ./config
COPY scripts/copy-console.ts ./scripts/
# The list's build is what npm ci installed; the other platforms' binaries are dropped.
RUN . deploy/runtime.env \
 && test "$(node -p "require('./node_modules/${UWS_PACKAGE}/package.json').version")" = "${UWS_VERSION}" \
 && npm run build && npm prune --omit=dev \
 && find "node_modules/${UWS_PACKAGE}" node_modules/uWebSockets.js -name 'uws_*.node' ! -name "uws_linux_*" -delete

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/vendor ./vendor
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root package.json ./
COPY --chown=root:root config ./config
COPY --chown=root:root schemas ./schemas
# The tracker's stores and the sender's request ledger (volumes in Compose and Kubernetes), writable by the runtime user.
RUN mkdir -p /var/lib/msgbridge && chown node:node /var/lib/msgbridge
VOLUME /var/lib/msgbridge
ENV MSGBRIDGE_TRACKER_STATE_DIR=/var/lib/msgbridge/tracker
ENV MSGBRIDGE_SENDER_STATE_DIR=/var/lib/msgbridge/sender
# Unprivileged user from the base image; the code and config are read-only to it.
USER node
# Public: webhooks 8080, the tracker's queries 8082, the simulator 8090. Private (probes and
# scrapes only): the admin ports 9080 ingress, 9081 sender, 9082 tracker.
EXPOSE 8080 8082 8090 9080 9081 9082
ENTRYPOINT ["node", "--enable-source-maps", "dist/cli.js"]
CMD ["--help"]
