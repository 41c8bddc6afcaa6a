# syntax=docker/dockerfile:1
#
# tagpin's container image.
#
#   docker build -t ghcr.io/tagpin/tagpin:0.1.0 .
#
# NOT built in CI: the development machines and CI have no Docker engine. What was checked
# instead: the dynamic libraries the binary needs (`ldd target/release/tagpin`, see below)
# against the runtime image's packages.
#
# Runtime image: distroless cc-debian12, non-root (uid/gid 65532). The binary links, besides
# glibc and libgcc_s (which every cc image has):
#   libssl.so.3, libcrypto.so.3  libgit2's HTTPS transport and libssh2 (git2 with its default
#                                features); distroless debian12 base/cc images ship libssl3
#   libz.so.1                    libgit2's zlib: NOT in distroless debian12, so zlib is built
#                                in statically instead (LIBZ_SYS_STATIC=1 below)
# Registry and GitHub HTTPS use rustls; the CA bundle of both rustls and OpenSSL is the image's
# /etc/ssl/certs/ca-certificates.crt (SSL_CERT_FILE below; distroless ships it).
# Build stage and runtime are both Debian 12 (bookworm), so the libssl3 ABI matches.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
# openssl-sys finds OpenSSL with pkg-config (both are in rust:bookworm already; made explicit).
RUN apt-get update \
 && apt-get install -y --no-install-recommends pkg-config libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# Compile zlib into the binary (libz-sys' bundled copy) rather than linking the system's.
ENV LIBZ_SYS_STATIC=1
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tagpin \
 && install -D -m 0755 target/release/tagpin /out/tagpin \
 && ldd /out/tagpin \
 && if ldd /out/tagpin | grep -E 'libz\.so|not found'; then \
      echo "tagpin links a library the runtime image lacks" >&2; exit 1; \
    fi

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="tagpin" \
      org.opencontainers.image.description="Pins Kubernetes image tags to registry digests in a GitOps repository" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/tagpin /usr/local/bin/tagpin
# Read-only root filesystem in Kubernetes: home and caches go to the writable emptyDirs
# (/tmp, /var/cache/tagpin); the Deployment sets the same.
ENV HOME=/tmp \
    XDG_CACHE_HOME=/var/cache \
    DOCKER_CONFIG=/etc/tagpin/docker \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# The distroless "nonroot" user; numeric so that runAsNonRoot can check it.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/tagpin"]
CMD ["--help"]
