#!/usr/bin/env bash
# Makes vendor/: @platformatic/kafka 1.x's two helper packages, unchanged but for their
# package.json: no devDependencies nor scripts, and the Node range set to @platformatic/kafka
# 1.x's own (Node 20.19.4+). Their registry releases all say Node 22.19+ while the client that needs them says 20.19.4+, so npm
# warned EBADENGINE on every install on Node 20; this project's CI runs them on Node 20 and 24
# (vendor/README.md). Each tarball is checked against its registry integrity first. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
range='>= 20.19.4 || >= 22.18.0 || >= 24.6.0'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
while read -r spec integrity; do
  name=${spec%@*} version=${spec##*@}
  tarball=$(cd "$work" && npm pack --silent "$spec")
  [ "sha512-$(openssl dgst -sha512 -binary "$work/$tarball" | base64 -w0)" = "$integrity" ] || { echo "vendor: $spec does not match $integrity" >&2; exit 1; }
  target=vendor/${name#@platformatic/}
  rm -rf "$target" && mkdir -p "$target"
  tar -xzf "$work/$tarball" -C "$target" --strip-components=1
  node -e '
    const [file, range, integrity] = process.argv.slice(1);
    const pkg = JSON.parse(require("fs").readFileSync(file, "utf8"));
    pkg.engines = { node: range };
    // npm installs the devDependencies of a linked folder and runs its scripts: neither is wanted.
    delete pkg.devDependencies;
    delete pkg.scripts;
    pkg.vendored = { from: `${pkg.name}@${pkg.version}`, integrity, change: "engines.node set; devDependencies and scripts removed" };
    require("fs").writeFileSync(file, JSON.stringify(pkg, null, 2) + "\n");
  ' "$target/package.json" "$range" "$integrity"
  echo "vendor: $spec -> $target (engines.node: $range)"
done <<'LIST'
@platformatic/dynamic-buffer@0.3.1 sha512-xQD5JSkQc4D15suOk7FezGDmh6Vb5e4phDoFZ/ASpa3Ft+3fOVwFOENmHtC1561zm/xHnKwI91NbMF8inpbk0Q==
@platformatic/wasm-utils@0.2.1 sha512-5rNl4h5n+hZG4LjiItQ7bVfHBqTypjldP46NXrOYW64cZr87ahngK1s9nEtCpByWg7WWjRLSxyCytgJK5gNdwQ==
LIST
