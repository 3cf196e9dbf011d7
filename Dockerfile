# syntax=docker/dockerfile:1
# Multi-stage build of the msgbridge CLI (every role).
# Node 24 (LTS) on Debian 13 (glibc 2.41): the uWebSockets.js builds with Node 22/24 binaries
# need glibc 2.38+. package.json's registry build only has Node 20 binaries, so the image adds
# @btc-vision/uwebsockets.js (a republication of the official build), pinned by its SHA-512;
# src/platform/uws.ts picks the build whose binary loads (README, "uWebSockets.js").
ARG NODE_IMAGE=node:24-trixie-slim
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY config ./config
COPY scripts/copy-console.ts ./scripts/
RUN npm run build && npm prune --omit=dev
ARG UWS_BUILD=btc-vision-uwebsockets.js-20.57.0.tgz
ARG UWS_BUILD_SHA512=4ae3e912348a67b3f9f0bff6ec15d7b2b1ac3302e63eea5f627cbca09b0e985678fb35fb09af7b9c13ed6779e029b7de0d9cd3ca2eeb5eb8bbe083467ab86e82
RUN npm pack --silent @btc-vision/uwebsockets.js@20.57.0 \
 && echo "${UWS_BUILD_SHA512}  ${UWS_BUILD}" | sha512sum -c - \
 && npm install --no-save --omit=dev --no-audit --no-fund --ignore-scripts "./${UWS_BUILD}" \
 && rm "${UWS_BUILD}" \
 && find node_modules/@btc-vision/uwebsockets.js -name 'uws_*.node' ! -name 'uws_linux_*' -delete

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/node_modules ./node_modules
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
